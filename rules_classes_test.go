package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Invariant: under a rule with classes, a class's requests within its
// reserve per window are never refused, whatever the lower classes send;
// the rule's token bucket bound (burst + ⌊rate·D⌋ in any interval of
// length D) holds over every pair of allowed instants; and the lowest
// class gets what the reserves above it do not use.
func TestRulesClassesReserve(t *testing.T) {
	const n, reserve = 20, 6
	for seed := range uint64(5) {
		clock := NewManualClock(t0)
		rs, err := ParseRules("*: 20/s global classes critical=6,batch", WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 3))
		crit := ContextWithPriority(context.Background(), 0)
		var allowed []int64 // instants of allowed requests, ns after t0
		batchGot := 0
		for w := range 10 {
			critAsked, critGot := 0, 0
			critDemand := rng.IntN(reserve + 1)
			for step := range 200 {
				at := int64(w)*int64(time.Second) + int64(step)*int64(5*time.Millisecond)
				clock.Set(t0.Add(time.Duration(at)))
				// The batch class floods: five requests every 5 ms, four
				// without a priority (the lowest class), one naming it.
				for i := range 5 {
					ctx := context.Background()
					if i == 4 {
						ctx = ContextWithPriority(ctx, 1)
					}
					d, err := rs.Check(ctx, "GET /export", Subject{}, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						batchGot++
						allowed = append(allowed, at)
					}
				}
				if critAsked < critDemand && rng.IntN(40) == 0 || critAsked < critDemand && step >= 190 {
					critAsked++
					d, err := rs.Check(crit, "POST /pay", Subject{}, 1)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						t.Fatalf("seed %d window %d: critical request %d of %d (reserve %d) refused under the batch flood", seed, w, critAsked, critDemand, reserve)
					}
					critGot++
					allowed = append(allowed, at)
				}
			}
			if critGot != critDemand {
				t.Fatalf("seed %d window %d: critical got %d of %d", seed, w, critGot, critDemand)
			}
		}
		// The token bucket's bound over every pair of allowed instants.
		for i := range allowed {
			for j := i; j < len(allowed); j++ {
				d := allowed[j] - allowed[i]
				if bound := int64(n) + d*n/int64(time.Second); int64(j-i+1) > bound {
					t.Fatalf("seed %d: %d allowed in %v, bound %d", seed, j-i+1, time.Duration(d), bound)
				}
			}
		}
		if batchGot < 10*(n-reserve) {
			t.Fatalf("seed %d: batch got %d over 10 windows, want at least %d (what the reserve leaves)", seed, batchGot, 10*(n-reserve))
		}
		rs.Close()
	}

	// Without classes the same flood leaves the critical requests nothing.
	clock := NewManualClock(t0)
	rs, err := ParseRules("*: 20/s global", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for range 40 {
		rs.Check(context.Background(), "GET /export", Subject{}, 1)
	}
	if d, _ := rs.Check(ContextWithPriority(context.Background(), 0), "POST /pay", Subject{}, 1); d.Allowed {
		t.Fatal("without classes a flood should leave nothing: the test shows nothing")
	}
}

// A priority naming no class fails the check with ErrUnknownClass and
// books nothing; classes with fair per user split each class's share among
// the users; other rules of the request ignore the priority.
func TestRulesClassesPriority(t *testing.T) {
	clock := NewManualClock(t0)
	rs, err := ParseRules("POST /x: 5/s per user as own\n*: 4/s global fair per user classes hi=2,lo as shared", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, ok := rs.For("*").Rules()[0].Limiter.(*Fair); !ok {
		t.Fatalf("a rule with classes is checked through a %T", rs.For("*").Rules()[0].Limiter)
	}
	bad := ContextWithPriority(context.Background(), 2)
	if _, err := rs.Check(bad, "POST /x", Subject{User: "ann"}, 1); !errors.Is(err, ErrUnknownClass) {
		t.Fatalf("priority 2 of two classes: %v, want ErrUnknownClass", err)
	}
	// Nothing booked by the failed check: ann's own rule still has 5. The
	// low class gets what hi's reserve leaves (2 of 4); then hi its 2.
	own := 5
	for i, want := range []struct {
		p       Priority
		allowed bool
	}{{1, true}, {1, true}, {1, false}, {0, true}, {0, true}, {0, false}} {
		d, err := rs.Check(ContextWithPriority(context.Background(), want.p), "POST /x", Subject{User: "ann"}, 1)
		if err != nil || d.Allowed != want.allowed {
			t.Fatalf("request %d (priority %d): %+v %v, want allowed %v", i, want.p, d, err, want.allowed)
		}
		if d.Allowed {
			own--
		}
		if got := d.At(0).Remaining; got != own {
			t.Fatalf("request %d: own rule has %d left, want %d (a refused check books nothing)", i, got, own)
		}
	}
}

// Bad classes are refused with an error naming the problem, never taken
// as no classes.
func TestRulesClassesBadInput(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{"*: 10/s global classes", "without a list"},
		{"*: 10/s global classes a=x", "not a count"},
		{"*: 10/s global classes a=-1", "not a count"},
		{"*: 10/s global classes a=1,a", "named twice"},
		{"*: 10/s global classes =1,b", "without a name"},
		{"*: 10/s global classes a,b", "no class reserves anything"},
		{"*: 10/s global classes a=6,b=5", "more than the limit"},
		{"*: 10/s per user classes a=1,b", "scope must be global"},
	} {
		_, err := ParseRules(c.config)
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an ErrInvalidRule saying %q", c.config, err, c.want)
		}
	}
	for _, r := range []Rule{
		{Class: "*", Rate: PerSecond(10), Scope: Global, Classes: []Class{{Name: "a b", Reserved: 1}}},
		{Class: "*", Rate: PerSecond(10), Scope: Global, Classes: []Class{{Name: "a,b", Reserved: 1}}},
		{Class: "*", Rate: PerSecond(10), Scope: Global, Classes: []Class{{Name: "a", Reserved: 1}}, Limiter: mustTB(t)},
	} {
		if _, err := NewRules([]Rule{r}); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%+v: %v, want ErrInvalidRule", r.Classes, err)
		}
	}
}

func mustTB(t *testing.T) *TokenBucket {
	tb, err := NewTokenBucket(PerSecond(10), 10)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// A reload that keeps a rule's classes keeps its Fair and state; one that
// changes them builds the rule afresh. The text form reads back the same.
func TestRulesClassesReload(t *testing.T) {
	clock := NewManualClock(t0)
	line := "*: 4/s global classes hi=2,lo as shared"
	rs, err := ParseRules(line, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	r := rs.For("*").Rules()[0]
	if got := r.text(); got != "*: 4/s burst 4 global classes hi=2,lo as shared" {
		t.Fatalf("text %q", got)
	}
	before := r.Limiter
	if err := rs.Reload(line + "\nPOST /x: 1/s per user"); err != nil {
		t.Fatal(err)
	}
	if rs.For("*").Rules()[0].Limiter != before {
		t.Fatal("an unrelated reload rebuilt the rule with classes")
	}
	if err := rs.Reload("*: 4/s global classes hi=3,lo as shared"); err != nil {
		t.Fatal(err)
	}
	if rs.For("*").Rules()[0].Limiter == before {
		t.Fatal("a change of the classes kept the old Fair")
	}
}

// A rule whose other classes reserve the whole burst or more leaves a
// class refused on an idle rule, whatever it asks: a request past its
// class's reserve needs the bucket's Remaining (at most the burst) above
// what the other classes have still to use. Such a rule is refused
// loudly. Each accepted rule of the table lets its lowest class (which
// reserves nothing) through on an idle rule; each refused one would have
// refused it for a whole window.
func TestRulesClassesFitBurst(t *testing.T) {
	for _, c := range []struct {
		config string
		ok     bool
	}{
		{"*: 1000/s burst 100 global classes critical=200,normal", false},
		{"*: 1000/s burst 100 global classes critical=100,normal", false},
		{"*: 1000/s burst 101 global classes critical=100,normal", true},
		{"*: 10/s global classes a=10,b", false},
		{"*: 10/s global classes a=9,b", true},
		{"*: 10/s global classes a=5,b=5", true},
		{"*: 10/s burst 5 global classes a=5,b=5", false},
		{"*: 10/s burst 6 global fair per user classes a=5,b=5", true},
		{"*: 10/s burst 3 global fair per user classes a=2,b=1,c", false},
	} {
		clock := NewManualClock(t0)
		rs, err := ParseRules(c.config, WithClock(clock))
		if !c.ok {
			if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), "never take a request beyond its reserve") {
				t.Errorf("%q: %v, want an ErrInvalidRule", c.config, err)
			}
			// What the rule would do: the class reserving least is allowed
			// its reserve in a window and nothing more, though it alone
			// asks, on every step.
			r, perr := parseRule(c.config)
			if perr != nil {
				t.Fatal(perr)
			}
			if r.Burst == 0 {
				r.Burst = int(r.Rate.N)
			}
			tb, err := NewTokenBucket(r.Rate, r.Burst, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFair(tb, r.Rate, WithClasses(r.Classes...), WithFairClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			low := 0
			for i, cl := range r.Classes {
				if cl.Reserved < r.Classes[low].Reserved {
					low = i
				}
			}
			got := int64(0)
			for i := range 100 {
				clock.Set(t0.Add(time.Duration(i) * r.Rate.Period / 100))
				if f.AllowPriority("u", Priority(low)) {
					got++
				}
			}
			if got > r.Classes[low].Reserved {
				t.Fatalf("%q: class %q alone was allowed %d in a window, past its reserve: the rule need not be refused", c.config, r.Classes[low].Name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.config, err)
			continue
		}
		if d, err := rs.Check(context.Background(), "x", Subject{User: "u"}, 1); err != nil || !d.Allowed {
			t.Errorf("%q: the lowest class refused on an idle rule: %+v, %v", c.config, d, err)
		}
		rs.Close()
	}
}

// "as" names the rule with the rest of the line: classes or a penalty
// written after it would have named the rule and been dropped without a
// word (the rule a plain global limit). They are refused; words that are
// no modifier stay part of the name, and a rule written with its default
// name (a fair rule's ends in "fair per user") still reads back.
func TestRulesModifiersAfterName(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{"*: 10/s global as api classes a=5,b", `"classes" after "as"`},
		{"*: 10/s global fair per user as api CLASSES hi=2,lo", `"classes" after "as"`},
		{"POST /login: 5/m per ip as login block 15m after 5", `"block" after "as"`},
	} {
		_, err := ParseRules(c.config)
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an ErrInvalidRule saying %s", c.config, err, c.want)
		}
	}
	for _, c := range []struct{ config, name string }{
		{"*: 10/s global as api classes", "api classes"},
		{"*: 10/s global as block list", "block list"},
		{"*: 10/s global classes a=5,b as api", "api"},
	} {
		rs, err := ParseRules(c.config)
		if err != nil {
			t.Errorf("%q: %v", c.config, err)
			continue
		}
		if r := rs.For("*").Rules()[0]; r.Name != c.name {
			t.Errorf("%q: name %q, want %q", c.config, r.Name, c.name)
		}
		rs.Close()
	}
	rs, err := ParseRules("*: 10/s global fair per user classes a=5,b block 1m after 3")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	r := rs.For("*").Rules()[0]
	back, err := parseRule(r.text())
	if err != nil || back.Name != r.Name || !slices.Equal(back.Classes, r.Classes) || back.Penalty != r.Penalty || back.Fair != r.Fair {
		t.Fatalf("%q reads back %+v, %v", r.text(), back, err)
	}
}
