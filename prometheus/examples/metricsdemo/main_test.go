package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The page shows the burst as the rules decided it: per client 5 served
// and 3 refused by the enforced rule, 2 allowed and 3 would-denies by the
// shadow rule; no key appears; every line fits 80 columns.
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
		"15 served, 9 refused (429)",
		`ratelimit_decisions_total{limiter="api",outcome="denied"} 9`,
		`ratelimit_decisions_total{limiter="api-strict",outcome="allowed"} 6`,
		`ratelimit_decisions_total{limiter="api-strict",outcome="would_deny"} 9`,
		`ratelimit_keys{limiter="api"} 3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "198.51.100.") {
		t.Error("a client address appears on the metrics page")
	}
}
