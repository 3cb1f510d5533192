package accesslog

import (
	"bytes"
	"time"
)

// dateCache remembers the last date and zone read, as the Unix second of
// that day's midnight in that zone, so that lines of the same day are read
// without a calendar computation.
type dateCache struct {
	clfKey [16]byte // "02/Jan/2006-0700"
	clfOK  bool
	clfDay int64
	isoKey [16]byte // "2006-01-02" and the zone as written, up to 6 bytes
	isoLen int
	isoOK  bool
	isoDay int64
}

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

func digits(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// zoneOffset reads "+hhmm", "-hhmm", "+hh:mm", "-hh:mm" or "Z".
func zoneOffset(z []byte) (int64, bool) {
	if len(z) == 1 && (z[0] == 'Z' || z[0] == 'z') {
		return 0, true
	}
	if len(z) != 5 && len(z) != 6 || z[0] != '+' && z[0] != '-' {
		return 0, false
	}
	hh, ok1 := digits(z[1:3])
	mmb := z[3:]
	if len(z) == 6 {
		if z[3] != ':' {
			return 0, false
		}
		mmb = z[4:]
	}
	mm, ok2 := digits(mmb)
	if !ok1 || !ok2 || hh > 23 || mm > 59 {
		return 0, false
	}
	off := int64(hh*3600 + mm*60)
	if z[0] == '-' {
		off = -off
	}
	return off, true
}

// midnight returns the Unix second of 00:00:00 on y-m-d in a zone off
// seconds east of UTC, or false if the date does not exist.
func midnight(y, m, d int, off int64) (int64, bool) {
	if y < 1 || y > 9999 || m < 1 || m > 12 || d < 1 || d > 31 {
		return 0, false
	}
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.Day() != d { // 31 April and the like
		return 0, false
	}
	return t.Unix() - off, true
}

// clock reads "15:04:05" as seconds since midnight.
func clockOf(b []byte) (int64, bool) {
	if len(b) != 8 || b[2] != ':' || b[5] != ':' {
		return 0, false
	}
	h, ok1 := digits(b[0:2])
	m, ok2 := digits(b[3:5])
	s, ok3 := digits(b[6:8])
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || s > 60 {
		return 0, false
	}
	return int64(h*3600 + m*60 + s), true
}

// clf reads a common-log date, "10/Oct/2000:13:55:36 -0700".
func (c *dateCache) clf(b []byte) (int64, error) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[20] != ' ' {
		return 0, malformed("date is not dd/Mon/yyyy:hh:mm:ss +zzzz")
	}
	var key [16]byte
	copy(key[:11], b[:11])
	copy(key[11:], b[21:26])
	if !c.clfOK || key != c.clfKey {
		d, ok1 := digits(b[0:2])
		y, ok2 := digits(b[7:11])
		m := 0
		for i, name := range months {
			if string(b[3:6]) == name {
				m = i + 1
			}
		}
		off, ok3 := zoneOffset(b[21:26])
		if !ok1 || !ok2 || !ok3 || m == 0 {
			return 0, malformed("date is not dd/Mon/yyyy:hh:mm:ss +zzzz")
		}
		day, ok := midnight(y, m, d, off)
		if !ok {
			return 0, malformed("no such date")
		}
		c.clfKey, c.clfDay, c.clfOK = key, day, true
	}
	s, ok := clockOf(b[12:20])
	if !ok {
		return 0, malformed("time of day is not hh:mm:ss")
	}
	return (c.clfDay + s) * 1e9, nil
}

// iso reads an RFC 3339 time, "2006-01-02T15:04:05.999999999Z07:00" (a
// space for the T, and a zone without its colon, are accepted too).
func (c *dateCache) iso(b []byte) (int64, error) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != 't' && b[10] != ' ') {
		return 0, malformed("time is not RFC 3339")
	}
	s, ok := clockOf(b[11:19])
	if !ok {
		return 0, malformed("time of day is not hh:mm:ss")
	}
	rest := b[19:]
	var frac int64
	if rest[0] == '.' || rest[0] == ',' {
		j := 1
		scale := int64(1e8)
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			if scale > 0 {
				frac += int64(rest[j]-'0') * scale
				scale /= 10
			}
			j++
		}
		if j == 1 {
			return 0, malformed("empty fraction of a second")
		}
		rest = rest[j:]
	}
	zone := rest
	if len(zone) > 6 {
		return 0, malformed("time zone is not Z or ±hh:mm")
	}
	var key [16]byte
	copy(key[:10], b[:10])
	copy(key[10:], zone)
	n := 10 + len(zone)
	if !c.isoOK || c.isoLen != n || !bytes.Equal(key[:n], c.isoKey[:n]) {
		y, ok1 := digits(b[0:4])
		m, ok2 := digits(b[5:7])
		d, ok3 := digits(b[8:10])
		off, ok4 := zoneOffset(zone)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return 0, malformed("time is not RFC 3339")
		}
		day, ok := midnight(y, m, d, off)
		if !ok {
			return 0, malformed("no such date")
		}
		c.isoKey, c.isoLen, c.isoDay, c.isoOK = key, n, day, true
	}
	return (c.isoDay+s)*1e9 + frac, nil
}

// unix reads seconds since the epoch, "1700000000" or "1700000000.25".
func unixSeconds(b []byte) (int64, error) {
	dot := indexByte(b, '.')
	ip := b
	if dot >= 0 {
		ip = b[:dot]
	}
	if len(ip) == 0 || len(ip) > 11 {
		return 0, malformed("time is not Unix seconds")
	}
	sec, ok := digits(ip)
	if !ok {
		return 0, malformed("time is not Unix seconds")
	}
	var frac int64
	if dot >= 0 {
		scale := int64(1e8)
		fb := b[dot+1:]
		if len(fb) == 0 {
			return 0, malformed("time is not Unix seconds")
		}
		for _, c := range fb {
			if c < '0' || c > '9' {
				return 0, malformed("time is not Unix seconds")
			}
			frac += int64(c-'0') * scale
			scale /= 10
		}
	}
	return int64(sec)*1e9 + frac, nil
}
