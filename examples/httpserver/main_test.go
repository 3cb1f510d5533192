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

// The demo explains its choices: the 401 where the library says 403, and
// the address the server resolved from X-Forwarded-For.
func TestOutput(t *testing.T) {
	text := strings.Join(output(t), "\n")
	for _, want := range []string{
		"(anon) POST /posts  -> 401  sign in first",
		"default\nanswer to a request without a key is 403 Forbidden",
		`httplimit.ParsePrefixes("127.0.0.1", "::1")`,
		"X-Forwarded-For: 10.9.9.9, 192.0.2.10\n  bob    GET /feed    -> 429",
		"The server keyed it by 192.0.2.10,",
		"carol  POST /posts  -> 201",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}
