package ratelimit

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// groupOfTest puts tenants "free-*" in group 0, "paid-*" in group 1 and
// anything else out of range (OtherGroup).
func groupOfTest(tenant string) int {
	switch {
	case strings.HasPrefix(tenant, "free-"):
		return 0
	case strings.HasPrefix(tenant, "paid-"):
		return 1
	}
	return 9
}

// Every decision of Allow, AllowN and AllowPriority is reported once under
// the tenant's group, as EventFairGroup with the decision's fields; the
// tenant itself never appears in an event; an index out of range is
// OtherGroup; a peek (n == 0) and a failed call report nothing.
func TestFairGroupsEvents(t *testing.T) {
	for _, classes := range []bool{false, true} {
		clk := NewManualClock(t0)
		fw, err := NewFixedWindow(PerSecond(4), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var groups []Event
		opts := []FairOption{WithFairClock(clk), WithFairName("api"),
			WithTenantGroups([]string{"free", "paid"}, groupOfTest),
			WithFairObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventFairGroup {
					mu.Lock()
					groups = append(groups, e)
					mu.Unlock()
				}
			}))}
		if classes {
			opts = append(opts, WithClasses(Class{Name: "hi", Reserved: 1}, Class{Name: "lo"}))
		}
		f, err := NewFair(fw, PerSecond(4), opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		type want struct {
			group   string
			n       int
			allowed bool
		}
		var wants []want
		if f.Allow("free-ann") {
			wants = append(wants, want{"free", 1, true})
		} else {
			t.Fatal("first Allow refused")
		}
		d, err := f.AllowN(ctx, "paid-bob", 2)
		if err != nil {
			t.Fatal(err)
		}
		wants = append(wants, want{"paid", 2, d.Allowed})
		if _, err := f.AllowN(ctx, "paid-bob", 0); err != nil { // a peek: no event
			t.Fatal(err)
		}
		if _, err := f.AllowN(ctx, "paid-bob", 100); !errors.Is(err, ErrExceedsLimit) { // an error: no event
			t.Fatalf("n above the limit: %v", err)
		}
		d, err = f.AllowN(ctx, "someone", 2) // out of range: OtherGroup; past what is left
		if err != nil {
			t.Fatal(err)
		}
		wants = append(wants, want{OtherGroup, 2, d.Allowed})
		if classes {
			ok := f.AllowPriority("free-cy", 0)
			wants = append(wants, want{"free", 1, ok})
		}
		if len(groups) != len(wants) {
			t.Fatalf("classes %v: %d group events, want %d: %+v", classes, len(groups), len(wants), groups)
		}
		for i, w := range wants {
			e := groups[i]
			if e.Limiter != "api" || e.Key != w.group || e.N != w.n || e.Allowed != w.allowed {
				t.Errorf("classes %v: event %d = %+v, want group %q n %d allowed %v", classes, i, e, w.group, w.n, w.allowed)
			}
			for _, tenant := range []string{"ann", "bob", "someone", "cy"} {
				if strings.Contains(e.Key, tenant) {
					t.Errorf("a tenant's name in an event: %+v", e)
				}
			}
		}
		if !wants[len(wants)-1].allowed && !classes && groups[len(groups)-1].RetryAfter <= 0 {
			t.Errorf("a refusal's RetryAfter not carried: %+v", groups[len(groups)-1])
		}
	}
}

// Groups only report: the decisions of a Fair with groups are those of the
// same Fair without, on random traces of tenants, sizes and classes.
func TestFairGroupsSameDecisions(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 51))
		var fairs [2]*Fair
		var clks [2]*ManualClock
		events := 0
		classes := seed%2 == 0
		for i := range fairs {
			clks[i] = NewManualClock(t0)
			tb, err := NewTokenBucket(PerSecond(10), 10, WithClock(clks[i]))
			if err != nil {
				t.Fatal(err)
			}
			opts := []FairOption{WithFairClock(clks[i])}
			if classes {
				opts = append(opts, WithClasses(Class{Name: "hi", Reserved: 3}, Class{Name: "lo"}))
			}
			if i == 1 {
				opts = append(opts, WithTenantGroups([]string{"g0", "g1", "g2"}, func(tenant string) int { return len(tenant) % 4 }),
					WithFairObserver(ObserverFunc(func(e Event) {
						if e.Kind == EventFairGroup {
							events++
						}
					})))
			}
			if fairs[i], err = NewFair(tb, PerSecond(10), opts...); err != nil {
				t.Fatal(err)
			}
		}
		decisions := 0
		for step := range 600 {
			tenant := strings.Repeat("x", 1+rng.IntN(5))
			n := rng.IntN(3)
			ctx := context.Background()
			if classes {
				ctx = ContextWithPriority(ctx, Priority(rng.IntN(2)))
			}
			var got [2]Decision
			var errs [2]error
			useAllow := rng.IntN(2) == 0
			for i, f := range fairs {
				if useAllow {
					got[i] = Decision{Allowed: f.Allow(tenant)}
				} else {
					got[i], errs[i] = f.AllowN(ctx, tenant, n)
				}
			}
			if got[0] != got[1] || (errs[0] == nil) != (errs[1] == nil) {
				t.Fatalf("seed %d step %d: with groups %+v %v, without %+v %v", seed, step, got[1], errs[1], got[0], errs[0])
			}
			if useAllow || n > 0 && errs[0] == nil {
				decisions++
			}
			d := time.Duration(rng.IntN(300)) * time.Millisecond
			clks[0].Advance(d)
			clks[1].Advance(d)
		}
		if events != decisions {
			t.Fatalf("seed %d: %d group events for %d decisions", seed, events, decisions)
		}
	}
}

// Bad groups fail NewFair loudly, never as no groups.
func TestFairGroupsInvalid(t *testing.T) {
	tb, err := NewTokenBucket(PerSecond(10), 10)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, maxTenantGroups+1)
	for i := range many {
		many[i] = strings.Repeat("g", i+1)
	}
	of := func(string) int { return 0 }
	for _, c := range []struct {
		names []string
		of    func(string) int
		want  string
	}{
		{[]string{"a"}, nil, "nil group function"},
		{nil, of, "no group names"},
		{[]string{"a", ""}, of, "empty group name"},
		{[]string{"a", "b", "a"}, of, `"a" named twice`},
		{many, of, "more than 64"},
	} {
		_, err := NewFair(tb, PerSecond(10), WithTenantGroups(c.names, c.of), WithFairObserver(ObserverFunc(func(Event) {})))
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want ErrInvalidOption saying %q", c.names, err, c.want)
		}
		// Without an observer the groups are still checked.
		if _, err := NewFair(tb, PerSecond(10), WithTenantGroups(c.names, c.of)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%v without an observer: %v, want ErrInvalidOption", c.names, err)
		}
	}
	// The names are copied: a caller's later change does not relabel.
	names := []string{"free"}
	var got string
	f, err := NewFair(tb, PerSecond(10), WithTenantGroups(names, of),
		WithFairObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventFairGroup {
				got = e.Key
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	names[0] = "changed"
	f.Allow("x")
	if got != "free" {
		t.Fatalf("group reported as %q after the caller changed its slice, want %q", got, "free")
	}
}

// guaranteed's pacing, used ≤ b + ⌊g·τ/W⌋ with b = max(1, ⌊g/16⌋), checked
// exactly (math/big) on random guarantees, windows and instants, the
// edges (the paced count's own value, one above) included.
func TestFairPacingExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 20000 {
		w := int64(1) + rng.Int64N(int64(24*time.Hour))
		if rng.IntN(4) == 0 {
			w = int64(maxSpan) - rng.Int64N(1000)
		}
		f := &Fair{window: w, win: 3}
		g := int64(1) + rng.Int64N(1<<uint(1+rng.IntN(50)))
		tau := rng.Int64N(w)
		if g < 1<<20 && rng.IntN(2) == 0 {
			// W a multiple of g and τ a multiple of W/g: g·τ/W is whole,
			// the edge where ≤ and < differ.
			m := 1 + rng.Int64N(1<<20)
			w = g * m
			f.window = w
			tau = m * rng.Int64N(g)
		}
		b := max(1, g/16)
		p := new(big.Int).Mul(big.NewInt(g), big.NewInt(tau))
		p.Quo(p, big.NewInt(w))
		limit := b + p.Int64() // the most events guaranteed by τ
		for _, used := range []int64{limit - 1, limit, limit + 1, rng.Int64N(g + 2)} {
			if used < 0 {
				continue
			}
			tn := &tenant{g: g, used: used - 1}
			want := used <= g && used <= limit
			if got := f.guaranteed(tn, 1, 3*w+tau); got != want {
				t.Fatalf("g %d W %d τ %d: %d events guaranteed = %v, want %v (limit %d)", g, w, tau, used, got, want, limit)
			}
		}
	}
}
