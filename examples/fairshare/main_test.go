package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The demo's story holds: without fair share the flood crowds a, b and c
// out; with it they keep their requests, and after the flood nothing is
// refused. Every line fits 80 columns.
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
	plain, fair, ok := strings.Cut(out, "*: 100/s global fair per user")
	if !ok {
		t.Fatalf("no fair table:\n%s", out)
	}
	for _, want := range []string{"     3     100      0      0      0       960"} {
		if !strings.Contains(plain, want) {
			t.Errorf("first come, first served lacks %q:\n%s", want, plain)
		}
	}
	for _, want := range []string{
		"     2     139     20     20     20       861",
		"     4      42     20     20     20       958",
		"     7       0     20     20     20         0",
	} {
		if !strings.Contains(fair, want) {
			t.Errorf("fair table lacks %q:\n%s", want, fair)
		}
	}
}
