package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// output runs the demo and returns its lines, checking that make demo
// shows them within 80 columns.
func output(t *testing.T) []string {
	t.Helper()
	var b bytes.Buffer
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
	}
	return lines
}

func TestOutput(t *testing.T) {
	lines := output(t)
	// The title, a blank line, the header and one line per request.
	if len(lines) != 3+16 {
		t.Fatalf("%d lines, want 19", len(lines))
	}
	if denied := strings.Count(strings.Join(lines, "\n"), "DENIED"); denied == 0 {
		t.Error("no request denied: the demo shows nothing of the limit")
	}
}
