// Package field writes the parts of the rate-limit fields shared by the
// HTTP headers (httplimit) and the gRPC metadata (grpclimit): the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers
// and Retry-After's delay-seconds.
package field

import (
	"strconv"
	"strings"
	"time"
)

// CeilSeconds rounds d up to whole seconds: the only precision the fields'
// seconds have, and never earlier than the exact delay; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// String writes name as a Structured Field string: quoted, with '"' and
// '\' escaped. Bytes a string may not hold (controls, non-ASCII) become
// '?', so that any name yields a valid field.
func String(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 2)
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// PolicyItem is one RateLimit-Policy list member, item;q=quota[;w=window],
// where item is a String and the window is left out when not positive.
func PolicyItem(item string, quota int, window time.Duration) string {
	s := item + ";q=" + strconv.Itoa(quota)
	if w := CeilSeconds(window); w > 0 {
		s += ";w=" + strconv.FormatInt(w, 10)
	}
	return s
}
