package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// This file pins the operations that change a limiter while it serves:
// SetRate and Reset. The behaviour suite runs testSetRate… and testReset…
// over every algorithm of the registry; the timelines pin what each
// algorithm's state becomes; the property tests check the bound a caller
// relies on across a change: over any interval a key lets through no more
// than the larger of the two configurations allows, and a booking is never
// lost (a Cancel after a change gives nothing back, so the events it booked
// stay counted).

func TestDynamic(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, alg algorithm)
	}{
		{"ResetStartsAfresh", testResetStartsAfresh},
		{"ResetAbsentKey", testResetAbsentKey},
		{"ResetCancelGivesNothing", testResetCancelGivesNothing},
		{"SetRateInvalid", testSetRateInvalid},
		{"SetRateLimit", testSetRateLimit},
		{"SetRateCancelGivesNothing", testSetRateCancelGivesNothing},
		{"SetRateNoAllocations", testSetRateNoAllocations},
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, alg) })
			}
		})
	}
}

// mustAllowN is AllowN that fails the test on error.
func mustAllowN(t *testing.T, l testLimiter, key string, n int) Decision {
	t.Helper()
	d, err := l.AllowN(bg, key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

// drain takes a fresh key's whole allowance at once: limit events (which
// the leaky bucket's empty queue also lets depart at once).
func drain(t *testing.T, l testLimiter, key string) {
	t.Helper()
	if d := mustAllowN(t, l, key, l.Limit()); !d.Allowed {
		t.Fatalf("%q: a fresh key refused its whole allowance: %+v", key, d)
	}
	if l.Allow(key) {
		t.Fatalf("%q: allowed past its allowance", key)
	}
}

func testResetStartsAfresh(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	drain(t, l, "k")
	drain(t, l, "other")
	clk.Advance(suitePeriod / 8)
	l.Reset("k")
	if d := mustAllowN(t, l, "k", 0); d.Remaining != suiteLimit || d.ResetAfter != 0 {
		t.Fatalf("after Reset the key is not full and at rest: %+v", d)
	}
	drain(t, l, "k") // the whole allowance again, at once
	if l.Allow("other") {
		t.Fatal("Reset of one key gave another key back its allowance")
	}
}

func testResetAbsentKey(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	l.Reset("never seen")
	if k := l.Stats().Keys; k != 0 {
		t.Fatalf("Reset of an absent key created it: %d keys", k)
	}
	drain(t, l, "never seen")
}

// A booking made before Reset is not given back by a Cancel after it: the
// fresh allowance is the key's whole allowance, and the old booking's
// events are not taken from it, so giving them back would add to it.
func testResetCancelGivesNothing(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	mustAllowN(t, l, "k", suiteLimit-1)
	r, err := l.Reserve(bg, "k", 1) // the last of the allowance (the leaky bucket's last place)
	if err != nil || !r.OK() {
		t.Fatalf("Reserve: %v %+v", err, r)
	}
	l.Reset("k")
	drain(t, l, "k")
	r.Cancel()
	if d := mustAllowN(t, l, "k", 0); d.Remaining != 0 || l.Allow("k") {
		t.Fatalf("a Cancel after Reset gave back: %+v", d)
	}
}

func testSetRateInvalid(t *testing.T, alg algorithm) {
	for _, c := range []struct {
		rate     Rate
		capacity int
	}{
		{Per(0, time.Second), 4},
		{Per(4, 0), 4},
		{Per(-1, time.Second), 4},
		{Per(4, time.Second), 0}, // the buckets' capacity; the windows ignore it
		{Per(1, 1<<62), 1},
		{Per(1<<40, time.Second), 1}, // a sliding log of 2⁴⁰ events
		{Per(1, time.Nanosecond), 1 << 62},
	} {
		l, _ := newSuiteLimiter(t, alg)
		drain(t, l, "k")
		before := mustAllowN(t, l, "k", 0)
		_, want := alg.build(c.rate, c.capacity)
		got := alg.setRate(l, c.rate, c.capacity)
		if (want == nil) != (got == nil) || (want != nil && got.Error() != want.Error()) {
			t.Errorf("SetRate(%v, %d) = %v, the constructor says %v", c.rate, c.capacity, got, want)
		}
		if want == nil {
			continue // a valid one: not the point here
		}
		if !errors.Is(got, ErrInvalidRate) && !errors.Is(got, ErrInvalidCapacity) {
			t.Errorf("SetRate(%v, %d) = %v, matching neither ErrInvalidRate nor ErrInvalidCapacity", c.rate, c.capacity, got)
		}
		if after := mustAllowN(t, l, "k", 0); after != before || l.Limit() != suiteLimit {
			t.Fatalf("a refused SetRate(%v, %d) changed the limiter: %+v, then %+v", c.rate, c.capacity, before, after)
		}
	}
}

func testSetRateLimit(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	if err := alg.setRate(l, Per(2, suitePeriod), 2); err != nil {
		t.Fatal(err)
	}
	if l.Limit() != 2 {
		t.Fatalf("Limit() = %d after SetRate to 2", l.Limit())
	}
	if _, err := l.AllowN(bg, "k", 3); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(3) under a limit of 2: %v, want ErrExceedsLimit", err)
	}
	if _, err := l.Reserve(bg, "k", 3); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("Reserve(3) under a limit of 2: %v, want ErrExceedsLimit", err)
	}
	drain(t, l, "a") // a new key has the new allowance
	if err := alg.setRate(l, Per(8, suitePeriod), 8); err != nil {
		t.Fatal(err)
	}
	if d := mustAllowN(t, l, "b", 0); d.Limit != 8 || d.Remaining != 8 {
		t.Fatalf("a new key under a limit of 8: %+v", d)
	}
	drain(t, l, "b")
}

func testSetRateCancelGivesNothing(t *testing.T, alg algorithm) {
	l, _ := newSuiteLimiter(t, alg)
	mustAllowN(t, l, "k", suiteLimit-2)
	r, err := l.Reserve(bg, "k", 1)
	if err != nil || !r.OK() {
		t.Fatalf("Reserve: %v %+v", err, r)
	}
	if err := alg.setRate(l, Per(suiteLimit, suitePeriod), suiteLimit); err != nil {
		t.Fatal(err) // the same parameters: a change all the same
	}
	before := mustAllowN(t, l, "k", 0)
	r.Cancel()
	if after := mustAllowN(t, l, "k", 0); after != before {
		t.Fatalf("a Cancel after SetRate gave back: %+v, then %+v", before, after)
	}
	// A booking made after the change is given back as ever.
	r2, err := l.Reserve(bg, "k", 1)
	if err != nil || !r2.OK() {
		t.Fatalf("Reserve: %v %+v", err, r2)
	}
	r2.Cancel()
	if after := mustAllowN(t, l, "k", 0); after != before {
		t.Fatalf("a Cancel of the latest booking after the change gave back %+v, want %+v", after, before)
	}
}

// After a change a key already held decides without allocating (the
// sliding log's ring grows once, at its first event under a larger limit).
func testSetRateNoAllocations(t *testing.T, alg algorithm) {
	l, clk := newSuiteLimiter(t, alg)
	l.Allow("k")
	if err := alg.setRate(l, Per(8, suitePeriod), 8); err != nil {
		t.Fatal(err)
	}
	l.Allow("k")
	clk.Advance(suitePeriod)
	if n := testing.AllocsPerRun(100, func() { l.Allow("k") }); n != 0 {
		t.Fatalf("Allow after SetRate: %v allocations", n)
	}
}

// peekAt is the Decision of a peek at key.
func peekAt(t *testing.T, l testLimiter, key string) Decision {
	t.Helper()
	return mustAllowN(t, l, key, 0)
}

// TestSetRateTokenBucketTimeline: the token bucket keeps the tokens it has,
// capped at the new capacity, and refills at the new rate from the change.
func TestSetRateTokenBucketTimeline(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(PerSecond(4), 4, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	if d := mustAllowN(t, tb, "k", 3); !d.Allowed || d.Remaining != 1 { // t0: 1 token left
		t.Fatalf("t0: %+v", d)
	}
	must(t, tb.SetRate(PerSecond(10), 8))
	if d := peekAt(t, tb, "k"); d.Remaining != 1 || d.Limit != 8 { // keeps its 1 token: a larger capacity fills nothing
		t.Fatalf("t0 after raising: %+v", d)
	}
	clk.Advance(100 * ms) // t0+100ms: one token more at the new rate, not 0.4
	if d := peekAt(t, tb, "k"); d.Remaining != 2 || d.ResetAfter != 600*ms {
		t.Fatalf("t0+100ms: %+v", d)
	}
	must(t, tb.SetRate(PerSecond(1), 1))
	if d := peekAt(t, tb, "k"); d.Remaining != 1 || d.ResetAfter != 0 { // 2 tokens capped at 1: full
		t.Fatalf("t0+100ms after lowering: %+v", d)
	}
	if !tb.Allow("k") || tb.Allow("k") {
		t.Fatal("t0+100ms: one token, then none")
	}
	clk.Advance(999 * ms) // t0+1.099s: refills at 1/s from its Allow
	if tb.Allow("k") {
		t.Fatal("t0+1.099s: the token is back 1ns early")
	}
	clk.Advance(time.Millisecond)
	if !tb.Allow("k") {
		t.Fatal("t0+1.1s: the token did not come back at 1/s")
	}

	// Debt: bookings ahead keep their instants; the bucket is empty until
	// the latest acts, then refills at the new rate.
	must(t, tb.SetRate(PerSecond(4), 4))
	clk.Set(suiteT0.Add(time.Hour)) // full: 4 tokens
	t1 := clk.Now()
	mustAllowN(t, tb, "d", 4)
	r, err := tb.Reserve(bg, "d", 4) // 4 tokens of debt: acts at t1+1s
	if err != nil || !r.OK() || r.Delay() != time.Second {
		t.Fatalf("Reserve: %v %+v", err, r)
	}
	must(t, tb.SetRate(PerSecond(1), 4))
	if got := r.TimeToAct(); !got.Equal(t1.Add(time.Second)) {
		t.Fatalf("the booking moved: acts at %v, want t1+1s", got.Sub(t1))
	}
	d := peekAt(t, tb, "d") // empty until t1+1s, then 4 tokens at 1/s: full at t1+5s
	if d.Remaining != 0 || d.ResetAfter != 5*time.Second {
		t.Fatalf("t1 after lowering with debt: %+v", d)
	}
	r.Cancel() // after the change: gives nothing back
	if d2 := peekAt(t, tb, "d"); d2 != d {
		t.Fatalf("Cancel after the change gave back: %+v, was %+v", d2, d)
	}
	clk.Set(t1.Add(2*time.Second - 1))
	if tb.Allow("d") {
		t.Fatal("t1+2s-1ns: a token before one interval of the new rate after the booking")
	}
	clk.Set(t1.Add(2 * time.Second))
	if !tb.Allow("d") || tb.Allow("d") {
		t.Fatal("t1+2s: exactly one token, the first after the booking")
	}
}

// TestSetRateTokenBucketIdleKeys: a key that makes no decision across
// several changes is re-expressed through each, at the instant it
// happened; one idle through more changes than are remembered keeps, at
// the oldest change remembered, its capacity of then if it was full.
func TestSetRateTokenBucketIdleKeys(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(PerSecond(1), 4, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mustAllowN(t, tb, "half", 2) // 2 tokens left at t0
	mustAllowN(t, tb, "full", 0)
	tb.Allow("full")
	clk.Advance(time.Second)                // "full" is full again: 4 tokens; "half" has 3
	must(t, tb.SetRate(PerSecond(1), 2))    // half: 2 (capped); full: 2
	clk.Advance(time.Second)                // both full at 2
	must(t, tb.SetRate(PerSecond(1000), 8)) // both keep 2, then refill fast
	clk.Advance(time.Millisecond)           // one token more each
	if d := peekAt(t, tb, "half"); d.Remaining != 3 {
		t.Fatalf("half after two changes: %+v, want 3 tokens", d)
	}
	// More changes than remembered, "full" idle throughout: at the oldest
	// change kept it was full, and takes that change's capacity.
	for i := range maxHist + 2 {
		clk.Advance(time.Second)
		must(t, tb.SetRate(PerSecond(int64(10+i)), 6+i%2))
	}
	// It is taken as full at the oldest change kept, refills to each
	// capacity in the second between changes, and keeps the 6 tokens of
	// the last but one under the last's capacity of 7: a larger capacity
	// fills nothing.
	if d := peekAt(t, tb, "full"); d.Remaining != 6 || d.Limit != 7 {
		t.Fatalf("full after %d changes: %+v, want 6 tokens of 7", maxHist+2, d)
	}
}

// TestSetRateTokenBucketAtRest: a bucket full under a smaller capacity is
// not at rest under a larger one (dropping it would hand it the larger
// capacity at once), and is once it has refilled to it.
func TestSetRateTokenBucketAtRest(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(PerSecond(1), 2, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tb.Allow("k")
	clk.Advance(time.Hour) // full at 2
	must(t, tb.SetRate(PerSecond(1), 4))
	tb.Sweep()
	if tb.Stats().Keys != 1 {
		t.Fatal("a bucket holding 2 of its 4 tokens was dropped as at rest")
	}
	if d := peekAt(t, tb, "k"); d.Remaining != 2 {
		t.Fatalf("after the sweep: %+v, want the 2 tokens it kept", d)
	}
	clk.Advance(2 * time.Second)
	tb.Sweep()
	if tb.Stats().Keys != 0 {
		t.Fatal("a bucket full under the new capacity was not dropped")
	}
}

// TestSetRateLeakyBucketTimeline: the leaky bucket keeps its queue.
func TestSetRateLeakyBucketTimeline(t *testing.T) {
	clk := NewManualClock(suiteT0)
	lb, err := NewLeakyBucket(PerSecond(4), 4, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	r, err := lb.Reserve(bg, "k", 3) // slots t0, +250ms, +500ms: the queue ends at t0+750ms
	if err != nil || !r.OK() || r.Delay() != 0 {
		t.Fatalf("Reserve: %v %+v", err, r)
	}
	must(t, lb.SetRate(PerSecond(1), 2))
	d := peekAt(t, lb, "k") // the queue reaches 750ms ahead; 2 places of 1s: no room for a whole one
	if d.Remaining != 1 || d.ResetAfter != 750*ms || d.Limit != 2 {
		t.Fatalf("t0 after the change: %+v", d)
	}
	r2, err := lb.Reserve(bg, "k", 1) // the next slot starts at the queue's end, 1s long
	if err != nil || !r2.OK() || r2.Delay() != 750*ms {
		t.Fatalf("Reserve after the change: %v %+v", err, r2)
	}
	if r3, _ := lb.Reserve(bg, "k", 1); r3.OK() { // the queue now reaches 1.75s > 2 places of 1s? no: it reaches 1.75s, room ends at 2s
		t.Fatalf("a third booking fits in a queue of 2 places at 1/s reaching 1.75s: %+v", r3)
	}
	must(t, lb.SetRate(PerSecond(1), 1))
	if d := peekAt(t, lb, "k"); d.Remaining != 0 { // a queue longer than the new capacity: no room
		t.Fatalf("a queue past the new capacity: %+v", d)
	}
	clk.Advance(750 * ms) // the queue ends at +1.75s: 1s ahead, room for nothing until it is under 1s
	if r4, _ := lb.Reserve(bg, "k", 1); r4.OK() {
		t.Fatalf("t0+750ms: booked into a full queue: %+v", r4)
	}
	clk.Advance(1) // 1s - 1ns ahead: a place of 1s fits? no, the next slot would end at +2.75s > +1.75s+1ns+1s
	clk.Advance(time.Second - 1)
	if r5, _ := lb.Reserve(bg, "k", 1); !r5.OK() || r5.Delay() != 0 {
		t.Fatalf("t0+1.75s: the queue is empty, a booking departs now: %+v", r5)
	}
}

// TestSetRateWindowsTimeline: a window keeps its count, held against the
// new limit; the sliding log keeps its instants.
func TestSetRateWindowsTimeline(t *testing.T) {
	for _, alg := range windowAlgorithms() {
		t.Run(alg.name, func(t *testing.T) {
			l, clk := newLimiterAt(t, alg, 4)
			mustAllowN(t, l, "k", 3) // t0: 3 counted
			must(t, alg.setRate(l, Per(2, suitePeriod), 0))
			if d := peekAt(t, l, "k"); d.Remaining != 0 || d.Limit != 2 || l.Allow("k") {
				t.Fatalf("3 counted under a limit of 2: %+v", d)
			}
			must(t, alg.setRate(l, Per(5, suitePeriod), 0))
			if d := peekAt(t, l, "k"); d.Remaining != 2 {
				t.Fatalf("3 counted under a limit of 5: %+v", d)
			}
			if got := allowed(l, "k", 3); got != 2 {
				t.Fatalf("%d of 3 more under a limit of 5, want 2", got)
			}
			clk.Advance(2 * suitePeriod) // every window has passed
			drain(t, l, "k")
		})
	}
}

// TestSetRateSlidingLogGrows: under a larger limit the log grows and keeps
// the instants it holds, in order.
func TestSetRateSlidingLogGrows(t *testing.T) {
	clk := NewManualClock(suiteT0)
	sl, err := NewSlidingLog(Per(2, time.Second), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	sl.Allow("k") // t0
	clk.Advance(100 * ms)
	sl.Allow("k") // t0+100ms
	must(t, sl.SetRate(Per(4, time.Second)))
	clk.Advance(100 * ms)
	if got := allowed(sl, "k", 3); got != 2 { // t0+200ms: 4 in the window
		t.Fatalf("t0+200ms: %d of 3 more under a limit of 4, want 2", got)
	}
	clk.Set(suiteT0.Add(time.Second - 1))
	if sl.Allow("k") {
		t.Fatal("t0+1s-1ns: the instant t0 is still in the window")
	}
	clk.Set(suiteT0.Add(time.Second))
	if !sl.Allow("k") || sl.Allow("k") { // t0 has left; t0+100ms has not
		t.Fatal("t0+1s: exactly one place, t0's")
	}
	clk.Set(suiteT0.Add(1100 * ms))
	if !sl.Allow("k") || sl.Allow("k") {
		t.Fatal("t0+1.1s: exactly one place, t0+100ms's")
	}
}

// allowed is how many of k calls of l.Allow(key) are allowed.
func allowed(l interface{ Allow(string) bool }, key string, k int) int {
	n := 0
	for range k {
		if l.Allow(key) {
			n++
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rateChangeCase is an algorithm with two configurations a trace switches
// between, and the bound of the larger: the buckets' rates share a period,
// so the larger bound is the larger count with the larger capacity; the
// windows' likewise share their length.
type rateChangeCase struct {
	name   string
	alg    algorithm
	a, b   [2]int64 // count per period, capacity (the windows' is the count)
	period time.Duration
}

func (c rateChangeCase) rate(p [2]int64) Rate { return Per(p[0], c.period) }

func (c rateChangeCase) check() func([]actEvent) error {
	n, capacity := max(c.a[0], c.b[0]), max(c.a[1], c.b[1])
	return c.alg.actBound(Per(n, c.period), int(capacity))
}

func rateChangeCases() []rateChangeCase {
	var cs []rateChangeCase
	for _, alg := range algorithms {
		if alg.window != nil {
			cs = append(cs,
				rateChangeCase{alg.name + "/2-5", alg, [2]int64{2, 2}, [2]int64{5, 5}, 10 * time.Millisecond},
				rateChangeCase{alg.name + "/1-3", alg, [2]int64{1, 1}, [2]int64{3, 3}, 13 * time.Millisecond})
			continue
		}
		cs = append(cs,
			rateChangeCase{alg.name + "/slow-deep,fast-shallow", alg, [2]int64{2, 6}, [2]int64{6, 2}, 10 * time.Millisecond},
			rateChangeCase{alg.name + "/fractional", alg, [2]int64{7, 5}, [2]int64{3, 2}, 13 * time.Millisecond},
			rateChangeCase{alg.name + "/sub-ns", alg, [2]int64{10, 5}, [2]int64{3, 4}, 3})
	}
	return cs
}

// TestSetRateKeepsBound: random traces of Allow, AllowN, Reserve, Cancel
// (of any pending booking), clock moves (some backwards), sweeps, resets
// and rate changes between two configurations, on a manual clock. The
// events that act never exceed the larger configuration's bound, over
// any interval in which the key stays in the store. SETRATE_SEEDS runs
// more seeds.
func TestSetRateKeepsBound(t *testing.T) {
	seeds, steps := 40, 500
	if v, err := strconv.Atoi(os.Getenv("SETRATE_SEEDS")); err == nil {
		seeds = v
	}
	if testing.Short() {
		seeds = 10
	}
	for _, c := range rateChangeCases() {
		t.Run(c.name, func(t *testing.T) {
			var changes, events int
			for seed := range uint64(seeds) {
				if err := playRateChanges(c, seed, steps, &changes, &events); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			if changes < seeds*steps/20 || events < seeds*steps/50 {
				t.Fatalf("traces too tame: %d changes, %d events over %d seeds", changes, events, seeds)
			}
		})
	}
}

var debugTrace = os.Getenv("DEBUGTRACE") != ""

// playRateChanges plays one seed's trace and adds its changes and events
// to the counts.
func playRateChanges(c rateChangeCase, seed uint64, steps int, nChanges, nEvents *int) error {
	rng := rand.New(rand.NewPCG(seed, 0x5e7a7e))
	clk := NewManualClock(suiteT0)
	lim, err := c.alg.build(c.rate(c.a), int(c.a[1]), WithClock(clk))
	if err != nil {
		return err
	}
	defer lim.Close()
	unit := max(c.period/time.Duration(max(c.a[0], c.b[0])), 1)
	maxN := int(max(c.a[1], c.b[1]))
	type pending struct {
		r *Reservation
		n int
	}
	var booked []pending
	var evs []actEvent
	changes, resets, total := 0, 0, 0
	for range steps {
		now := clk.Now().UnixNano()
		logf := func(f string, a ...any) {
			if debugTrace {
				fmt.Printf("%d: "+f+"\n", append([]any{now - suiteT0.UnixNano()}, a...)...)
			}
		}
		switch p := rng.IntN(100); {
		case p < 22:
			d := time.Duration(rng.Int64N(int64(2 * unit)))
			if rng.IntN(20) == 0 {
				d = -d
			}
			clk.Advance(d)
			logf("advance %d", d)
		case p < 35:
			if lim.Allow("k") {
				evs = append(evs, actEvent{"k", now, 1})
				logf("allow")
			}
		case p < 48:
			n := rng.IntN(maxN + 1)
			d, err := lim.AllowN(bg, "k", n)
			if errors.Is(err, ErrExceedsLimit) && n > lim.Limit() {
				continue
			}
			if err != nil {
				return err
			}
			if d.Allowed && n > 0 {
				evs = append(evs, actEvent{"k", now, n})
				logf("allowN %d", n)
			}
		case p < 72:
			n := 1 + rng.IntN(maxN)
			r, err := lim.Reserve(bg, "k", n)
			if errors.Is(err, ErrExceedsLimit) && n > lim.Limit() {
				continue
			}
			if err != nil {
				return err
			}
			if r.OK() {
				booked = append(booked, pending{r, n})
				logf("reserve %d at %d", n, r.TimeToAct().UnixNano()-suiteT0.UnixNano())
			}
		case p < 88:
			if len(booked) == 0 {
				continue
			}
			i := rng.IntN(len(booked))
			b := booked[i]
			booked = slices.Delete(booked, i, i+1)
			act := b.r.TimeToAct().UnixNano()
			b.r.Cancel()
			if now > act { // due: the events acted
				evs = append(evs, actEvent{"k", act, b.n})
			}
			logf("cancel %d at %d", b.n, act-suiteT0.UnixNano())
		case p < 97:
			cfg := c.a
			if rng.IntN(2) == 0 {
				cfg = c.b
			}
			if err := c.alg.setRate(lim, c.rate(cfg), int(cfg[1])); err != nil {
				return err
			}
			changes++
			logf("setrate %v", cfg)
		case p < 98:
			dropped := lim.Stats().EvictedAtRest
			lim.Sweep()
			if lim.Stats().EvictedAtRest == dropped {
				continue
			}
			// A key dropped at rest is lossless while the parameters
			// stay; seen again after a change it starts afresh under the
			// new ones, as a new key: what it used before is forgotten,
			// so the bound starts over (at rest, nothing is booked ahead).
			for _, b := range booked {
				evs = append(evs, actEvent{"k", b.r.TimeToAct().UnixNano(), b.n})
			}
			booked = nil
			if err := c.check()(evs); err != nil {
				return fmt.Errorf("before a drop at rest: %w", err)
			}
			total += len(evs)
			evs = evs[:0]
			logf("dropped at rest")
		default:
			// A reset gives the key a fresh allowance: the bound starts
			// over, so the trace checks the events so far and starts anew.
			for _, b := range booked {
				evs = append(evs, actEvent{"k", b.r.TimeToAct().UnixNano(), b.n})
			}
			booked = nil
			if err := c.check()(evs); err != nil {
				return fmt.Errorf("before reset %d: %w", resets, err)
			}
			total += len(evs)
			evs = evs[:0]
			lim.Reset("k")
			logf("reset")
			resets++
			// Bookings made before the reset act when they were due, on
			// top of the fresh allowance: not the reset's to take back,
			// so the next segment starts with the clock past them.
			clk.Advance(c.period * 3)
		}
	}
	for _, b := range booked {
		evs = append(evs, actEvent{"k", b.r.TimeToAct().UnixNano(), b.n})
	}
	total += len(evs)
	*nChanges += changes
	*nEvents += total
	return c.check()(evs)
}

// TestSetRateRacesCallers: in a synctest bubble, eight goroutines on one
// key race Allow, AllowN, Reserve, Cancel and Wait (some with deadlines,
// some cancelled while they wait) while another changes the rate back and
// forth between two configurations. Under -race; the events that act keep
// the larger configuration's bound, and every booking the limiter granted
// is accounted for (acted, or cancelled before it was due).
func TestSetRateRacesCallers(t *testing.T) {
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
				synctest.Test(t, func(t *testing.T) { acted += raceRateChanges(t, c, seed) })
			}
			// Over all seeds: how many act in one depends on the bubble's
			// scheduling.
			if acted < 8*seeds {
				t.Fatalf("too tame: %d events acted over %d seeds", acted, seeds)
			}
		})
	}
}

// raceRateChanges plays one seed and returns how many events acted.
func raceRateChanges(t *testing.T, c rateChangeCase, seed uint64) int {
	lim, err := c.alg.build(c.rate(c.a), int(c.a[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	unit := max(c.period/time.Duration(max(c.a[0], c.b[0])), 1)
	return raceCallers(t, lim, c, seed, []string{"k"}, raceOperator{
		every: 3 * unit, stream: 99,
		act: func(i int, _ *rand.Rand) {
			cfg := c.a
			if i%2 == 0 {
				cfg = c.b
			}
			if err := c.alg.setRate(lim, c.rate(cfg), int(cfg[1])); err != nil {
				t.Error(err)
			}
		},
	})
}

// raceOperator is a goroutine of raceCallers that changes the limiter:
// act(i, rng) for i = 0, 1, ... at random intervals below every, drawn
// from its own stream of the seed.
type raceOperator struct {
	every  time.Duration
	stream uint64
	act    func(i int, rng *rand.Rand)
}

// raceCallers races, in a synctest bubble, eight goroutines of 25 calls
// each on keys of lim (Allow, AllowN, Reserve, some cancelled, WaitN, some
// with deadlines) against the operators, each in a goroutine of its own,
// until the callers are done. Every booking granted is accounted for
// (acted, or cancelled before it was due); each key's events must keep
// c's bound. It returns how many events acted.
func raceCallers(t *testing.T, lim testLimiter, c rateChangeCase, seed uint64, keys []string, operators ...raceOperator) int {
	unit := max(c.period/time.Duration(max(c.a[0], c.b[0])), 1)
	maxN := int(min(c.a[1], c.b[1])) // valid under both: no ErrExceedsLimit race to sort out
	var mu sync.Mutex
	evs := map[string][]actEvent{}
	record := func(key string, t int64, n int) {
		mu.Lock()
		evs[key] = append(evs[key], actEvent{key, t, n})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, op := range operators {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, op.stream))
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(rng.Int64N(int64(op.every)))):
				}
				op.act(i, rng)
			}
		})
	}
	var callers sync.WaitGroup
	for g := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, g))
		callers.Go(func() {
			for range 25 {
				time.Sleep(time.Duration(rng.Int64N(int64(2 * unit))))
				key := keys[0]
				if len(keys) > 1 {
					key = keys[rng.IntN(len(keys))]
				}
				n := 1 + rng.IntN(maxN)
				switch rng.IntN(4) {
				case 0:
					if lim.Allow(key) {
						record(key, time.Now().UnixNano(), 1)
					}
				case 1:
					if d, err := lim.AllowN(bg, key, n); err != nil {
						t.Error(err)
					} else if d.Allowed {
						record(key, time.Now().UnixNano(), n)
					}
				case 2:
					r, err := lim.Reserve(bg, key, n)
					if err != nil {
						t.Error(err)
						continue
					}
					if !r.OK() {
						continue
					}
					act := r.TimeToAct().UnixNano()
					if rng.IntN(2) == 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(3 * unit))))
						now := time.Now().UnixNano()
						r.Cancel()
						if now <= act {
							continue // given back, or kept unused: it does not act
						}
					}
					record(key, act, n)
				default:
					ctx, cancel := context.WithCancel(bg)
					if rng.IntN(2) == 0 { // a deadline, often too short
						ctx, cancel = context.WithTimeout(bg, time.Duration(rng.Int64N(int64(6*unit))))
					}
					err := lim.WaitN(ctx, key, n)
					cancel()
					if err == nil {
						record(key, time.Now().UnixNano(), n)
					} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrLimited) {
						t.Errorf("WaitN: %v", err)
					}
				}
			}
		})
	}
	callers.Wait()
	close(done)
	wg.Wait()
	total := 0
	for _, key := range keys {
		if err := c.check()(evs[key]); err != nil {
			t.Fatalf("seed %d key %s: %v", seed, key, err)
		}
		total += len(evs[key])
	}
	return total
}

// FuzzTokenBucketSetRate: a bucket at any rate and capacity, drained by
// some tokens and with some booked ahead, changes to any other valid rate
// and capacity after any delay. Whatever the values, at the change it
// holds no more tokens than it had nor than the new capacity, and nothing
// booked after the change acts before the latest booking made before it.
func FuzzTokenBucketSetRate(f *testing.F) {
	f.Add(int64(4), int64(time.Second), uint16(4), uint16(3), uint16(2), int64(0), int64(10), int64(time.Second), uint16(8))
	f.Add(int64(10), int64(3), uint16(5), uint16(5), uint16(5), int64(1), int64(3), int64(3), uint16(4))
	f.Add(int64(7), int64(13*time.Millisecond), uint16(5), uint16(1), uint16(0), int64(1e6), int64(1), int64(time.Hour), uint16(1))
	f.Add(int64(math.MaxInt64), int64(1), uint16(65535), uint16(65535), uint16(65535), int64(0), int64(1), int64(1<<60), uint16(1))
	f.Fuzz(func(t *testing.T, n1, p1 int64, c1, taken, ahead uint16, dt, n2, p2 int64, c2 uint16) {
		clk := NewManualClock(suiteT0)
		tb, err := NewTokenBucket(Per(n1, time.Duration(p1)), int(c1), WithClock(clk))
		if err != nil {
			return
		}
		ctx := context.Background()
		taken, ahead = min(taken, c1), min(ahead, c1)
		mustAllowN(t, tb, "k", int(taken))
		var last time.Time // the latest booking's instant
		if ahead > 0 {
			r, err := tb.Reserve(ctx, "k", int(ahead))
			if err != nil {
				t.Fatal(err)
			}
			if r.OK() {
				last = r.TimeToAct()
			}
		}
		clk.Advance(time.Duration(min(max(dt, 0), int64(maxSpan))))
		before := mustAllowN(t, tb, "k", 0)
		if err := tb.SetRate(Per(n2, time.Duration(p2)), int(c2)); err != nil {
			if !errors.Is(err, ErrInvalidRate) && !errors.Is(err, ErrInvalidCapacity) {
				t.Fatalf("SetRate: %v", err)
			}
			if after := mustAllowN(t, tb, "k", 0); after != before {
				t.Fatalf("a refused change changed the key: %+v, then %+v", before, after)
			}
			return
		}
		after := mustAllowN(t, tb, "k", 0)
		if tb.Stats().Keys == 0 {
			return // nothing taken: the key was never held, and starts afresh
		}
		if after.Remaining > before.Remaining || after.Remaining > int(c2) || after.Limit != int(c2) {
			t.Fatalf("tokens grew at the change: %+v, then %+v (capacity %d)", before, after, c2)
		}
		if last.IsZero() || !last.After(clk.Now()) {
			return
		}
		r, err := tb.Reserve(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() && r.TimeToAct().Before(last) {
			t.Fatalf("a booking after the change acts at %v, before one made earlier at %v", r.TimeToAct(), last)
		}
	})
}
