package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The plain client is refused; the client with grpclimit.Client is
// refused at most once, then served; every line fits 80 columns.
func TestOutput(t *testing.T) {
	var b bytes.Buffer
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	section, refused := 0, map[int]int{}
	served := 0
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
		switch {
		case strings.HasSuffix(l, "5 calls back to back:"):
			section++
		case strings.Contains(l, "ResourceExhausted"):
			refused[section]++
			if !strings.Contains(l, "retry in ") {
				t.Errorf("a refusal without RetryInfo: %q", l)
			}
		case strings.Contains(l, " OK "):
			if section == 2 {
				served++
			}
		}
	}
	if refused[1] < 1 || refused[2] > 1 || served < 4 {
		t.Errorf("plain client refused %d times; paced client refused %d times and served %d:\n%s",
			refused[1], refused[2], served, b.String())
	}
}
