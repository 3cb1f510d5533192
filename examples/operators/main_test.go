package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The demo's story holds: the tiers, the raise, the refused change, the
// reset and the settled costs, every line within 80 columns.
func TestOutput(t *testing.T) {
	var b bytes.Buffer
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for i, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
	}
	for _, want := range []string{
		"burst of user:bob     5",
		"burst of user:acme   50",
		"user:bob  10 (the new rate; acme keeps its tier: 16)",
		"ratelimit: invalid rate",
		"support resets user:bob: 20 at once",
		"used   300:  9700 left",
		"used  9000:     0 left",
		"next call in 34.8s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
