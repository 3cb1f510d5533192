// Package accesslog reads the lines of HTTP access logs: the common and
// combined log formats of nginx and Apache, and JSON lines.
//
// A Parser fills an Entry from one line without allocating: the Entry's
// byte fields point into the line (or into the Parser's own buffers for a
// JSON string with escapes) and are valid until the next call to Parse.
// Timestamps are read by hand, not by time.Parse: the date and zone of
// the previous line are remembered, so a line of the same day costs a
// comparison and a few digits.
//
// Rules:
//  1. Parse never panics and never returns a half-filled Entry as valid:
//     a line it cannot read fully returns an error (wrapping ErrMalformed)
//     saying what is wrong.
//  2. Times are exact: Entry.Time is the instant the line names, in Unix
//     nanoseconds, with the line's time zone honoured (the offset of a
//     common-log date, the zone of an RFC 3339 time).
package accesslog

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed is matched by every error Parse returns.
var ErrMalformed = errors.New("malformed log line")

// Format is a log format.
type Format uint8

const (
	// Common is the Common Log Format: host ident user [date] "request"
	// status bytes.
	Common Format = iota + 1
	// Combined is the combined log format (nginx's default, Apache's
	// "combined"): Common followed by "referer" "user-agent".
	Combined
	// JSON is one JSON object per line (see Fields).
	JSON
)

// Formats lists the names ParseFormat knows.
var Formats = []string{"combined", "common", "json"}

// String returns the format's name as ParseFormat reads it.
func (f Format) String() string {
	switch f {
	case Common:
		return "common"
	case Combined:
		return "combined"
	case JSON:
		return "json"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat returns the format named s ("combined", "common", "json";
// "jsonl" and "ndjson" are read as "json").
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "combined":
		return Combined, nil
	case "common", "clf":
		return Common, nil
	case "json", "jsonl", "ndjson":
		return JSON, nil
	}
	return 0, fmt.Errorf("unknown log format %q: the formats supported are %s", s, strings.Join(Formats, ", "))
}

// Fields names the members of a JSON line that the parser reads. The zero
// value of a field takes its default.
type Fields struct {
	Time   string // default "time": an RFC 3339 string, a common-log date, or Unix seconds as a number
	IP     string // default "remote_addr"
	User   string // default "user"
	Method string // default "method"
	Path   string // default "path"
}

func (f Fields) withDefaults() Fields {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&f.Time, "time")
	def(&f.IP, "remote_addr")
	def(&f.User, "user")
	def(&f.Method, "method")
	def(&f.Path, "path")
	return f
}

// Entry is what a line says about one request. The byte slices are valid
// until the next Parse.
type Entry struct {
	Time   int64  // Unix nanoseconds
	IP     []byte // the client address as written
	User   []byte // empty if none ("-" in the common log)
	Method []byte
	Path   []byte // the request target as written, query included
}

// Parser reads lines of one format. It is not safe for concurrent use.
type Parser struct {
	format Format
	fields Fields
	dates  dateCache
	scr    [5][]byte // unescaped JSON strings, one buffer per field
}

// NewParser returns a parser of lines in format f; fields matters for JSON
// only.
func NewParser(f Format, fields Fields) (*Parser, error) {
	if f < Common || f > JSON {
		return nil, fmt.Errorf("unknown log format %v: the formats supported are %s", f, strings.Join(Formats, ", "))
	}
	return &Parser{format: f, fields: fields.withDefaults()}, nil
}

// Parse reads line (without its newline) into e.
func (p *Parser) Parse(line []byte, e *Entry) error {
	*e = Entry{}
	if p.format == JSON {
		return p.parseJSON(line, e)
	}
	return p.parseCLF(line, e)
}

func malformed(what string) error { return fmt.Errorf("%w: %s", ErrMalformed, what) }

// field returns the bytes of line from i up to the next space, and the
// index after that space.
func field(line []byte, i int) ([]byte, int, bool) {
	for j := i; j < len(line); j++ {
		if line[j] == ' ' {
			return line[i:j], j + 1, true
		}
	}
	return nil, len(line), false
}

// quoted reads a "..." field at line[i:] (with \" and \\ escapes left as
// written) and returns its contents and the index after the closing quote.
func quoted(line []byte, i int) ([]byte, int, bool) {
	if i >= len(line) || line[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(line); j++ {
		switch line[j] {
		case '\\':
			j++
		case '"':
			return line[i+1 : j], j + 1, true
		}
	}
	return nil, len(line), false
}

func (p *Parser) parseCLF(line []byte, e *Entry) error {
	ip, i, ok := field(line, 0)
	if !ok || len(ip) == 0 {
		return malformed("no client address")
	}
	if _, i, ok = field(line, i); !ok { // ident
		return malformed("no ident field")
	}
	user, i, ok := field(line, i)
	if !ok {
		return malformed("no user field")
	}
	if i >= len(line) || line[i] != '[' {
		return malformed("no [date]")
	}
	end := i + 1
	for end < len(line) && line[end] != ']' {
		end++
	}
	if end == len(line) {
		return malformed("unterminated [date]")
	}
	t, err := p.dates.clf(line[i+1 : end])
	if err != nil {
		return err
	}
	i = end + 1
	if i >= len(line) || line[i] != ' ' {
		return malformed("no request after the date")
	}
	req, i, ok := quoted(line, i+1)
	if !ok {
		return malformed("no quoted request")
	}
	sp := indexByte(req, ' ')
	if sp <= 0 {
		return malformed(`request is not "METHOD target PROTOCOL"`)
	}
	method, target := req[:sp], req[sp+1:]
	if sp2 := indexByte(target, ' '); sp2 >= 0 {
		target = target[:sp2]
	}
	if len(target) == 0 {
		return malformed("request without a target")
	}
	// status and bytes
	if i >= len(line) || line[i] != ' ' {
		return malformed("no status after the request")
	}
	if _, i, ok = field(line, i+1); !ok {
		return malformed("no status")
	}
	if p.format == Combined {
		_, j, ok := field(line, i) // bytes
		if !ok {
			return malformed("no referer (the combined format has referer and user agent)")
		}
		if _, j, ok = quoted(line, j); !ok {
			return malformed("no quoted referer")
		}
		if j >= len(line) || line[j] != ' ' {
			return malformed("no user agent")
		}
		if _, _, ok = quoted(line, j+1); !ok {
			return malformed("no quoted user agent")
		}
	} else if i >= len(line) {
		return malformed("no byte count")
	}
	if len(user) == 1 && user[0] == '-' {
		user = nil
	}
	e.Time, e.IP, e.User, e.Method, e.Path = t, ip, user, method, target
	return nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
