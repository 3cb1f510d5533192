package ratelimit

import (
	"errors"
	"testing"
)

// FuzzParseRate: never panics; whatever it accepts is valid and reads
// back the same through String.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"2/s", "150/day", "5 per 2s", "1000/h", "7/1m30s", "0/s", "-1/s",
		"1/0s", "9223372036854775807/ns", "1/2562047h", "1/106751d", "x", "/", "1 per", "3/seconds", "1/µs",
		"5/2min", "10/2hrs", "10/2 days", "5 per 2 minutes", "1/1m 30s", "1/3MS", "1/9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRate) {
				t.Fatalf("ParseRate(%q) error %v does not match ErrInvalidRate", s, err)
			}
			return
		}
		if !r.Valid() {
			t.Fatalf("ParseRate(%q) accepted an invalid rate %+v", s, r)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %+v; String %q reads back as %+v, %v", s, r, r.String(), back, err)
		}
	})
}
