package accesslog

import (
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON reader reads one object per line, its members in any order;
// values of members it does not want (objects, arrays, numbers, literals)
// are skipped, checked only as far as finding where they end.

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// jsonString reads the string that starts at b[i] == '"': its raw
// contents, whether they hold escapes, and the index after it.
func jsonString(b []byte, i int) (raw []byte, esc bool, next int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\':
			esc = true
			j++
		case c == '"':
			return b[i+1 : j], esc, j + 1, true
		case c < 0x20:
			return nil, false, j, false
		}
	}
	return nil, false, len(b), false
}

// skipValue returns the index after the value at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		_, _, j, ok := jsonString(b, i)
		return j, ok
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				_, _, k, ok := jsonString(b, j)
				if !ok {
					return k, false
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return len(b), false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ' ' && b[j] != '\t' {
		j++
	}
	return j, j > i
}

// unescape appends the JSON string contents raw, escapes resolved, to dst.
func unescape(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(raw) {
			return dst, false
		}
		switch raw[i] {
		case '"', '\\', '/':
			dst = append(dst, raw[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				return dst, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, ok = hex4(raw, i+3)
				}
				if ok {
					r = utf16.DecodeRune(r, r2)
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// keyIs reports whether the raw member name equals name.
func keyIs(raw []byte, esc bool, name string, scratch *[]byte) bool {
	if !esc {
		return string(raw) == name
	}
	u, ok := unescape((*scratch)[:0], raw)
	*scratch = u
	return ok && string(u) == name
}

func (p *Parser) parseJSON(line []byte, e *Entry) error {
	i := skipWS(line, 0)
	if i >= len(line) || line[i] != '{' {
		return malformed("not a JSON object")
	}
	i = skipWS(line, i+1)
	var haveTime bool
	var keyScratch []byte
	names := [5]string{p.fields.Time, p.fields.IP, p.fields.User, p.fields.Method, p.fields.Path}
	var vals [5][]byte
	var isNum [5]bool
	if i < len(line) && line[i] == '}' {
		i++
	} else {
		for {
			if i >= len(line) || line[i] != '"' {
				return malformed("JSON member name expected")
			}
			kraw, kesc, j, ok := jsonString(line, i)
			if !ok {
				return malformed("bad JSON string")
			}
			j = skipWS(line, j)
			if j >= len(line) || line[j] != ':' {
				return malformed("':' expected after a JSON member name")
			}
			j = skipWS(line, j+1)
			which := -1
			for k, n := range names {
				if keyIs(kraw, kesc, n, &keyScratch) {
					which = k
					break
				}
			}
			if which >= 0 && j < len(line) && line[j] == '"' {
				raw, esc, k, ok := jsonString(line, j)
				if !ok {
					return malformed("bad JSON string")
				}
				if esc {
					u, ok := unescape(p.scr[which][:0], raw)
					if !ok {
						return malformed("bad escape in a JSON string")
					}
					p.scr[which], raw = u, u
				}
				vals[which], isNum[which] = raw, false
				if which == 0 {
					haveTime = true
				}
				j = k
			} else {
				k, ok := skipValue(line, j)
				if !ok {
					return malformed("bad JSON value")
				}
				if which >= 0 {
					v := line[j:k]
					if string(v) == "null" {
						vals[which] = nil
					} else {
						vals[which], isNum[which] = v, true
						if which == 0 {
							haveTime = true
						}
					}
				}
				j = k
			}
			j = skipWS(line, j)
			if j < len(line) && line[j] == ',' {
				i = skipWS(line, j+1)
				continue
			}
			if j < len(line) && line[j] == '}' {
				i = j + 1
				break
			}
			return malformed("',' or '}' expected in a JSON object")
		}
	}
	if skipWS(line, i) != len(line) {
		return malformed("text after the JSON object")
	}
	if !haveTime {
		return malformed("no " + quote(p.fields.Time) + " member (the time)")
	}
	var err error
	var tm int64
	switch t := vals[0]; {
	case isNum[0]:
		tm, err = unixSeconds(t)
	case len(t) == 26 && t[2] == '/':
		tm, err = p.dates.clf(t)
	default:
		tm, err = p.dates.iso(t)
	}
	if err != nil {
		return err
	}
	for k := 1; k < 5; k++ {
		if isNum[k] {
			return malformed("member " + quote(names[k]) + " is not a string")
		}
	}
	if len(vals[1]) == 0 && len(vals[2]) == 0 {
		return malformed("neither " + quote(p.fields.IP) + " nor " + quote(p.fields.User) + " (no client)")
	}
	if len(vals[4]) == 0 {
		return malformed("no " + quote(p.fields.Path) + " member (the path)")
	}
	e.Time, e.IP, e.User, e.Method, e.Path = tm, vals[1], vals[2], vals[3], vals[4]
	if len(e.User) == 1 && e.User[0] == '-' {
		e.User = nil
	}
	if len(e.Method) == 0 {
		e.Method = get
	}
	return nil
}

var get = []byte("GET")

func quote(s string) string { return `"` + s + `"` }
