package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// A clock that moves back into an earlier window does not move Fair's
// window back (roll only goes forward), so τ = now − start of the window
// is negative there. The paced guarantee must then be what it is at the
// window's start (τ = 0): b events, not more. Before the fix a negative τ
// wrapped to a huge unsigned number and the whole guarantee g was
// "paced" at once, letting a flooder take its whole share the moment the
// clock stepped back (an NTP step on a wall clock, say).
func TestFairPacingClockBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	for range 20000 {
		w := int64(1) + rng.Int64N(int64(24*time.Hour))
		if rng.IntN(4) == 0 {
			w = int64(maxSpan) - rng.Int64N(1000)
		}
		const win = 3
		f := &Fair{window: w, win: win}
		g := int64(1) + rng.Int64N(1<<uint(1+rng.IntN(50)))
		b := max(1, g/16)
		back := int64(1) + rng.Int64N(win*w) // now in [0, win·W)
		if rng.IntN(2) == 0 {
			back = 1 + rng.Int64N(min(w, 1000))
		}
		now := win*w - back
		for _, used := range []int64{b, b + 1, g, 1 + rng.Int64N(g)} {
			tn := &tenant{g: g, used: used - 1}
			want := used <= b
			if got := f.guaranteed(tn, 1, now); got != want {
				t.Fatalf("g %d W %d, clock %d ns before the window: %d events guaranteed = %v, want %v (b %d)", g, w, back, used, got, want, b)
			}
		}
	}
}

// The same through Allow: tenants a and b ask their share in window 0, so
// each is guaranteed g = 80 in window 1. There the shared bucket, drained
// by a direct call, has 10 tokens left, and the clock steps back 1 ns into
// window 0. a may take b = max(1, ⌊g/16⌋) = 5 of them by its pace (τ is 0
// at most), the rest being held for b's guarantee: not all 10.
func TestFairClockBackKeepsPace(t *testing.T) {
	clock := NewManualClock(t0)
	tb, err := NewTokenBucket(PerSecond(160), 160, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFair(tb, PerSecond(160), WithFairClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for range 80 {
		f.Allow("a")
		f.Allow("b")
	}
	clock.Set(t0.Add(time.Second)) // window 1, the bucket full again
	if s, active := f.Share(); s != 80 || active != 2 {
		t.Fatalf("share %d among %d, want 80 among 2", s, active)
	}
	if d, err := tb.AllowN(context.Background(), "", 150); err != nil || !d.Allowed || d.Remaining != 10 {
		t.Fatalf("draining the bucket: %+v, %v", d, err)
	}
	clock.Set(t0.Add(time.Second - time.Nanosecond))
	got := 0
	for range 80 {
		if f.Allow("a") {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("a got %d events once the clock stepped back, want its pace at the window's start, 5", got)
	}
}
