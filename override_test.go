package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// This file pins per-key overrides (SetOverride, RemoveOverride,
// Override). The behaviour suite runs over every algorithm of the
// registry; the property tests check the bound a caller relies on: over
// any interval a key lets through no more than the larger of the bounds of
// the parameters in force for it during the interval, whatever the order
// of decisions, overrides, their removal and rate changes.

func TestOverride(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, alg algorithm)
	}{
		{"OwnLimit", testOverrideOwnLimit},
		{"HeldKey", testOverrideHeldKey},
		{"Smaller", testOverrideSmaller},
		{"Remove", testOverrideRemove},
		{"ResetKeeps", testOverrideResetKeeps},
		{"DroppedAndSeenAgain", testOverrideDroppedAndSeenAgain},
		{"AtRestUnderOwn", testOverrideAtRestUnderOwn},
		{"SetRateLeavesAlone", testOverrideSetRateLeavesAlone},
		{"Invalid", testOverrideInvalid},
		{"CancelGivesNothing", testOverrideCancelGivesNothing},
		{"TwiceInARow", testOverrideTwiceInARow},
		{"Multi", testOverrideMulti},
		{"NoAllocations", testOverrideNoAllocations},
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, alg) })
			}
		})
	}
}

// The suite's overrides: twice and half the suite's limit, at the same
// period (the buckets' capacity is the count).
const (
	bigLimit   = 2 * suiteLimit
	smallLimit = suiteLimit / 2
)

func setOverride(t *testing.T, alg algorithm, l testLimiter, key string, limit int) {
	t.Helper()
	if err := alg.setOverride(l, key, Per(int64(limit), suitePeriod), limit); err != nil {
		t.Fatalf("SetOverride(%q, %d): %v", key, limit, err)
	}
}

// drainKey takes a fresh key's whole allowance at once, limit events, and
// checks that no more is allowed.
func drainKey(t *testing.T, l testLimiter, key string, limit int) {
	t.Helper()
	if d := mustAllowN(t, l, key, limit); !d.Allowed {
		t.Fatalf("%q: a fresh key refused its whole allowance of %d: %+v", key, limit, d)
	}
	if l.Allow(key) {
		t.Fatalf("%q: allowed past its allowance of %d", key, limit)
	}
}

// overrideOf is l's Override(key) as a rate, whatever its type.
func overrideOf(l testLimiter, key string) (Rate, bool) {
	switch l := l.(type) {
	case interface {
		Override(string) (Rate, int, bool)
	}:
		r, _, ok := l.Override(key)
		return r, ok
	case interface{ Override(string) (Rate, bool) }:
		return l.Override(key)
	}
	panic("no Override")
}

// A key with an override gets its own limit from its next decision, up to
// n of its own limit at once; other keys keep the limiter's.
func testOverrideOwnLimit(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	if d := peekAt(t, l, "paid"); d.Limit != bigLimit || d.Remaining != bigLimit {
		t.Fatalf("a new key with an override of %d: %+v", bigLimit, d)
	}
	if l.Limit() != suiteLimit {
		t.Fatalf("Limit() = %d, want the limiter's %d", l.Limit(), suiteLimit)
	}
	if r, ok := overrideOf(l, "paid"); !ok || r != Per(bigLimit, suitePeriod) {
		t.Fatalf("Override = %v, %v", r, ok)
	}
	if _, ok := overrideOf(l, "free"); ok {
		t.Fatal("Override of a key without one says it has one")
	}
	d := mustAllowN(t, l, "paid", bigLimit) // above the limiter's limit
	if !d.Allowed || d.Limit != bigLimit {
		t.Fatalf("AllowN(%d) on the paid key: %+v", bigLimit, d)
	}
	if l.Allow("paid") {
		t.Fatal("allowed past the override's allowance")
	}
	if _, err := l.AllowN(bg, "free", bigLimit); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(%d) on a key without override: %v, want ErrExceedsLimit", bigLimit, err)
	}
	if _, err := l.Reserve(bg, "free", bigLimit); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("Reserve(%d) on a key without override: %v, want ErrExceedsLimit", bigLimit, err)
	}
	if err := l.WaitN(bg, "free", bigLimit); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("WaitN(%d) on a key without override: %v, want ErrExceedsLimit", bigLimit, err)
	}
	if _, err := l.AllowN(bg, "paid", bigLimit+1); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(%d) above the override: %v, want ErrExceedsLimit", bigLimit+1, err)
	}
	drain(t, l, "free")
	if d := peekAt(t, l, "free"); d.Limit != suiteLimit {
		t.Fatalf("a key without override: %+v", d)
	}
}

// A key held when its override is set keeps its state, re-expressed: a
// drained key is not given a fresh allowance by an override.
func testOverrideHeldKey(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	drain(t, l, "paid")
	setOverride(t, alg, l, "paid", bigLimit)
	d := peekAt(t, l, "paid")
	if d.Limit != bigLimit {
		t.Fatalf("Limit after the override: %+v", d)
	}
	// The buckets keep the tokens they held (none); the windows keep their
	// count, now held against the larger limit.
	want := 0
	if alg.window != nil {
		want = bigLimit - suiteLimit
	}
	if d.Remaining != want {
		t.Fatalf("a drained key after an override of %d: %+v, want %d remaining", bigLimit, d, want)
	}
	clk.Advance(10 * suitePeriod)
	drainKey(t, l, "paid", bigLimit) // its own allowance once it has come back
	if d := peekAt(t, l, "paid"); d.Limit != bigLimit {
		t.Fatalf("%+v", d)
	}
}

// A smaller override refuses n above it, at once.
func testOverrideSmaller(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "trial", smallLimit)
	for _, f := range []func() error{
		func() error { _, err := l.AllowN(bg, "trial", suiteLimit); return err },
		func() error { _, err := l.Reserve(bg, "trial", suiteLimit); return err },
		func() error { return l.WaitN(bg, "trial", suiteLimit) },
	} {
		if err := f(); !errors.Is(err, ErrExceedsLimit) {
			t.Fatalf("n = %d under an override of %d: %v, want ErrExceedsLimit", suiteLimit, smallLimit, err)
		}
	}
	drainKey(t, l, "trial", smallLimit)
	if d := peekAt(t, l, "trial"); d.Limit != smallLimit {
		t.Fatalf("%+v", d)
	}
}

// RemoveOverride brings the key back to the limiter's parameters, its
// state re-expressed: no fresh allowance.
func testOverrideRemove(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	mustAllowN(t, l, "paid", bigLimit)
	l.RemoveOverride("paid")
	if _, ok := overrideOf(l, "paid"); ok {
		t.Fatal("Override after RemoveOverride")
	}
	if d := peekAt(t, l, "paid"); d.Limit != suiteLimit || d.Remaining != 0 {
		t.Fatalf("a drained key after RemoveOverride: %+v", d)
	}
	if l.Allow("paid") {
		t.Fatal("RemoveOverride gave a drained key an allowance")
	}
	if _, err := l.AllowN(bg, "paid", bigLimit); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(%d) after RemoveOverride: %v", bigLimit, err)
	}
	l.RemoveOverride("paid")  // none: nothing happens
	l.RemoveOverride("never") // likewise
	clk.Advance(10 * suitePeriod)
	drain(t, l, "paid")
	if k := l.Stats().Keys; k != 1 {
		t.Fatalf("%d keys, want 1 (RemoveOverride creates no key)", k)
	}
}

// Reset keeps the override: the key starts afresh, full, under it.
func testOverrideResetKeeps(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	mustAllowN(t, l, "paid", bigLimit)
	l.Reset("paid")
	if d := peekAt(t, l, "paid"); d.Limit != bigLimit || d.Remaining != bigLimit {
		t.Fatalf("after Reset: %+v", d)
	}
	if d := mustAllowN(t, l, "paid", bigLimit); !d.Allowed {
		t.Fatalf("after Reset: %+v", d)
	}
}

// A key dropped at rest and seen again gets its override back: the table,
// not the key's state, holds it.
func testOverrideDroppedAndSeenAgain(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	mustAllowN(t, l, "paid", bigLimit)
	clk.Advance(10 * suitePeriod)
	l.Sweep()
	if k := l.Stats().Keys; k != 0 {
		t.Fatalf("%d keys after a sweep at rest", k)
	}
	if d := mustAllowN(t, l, "paid", bigLimit); !d.Allowed || d.Limit != bigLimit {
		t.Fatalf("a dropped key seen again: %+v", d)
	}
}

// A flagged key is judged at rest under its own parameters: dropping it
// changes no decision. Two limiters run the same trace on a key with an
// override that takes longer to come back than the limiter's parameters;
// one sweeps at every step, the other never: their decisions agree.
func testOverrideAtRestUnderOwn(t *testing.T, alg algorithm) {
	slow := Per(bigLimit, 4*suitePeriod) // the buckets: capacity 8, refilled in 4 periods
	clkA, clkB := NewManualClock(suiteT0), NewManualClock(suiteT0)
	a, err := alg.new(suiteLimit, suitePeriod, clkA)
	must(t, err)
	b, err := alg.new(suiteLimit, suitePeriod, clkB)
	must(t, err)
	defer a.Close()
	defer b.Close()
	must(t, alg.setOverride(a, "paid", slow, bigLimit))
	must(t, alg.setOverride(b, "paid", slow, bigLimit))
	for i := range 40 {
		da, db := mustAllowN(t, a, "paid", 1), mustAllowN(t, b, "paid", 1)
		if da != db {
			t.Fatalf("step %d: with sweeps %+v, without %+v", i, da, db)
		}
		clkA.Advance(suitePeriod / 4)
		clkB.Advance(suitePeriod / 4)
		a.Sweep()
	}
}

// SetRate changes the keys without an override only.
func testOverrideSetRateLeavesAlone(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	mustAllowN(t, l, "paid", 1) // held before the change
	must(t, alg.setRate(l, Per(smallLimit, suitePeriod), smallLimit))
	if d := peekAt(t, l, "paid"); d.Limit != bigLimit || d.Remaining != bigLimit-1 {
		t.Fatalf("an overridden key after SetRate: %+v", d)
	}
	if d := peekAt(t, l, "new paid"); d.Limit != smallLimit {
		t.Fatalf("%+v", d)
	}
	setOverride(t, alg, l, "new paid", bigLimit) // absent: set up under it when first seen
	must(t, alg.setRate(l, Per(1, suitePeriod), 1))
	if d := mustAllowN(t, l, "new paid", bigLimit); !d.Allowed || d.Limit != bigLimit {
		t.Fatalf("%+v", d)
	}
	if d := peekAt(t, l, "free"); d.Limit != 1 {
		t.Fatalf("a key without override after SetRate: %+v", d)
	}
	l.RemoveOverride("paid") // follows SetRate again
	if d := peekAt(t, l, "paid"); d.Limit != 1 {
		t.Fatalf("%+v", d)
	}
}

// An invalid override is refused whole, with SetRate's error: the key's
// override (none, or the one it had) and state are unchanged.
func testOverrideInvalid(t *testing.T, alg algorithm) {
	for _, c := range []struct {
		rate     Rate
		capacity int
	}{
		{Per(0, time.Second), 4},
		{Per(4, 0), 4},
		{Per(-1, time.Second), 4},
		{Per(4, time.Second), 0}, // the buckets' capacity; the windows ignore it
		{Per(1, 1<<62), 1},
		{Per(1<<40, time.Second), 1},
		{Per(1, time.Nanosecond), 1 << 62},
	} {
		l, _ := newSuiteLimiter(t, alg)
		setOverride(t, alg, l, "paid", bigLimit)
		mustAllowN(t, l, "paid", 1)
		mustAllowN(t, l, "free", 1)
		before, beforeFree := peekAt(t, l, "paid"), peekAt(t, l, "free")
		beforeRate, _ := overrideOf(l, "paid")
		want := alg.setRate(l, c.rate, c.capacity) // refused too, or applied to the limiter
		if want == nil {
			continue
		}
		for _, key := range []string{"paid", "free", "absent"} {
			got := alg.setOverride(l, key, c.rate, c.capacity)
			if got == nil || got.Error() != want.Error() {
				t.Errorf("SetOverride(%q, %v, %d) = %v, SetRate says %v", key, c.rate, c.capacity, got, want)
			}
		}
		if r, ok := overrideOf(l, "paid"); !ok || r != beforeRate {
			t.Fatalf("a refused override changed the key's override: %v %v", r, ok)
		}
		if _, ok := overrideOf(l, "free"); ok {
			t.Fatal("a refused override was set")
		}
		if after := peekAt(t, l, "paid"); after != before {
			t.Fatalf("a refused override changed the key: %+v, then %+v", before, after)
		}
		if after := peekAt(t, l, "free"); after != beforeFree {
			t.Fatalf("a refused override changed the key: %+v, then %+v", beforeFree, after)
		}
		if k := l.Stats().Keys; k != 2 {
			t.Fatalf("%d keys", k)
		}
	}
}

// A Cancel of a booking made before an override changed gives nothing
// back (the booking is measured in the parameters it was made under).
func testOverrideCancelGivesNothing(t *testing.T, alg algorithm) {
	for _, change := range []string{"set", "remove"} {
		l, _ := newSuiteLimiter(t, alg)
		if change == "remove" {
			setOverride(t, alg, l, "k", suiteLimit)
		}
		mustAllowN(t, l, "k", suiteLimit-2)
		r, err := l.Reserve(bg, "k", 1)
		if err != nil || !r.OK() {
			t.Fatalf("Reserve: %v %+v", err, r)
		}
		if change == "set" {
			setOverride(t, alg, l, "k", suiteLimit) // the same parameters: a change all the same
		} else {
			l.RemoveOverride("k")
		}
		before := peekAt(t, l, "k")
		r.Cancel()
		if after := peekAt(t, l, "k"); after != before {
			t.Fatalf("%s: a Cancel after the change gave back: %+v, then %+v", change, before, after)
		}
		r2, err := l.Reserve(bg, "k", 1) // made after: given back as ever
		if err != nil || !r2.OK() {
			t.Fatalf("Reserve: %v %+v", err, r2)
		}
		r2.Cancel()
		if after := peekAt(t, l, "k"); after != before {
			t.Fatalf("%s: a Cancel of a booking after the change: %+v, want %+v", change, after, before)
		}
	}
}

// Two overrides in a row on one key: the second re-expresses what the
// first left, and the key decides under the second.
func testOverrideTwiceInARow(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	mustAllowN(t, l, "k", 1)
	setOverride(t, alg, l, "k", bigLimit)
	setOverride(t, alg, l, "k", smallLimit)
	if d := peekAt(t, l, "k"); d.Limit != smallLimit || d.Remaining > smallLimit {
		t.Fatalf("%+v", d)
	}
	if r, ok := overrideOf(l, "k"); !ok || r != Per(smallLimit, suitePeriod) {
		t.Fatalf("Override = %v %v", r, ok)
	}
	clk.Advance(10 * suitePeriod)
	drainKey(t, l, "k", smallLimit)
}

// AllowAll checks n against each key's own limit too.
func testOverrideMulti(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	setOverride(t, alg, l, "paid", bigLimit)
	pairs := []LimiterKey{{Limiter: l, Key: "paid"}}
	if d, err := AllowAll(bg, bigLimit, pairs); err != nil || !d.Allowed {
		t.Fatalf("AllowAll(%d) on the paid key: %+v %v", bigLimit, d, err)
	}
	if _, err := AllowAll(bg, bigLimit, []LimiterKey{{Limiter: l, Key: "free"}}); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowAll(%d) on a free key: %v", bigLimit, err)
	}
	// n above a smaller override, within the limiter's limit: refused as
	// AllowN refuses it, before anything is booked, not denied with a
	// RetryAfter of zero that no retry could ever turn into an allowance.
	setOverride(t, alg, l, "small", smallLimit)
	pairs = []LimiterKey{{Limiter: l, Key: "free"}, {Limiter: l, Key: "small"}}
	if d, err := AllowAll(bg, smallLimit+1, pairs); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowAll(%d) on a key with an override of %d: %+v, %v, want ErrExceedsLimit", smallLimit+1, smallLimit, d, err)
	}
	if d := peekAt(t, l, "free"); d.Remaining != suiteLimit {
		t.Fatalf("a refused AllowAll booked on another pair: %+v", d)
	}
	if d, err := AllowAll(bg, smallLimit, pairs); err != nil || !d.Allowed {
		t.Fatalf("AllowAll(%d) within every limit: %+v %v", smallLimit, d, err)
	}
}

// Allow allocates nothing on a key with an override or without one, and
// after an override changed (the sliding log's ring grows once, at the
// key's first event under a larger limit).
func testOverrideNoAllocations(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	for i := range 100 {
		setOverride(t, alg, l, fmt.Sprint("other", i), bigLimit) // a table with more than one entry
	}
	l.Allow("free")
	l.Allow("paid")
	setOverride(t, alg, l, "paid", bigLimit)
	l.Allow("paid")
	clk.Advance(suitePeriod)
	for _, key := range []string{"free", "paid"} {
		if n := testing.AllocsPerRun(100, func() { l.Allow(key) }); n != 0 {
			t.Fatalf("Allow(%q): %v allocations", key, n)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = l.AllowN(bg, key, 1) }); n != 0 {
			t.Fatalf("AllowN(%q): %v allocations", key, n)
		}
	}
}

// TestOverrideTokenBucketTimeline: the token bucket keeps the tokens it
// has at the change, capped at the new capacity, and refills at the key's
// own rate from then on; removal does the same back.
func TestOverrideTokenBucketTimeline(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(Per(4, time.Second), 4, WithClock(clk))
	must(t, err)
	step := func(what string, d time.Duration, key string, n int, want Decision) {
		t.Helper()
		clk.Advance(d)
		got := mustAllowN(t, tb, key, n)
		if got != want {
			t.Fatalf("%s: %+v, want %+v", what, got, want)
		}
	}
	// t0: 3 of 4 tokens taken.
	step("t0 take 3", 0, "k", 3, Decision{Allowed: true, Limit: 4, Remaining: 1, ResetAfter: 750 * time.Millisecond})
	// t0: an override of 10 per second, capacity 2: the 1 token is kept
	// (below the new capacity), and refills at 100 ms a token.
	must(t, tb.SetOverride("k", Per(10, time.Second), 2))
	step("t0 peek", 0, "k", 0, Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 100 * time.Millisecond})
	// t0+100ms: full at 2, not more.
	step("t0+100ms peek", 100*time.Millisecond, "k", 0, Decision{Allowed: true, Limit: 2, Remaining: 2})
	step("t0+100ms take 2", 0, "k", 2, Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 200 * time.Millisecond})
	// An override of capacity 8 at the same rate: the empty bucket stays
	// empty and fills at 100 ms a token, to 8.
	must(t, tb.SetOverride("k", Per(10, time.Second), 8))
	step("t0+150ms peek", 50*time.Millisecond, "k", 0, Decision{Allowed: true, Limit: 8, Remaining: 0, ResetAfter: 750 * time.Millisecond})
	step("t0+950ms peek", 800*time.Millisecond, "k", 0, Decision{Allowed: true, Limit: 8, Remaining: 8})
	// Removal: 8 tokens capped at the limiter's 4, refilled at 250 ms.
	tb.RemoveOverride("k")
	step("removed peek", 0, "k", 0, Decision{Allowed: true, Limit: 4, Remaining: 4})
	step("removed take 4", 0, "k", 4, Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: time.Second})
	step("+250ms peek", 250*time.Millisecond, "k", 0, Decision{Allowed: true, Limit: 4, Remaining: 1, ResetAfter: 750 * time.Millisecond})
}

// TestOverrideTokenBucketIdleThroughSetRate: a key without override idle
// through several SetRate calls, then overridden, is re-expressed first in
// the limiter's current parameters (the rule SetRate follows), then in its
// override's: no more tokens than it would have had.
func TestOverrideTokenBucketIdleThroughSetRate(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(Per(4, time.Second), 4, WithClock(clk))
	must(t, err)
	mustAllowN(t, tb, "k", 4) // empty at t0
	twin, err := NewTokenBucket(Per(4, time.Second), 4, WithClock(clk))
	must(t, err)
	mustAllowN(t, twin, "k", 4)
	for i := range 3 {
		clk.Advance(100 * time.Millisecond)
		must(t, tb.SetRate(Per(int64(2+i), time.Second), 8))
		must(t, twin.SetRate(Per(int64(2+i), time.Second), 8))
	}
	must(t, tb.SetOverride("k", Per(100, time.Second), 100))
	got := mustAllowN(t, tb, "k", 0)
	want := mustAllowN(t, twin, "k", 0) // the tokens under the limiter's parameters now
	if got.Remaining != want.Remaining || got.Limit != 100 {
		t.Fatalf("after the override %+v, the limiter's parameters say %+v", got, want)
	}
}

// overrideCase is a rateChangeCase played on a few keys, each switched
// between override a, override b and the limiter's parameters (a or b).
func playOverrides(t *testing.T, c rateChangeCase, seed uint64, steps int) error {
	rng := rand.New(rand.NewPCG(seed, 0x0e7e1de))
	clk := NewManualClock(suiteT0)
	lim, err := c.alg.build(c.rate(c.a), int(c.a[1]), WithClock(clk))
	if err != nil {
		return err
	}
	defer lim.Close()
	unit := max(c.period/time.Duration(max(c.a[0], c.b[0])), 1)
	maxN := int(max(c.a[1], c.b[1]))
	keys := []string{"k0", "k1", "k2"}
	type pending struct {
		r   *Reservation
		key string
		n   int
	}
	var booked []pending
	evs := map[string][]actEvent{}
	changes, total := 0, 0
	pick := func() [2]int64 {
		if rng.IntN(2) == 0 {
			return c.a
		}
		return c.b
	}
	ctx := context.Background()
	for range steps {
		now := clk.Now().UnixNano()
		key := keys[rng.IntN(len(keys))]
		logf := func(f string, a ...any) {
			if debugTrace {
				fmt.Printf("%d %s: "+f+"\n", append([]any{now - suiteT0.UnixNano(), key}, a...)...)
			}
		}
		switch p := rng.IntN(100); {
		case p < 24:
			d := time.Duration(rng.Int64N(int64(2 * unit)))
			if rng.IntN(20) == 0 {
				d = -d
			}
			clk.Advance(d)
			logf("advance %d", d)
		case p < 38:
			if lim.Allow(key) {
				evs[key] = append(evs[key], actEvent{key, now, 1})
				logf("allow")
			}
		case p < 52:
			n := rng.IntN(maxN + 1)
			d, err := lim.AllowN(ctx, key, n)
			if errors.Is(err, ErrExceedsLimit) {
				continue // above the key's parameters now
			}
			if err != nil {
				return err
			}
			if d.Allowed && n > 0 {
				evs[key] = append(evs[key], actEvent{key, now, n})
				logf("allowN %d", n)
			}
		case p < 70:
			n := 1 + rng.IntN(maxN)
			r, err := lim.Reserve(ctx, key, n)
			if errors.Is(err, ErrExceedsLimit) {
				continue
			}
			if err != nil {
				return err
			}
			if r.OK() {
				booked = append(booked, pending{r, key, n})
				logf("reserve %d at %d", n, r.TimeToAct().UnixNano()-suiteT0.UnixNano())
			}
		case p < 80:
			if len(booked) == 0 {
				continue
			}
			i := rng.IntN(len(booked))
			b := booked[i]
			booked = slices.Delete(booked, i, i+1)
			act := b.r.TimeToAct().UnixNano()
			b.r.Cancel()
			if now > act {
				evs[b.key] = append(evs[b.key], actEvent{b.key, act, b.n})
			}
			logf("cancel %s %d at %d", b.key, b.n, act-suiteT0.UnixNano())
		case p < 88:
			cfg := pick()
			if err := c.alg.setOverride(lim, key, c.rate(cfg), int(cfg[1])); err != nil {
				return err
			}
			changes++
			logf("override %v -> %+v", cfg, peekAt(t, lim, key))
		case p < 92:
			lim.RemoveOverride(key)
			changes++
			logf("remove -> %+v", peekAt(t, lim, key))
		case p < 98:
			cfg := pick()
			if err := c.alg.setRate(lim, c.rate(cfg), int(cfg[1])); err != nil {
				return err
			}
			changes++
			logf("setrate %v", cfg)
		default:
			// A key dropped at rest starts afresh when seen again, under
			// the parameters in force then: if they allow more than those
			// it rested under, it gets more than a held key would (as with
			// SetRate). So a sweep that dropped a key ends the segment, as
			// a reset does: the events so far are checked, and the next
			// segment starts with the clock past every booking.
			held := lim.Stats().Keys
			lim.Sweep()
			logf("sweep")
			if lim.Stats().Keys == held {
				continue
			}
			for _, b := range booked {
				evs[b.key] = append(evs[b.key], actEvent{b.key, b.r.TimeToAct().UnixNano(), b.n})
			}
			booked = nil
			for _, key := range keys {
				total += len(evs[key])
				if err := c.check()(evs[key]); err != nil {
					return fmt.Errorf("key %s, before a sweep: %w", key, err)
				}
				evs[key] = evs[key][:0]
			}
			clk.Advance(c.period * 3)
		}
	}
	for _, b := range booked {
		evs[b.key] = append(evs[b.key], actEvent{b.key, b.r.TimeToAct().UnixNano(), b.n})
	}
	for _, key := range keys {
		total += len(evs[key])
		if err := c.check()(evs[key]); err != nil {
			return fmt.Errorf("key %s: %w", key, err)
		}
	}
	if changes < steps/20 || total < steps/50 {
		t.Fatalf("seed %d: trace too tame: %d changes, %d events", seed, changes, total)
	}
	return nil
}

// TestOverrideKeepsBound: random traces of Allow, AllowN, Reserve, Cancel,
// clock moves (some backwards), sweeps, SetOverride, RemoveOverride and
// SetRate on three keys, on a manual clock. The events each key lets act
// never exceed the bound of the larger of the two configurations, the only
// ones in force during the trace.
func TestOverrideKeepsBound(t *testing.T) {
	seeds, steps := 40, 600
	if testing.Short() {
		seeds = 10
	}
	for _, c := range rateChangeCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				if err := playOverrides(t, c, seed, steps); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
}

// TestOverrideRacesCallers: in a synctest bubble, eight goroutines on two
// keys race Allow, AllowN, Reserve, Cancel and Wait (some with deadlines)
// while another flips the keys' overrides between the two configurations
// and removes them, and a third changes the limiter's rate. Under -race; each key's
// events keep the larger configuration's bound, and every booking granted
// is accounted for (acted, or cancelled before it was due).
func TestOverrideRacesCallers(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, c := range rateChangeCases() {
		if c.period < time.Millisecond {
			continue // fake time moves in steps of the sleeps: keep them whole
		}
		t.Run(c.name, func(t *testing.T) {
			acted := 0
			for seed := range uint64(seeds) {
				synctest.Test(t, func(t *testing.T) { acted += raceOverrides(t, c, seed) })
			}
			if acted < 8*seeds {
				t.Fatalf("too tame: %d events acted over %d seeds", acted, seeds)
			}
		})
	}
}

func raceOverrides(t *testing.T, c rateChangeCase, seed uint64) int {
	lim, err := c.alg.build(c.rate(c.a), int(c.a[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	keys := []string{"k0", "k1"}
	unit := max(c.period/time.Duration(max(c.a[0], c.b[0])), 1)
	pick := func(rng *rand.Rand) [2]int64 {
		if rng.IntN(2) == 0 {
			return c.b
		}
		return c.a
	}
	return raceCallers(t, lim, c, seed, keys,
		raceOperator{every: 3 * unit, stream: 99, act: func(_ int, rng *rand.Rand) { // the keys' overrides
			cfg := pick(rng)
			key := keys[rng.IntN(len(keys))]
			if rng.IntN(3) == 0 {
				lim.RemoveOverride(key)
			} else if err := c.alg.setOverride(lim, key, c.rate(cfg), int(cfg[1])); err != nil {
				t.Error(err)
			}
		}},
		raceOperator{every: 4 * unit, stream: 98, act: func(_ int, rng *rand.Rand) { // the limiter's rate, at the same time
			cfg := pick(rng)
			if err := c.alg.setRate(lim, c.rate(cfg), int(cfg[1])); err != nil {
				t.Error(err)
			}
		}},
	)
}

// TestOverrideRacesCreationAndDrop: SetOverride and RemoveOverride race
// the key's creation (first Allow) and its drop at rest (Sweep) on the
// real clock, under -race. Whatever the order, once the operator is done
// the key decides under its last override: a peek reports its limit.
func TestOverrideRacesCreationAndDrop(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for round := range 20 {
				l, err := alg.build(Per(suiteLimit, time.Nanosecond*1000), suiteLimit)
				must(t, err)
				key := fmt.Sprint("k", round)
				var wg sync.WaitGroup
				wg.Go(func() {
					for i := range 50 {
						limit := bigLimit
						if i%2 == 1 {
							limit = smallLimit
						}
						if err := alg.setOverride(l, key, Per(int64(limit), 1000), limit); err != nil {
							t.Error(err)
						}
						if i%7 == 3 {
							l.RemoveOverride(key)
						}
					}
					must(t, alg.setOverride(l, key, Per(bigLimit, 1000), bigLimit))
				})
				wg.Go(func() {
					for range 200 {
						l.Allow(key)
						l.Sweep()
					}
				})
				wg.Wait()
				if d := peekAt(t, l, key); d.Limit != bigLimit {
					t.Fatalf("round %d: after the last override a peek says %+v", round, d)
				}
				l.Allow(key)
				if d := peekAt(t, l, key); d.Limit != bigLimit {
					t.Fatalf("round %d: %+v", round, d)
				}
				l.Close()
			}
		})
	}
}
