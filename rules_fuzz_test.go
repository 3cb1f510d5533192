package ratelimit

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseRules: ParseRules never panics; its errors match ErrInvalidRule;
// the rules it accepts, written back as a configuration, read back the same.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{
		socialConfig,
		"POST /posts: 1/s per user\n*: 10,000/s global",
		"GET /search:   30/m      burst 10   per ip    as search  # comment",
		"a: 5 per 2s per user as x as y",
		"a:: 1/s global\na:\t2/s global",
		"x: 1/s per user\nx: 1/s per user",
		"x: 0/s global", "x: 1/s burst 0 global", "x: 1/s as", ": 1/s global", "x 1/s global",
		"x: 9223372036854775807/ns global", "x: 1/106751d burst 2 global", "x: 1_000/h PER IP",
		"POST /login: 5/m per ip block 15m after 5", "x: 1/s global block 1h30m after 3 within 90s shadow as b",
		"*: 1000/s global fair per user", "*: 5/m burst 2 global fair per ip block 1m after 2 shadow as f",
		"*: 1/s per user fair per user", "*: 1/s global fair per global", "*: 1/s global fair",
		"*: 1000/s global classes critical=200,normal=100,sheddable", "*: 10/s global fair per user classes a=5,b shadow",
		"*: 10/s global classes a=11,b", "*: 10/s global classes a,b", "*: 10/s per ip classes a=1", "*: 1/s global classes",
		"*: 10/s global classes a=1,a=1", "*: 10/s global classes =1", "*: 10/s global classes a=-1", "*: 10/s global classes a=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, config string) {
		rs, err := ParseRules(config)
		if err != nil {
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("ParseRules(%q): error %v does not match ErrInvalidRule", config, err)
			}
			return
		}
		defer rs.Close()
		classes := append(rs.Classes(), "\x00 a class of no rule")
		var b strings.Builder
		seen := map[string]bool{}
		for _, c := range classes {
			for _, r := range rs.For(c).Rules() {
				if seen[r.Name] {
					continue
				}
				seen[r.Name] = true
				b.WriteString(r.Class + ": " + r.Rate.String() + " burst " + strconv.Itoa(r.Burst) + " " + r.Scope.String() + r.fairText() + r.classesText() + r.Penalty.text())
				if r.Shadow {
					b.WriteString(" shadow")
				}
				if r.Name != r.Class+" "+r.Rate.String()+" "+r.Scope.String()+r.fairText() {
					b.WriteString(" as " + r.Name)
				}
				b.WriteString("\n")
			}
		}
		back, err := ParseRules(b.String())
		if err != nil {
			t.Fatalf("ParseRules(%q) accepted; written back as %q it fails: %v", config, b.String(), err)
		}
		defer back.Close()
		for _, c := range classes {
			got, want := back.For(c).Rules(), rs.For(c).Rules()
			if len(got) != len(want) {
				t.Fatalf("class %q: %d rules read back, want %d (config %q, written %q)", c, len(got), len(want), config, b.String())
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.Class != w.Class || g.Name != w.Name || g.Rate != w.Rate || g.Burst != w.Burst || g.Scope != w.Scope || g.Penalty != w.Penalty || g.Fair != w.Fair || g.Shadow != w.Shadow || !slices.Equal(g.Classes, w.Classes) {
					t.Fatalf("class %q rule %d: read back %+v, want %+v (written %q)", c, i, g, w, b.String())
				}
			}
		}
	})
}
