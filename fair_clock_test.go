package ratelimit

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// countingClock is a manual clock that counts its readings.
type countingClock struct {
	*ManualClock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.ManualClock.Now()
}

// funcClock is a clock of a type that cannot be compared.
type funcClock func() time.Time

func (f funcClock) Now() time.Time                 { return f() }
func (f funcClock) NewTimer(d time.Duration) Timer { return SystemClock().NewTimer(d) }

// onlyLimiter hides every method of a Limiter but the interface's.
type onlyLimiter struct{ Limiter }

// TestFairClockReadOnce: Fair.Allow over a TokenBucket on the same clock
// reads the clock once, and decides exactly as when the bucket reads it
// again itself (a limiter Fair cannot hand its reading to).
func TestFairClockReadOnce(t *testing.T) {
	mk := func(clk Clock, hide bool) *Fair {
		tb, err := NewTokenBucket(PerSecond(40), 10, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var shared Limiter = tb
		if hide {
			shared = onlyLimiter{tb}
		}
		f, err := NewFair(shared, PerSecond(40), WithFairClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	cc := &countingClock{ManualClock: NewManualClock(fairT0)}
	f := mk(cc, false)
	// A tenant's first window borrows (a peek and a take); from its second
	// window on, its events within its paced share (here what it asked for
	// in the first, 8, paced over the window: 7 by 0.9 s into it) are
	// guaranteed.
	for i := range 8 {
		if !f.Allow("a") {
			t.Fatalf("first window: event %d refused", i)
		}
	}
	cc.Advance(time.Second + 900*time.Millisecond)
	for i := range 5 {
		before := cc.reads.Load()
		if !f.Allow("a") {
			t.Fatalf("event %d within the share refused", i)
		}
		if got := cc.reads.Load() - before; got != 1 {
			t.Fatalf("event %d: Allow read the clock %d times, want 1", i, got)
		}
	}

	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 20 {
		c1, c2 := NewManualClock(fairT0), NewManualClock(fairT0)
		once, twice := mk(c1, false), mk(c2, true)
		if once.at == nil || twice.at != nil {
			t.Fatal("the reading is handed over only to a TokenBucket")
		}
		for i := range 2000 {
			tenant := string(rune('a' + rng.IntN(4)))
			if rng.IntN(3) == 0 {
				d := time.Duration(rng.IntN(int(60 * time.Millisecond)))
				c1.Advance(d)
				c2.Advance(d)
			}
			if a, b := once.Allow(tenant), twice.Allow(tenant); a != b {
				t.Fatalf("round %d call %d tenant %s: %v with one reading, %v with two", round, i, tenant, a, b)
			}
		}
		d1, _ := once.AllowN(context.Background(), "a", 0)
		d2, _ := twice.AllowN(context.Background(), "a", 0)
		if d1 != d2 {
			t.Fatalf("round %d: shared state differs: %+v, %+v", round, d1, d2)
		}
	}

	// A clock that cannot be compared is never taken for the bucket's.
	m := NewManualClock(fairT0)
	fc := funcClock(m.Now)
	g := mk(fc, false)
	if g.at != nil {
		t.Fatal("an incomparable clock taken for the bucket's")
	}
	if !g.Allow("a") {
		t.Fatal("refused on an incomparable clock")
	}
}
