package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestOverrideOtherKeyKeepsSurplus: a change of one key's override (set or
// removed) voids the surplus and the Cancel of bookings on that key alone;
// a booking on another key settles and cancels as if no change had been
// made. The run with the change is compared with one without it, on every
// algorithm, at random instants and sizes.
func TestOverrideOtherKeyKeepsSurplus(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		if alg.setOverride == nil {
			continue
		}
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(25, 1))
			for trial := 0; trial < 200; trial++ {
				limit := 2 + rng.IntN(8)
				n := 1 + rng.IntN(limit)
				actual := rng.IntN(n + 1)
				wait := time.Duration(rng.Int64N(int64(time.Second)))
				cancel := rng.IntN(3) == 0
				remove := rng.IntN(2) == 0
				run := func(change bool) Decision {
					clk := NewManualClock(time.Unix(1000, 0))
					l, err := alg.new(limit, time.Second, clk)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
					if remove {
						must(t, alg.setOverride(l, "team-b", Per(int64(5*limit), time.Second), 5*limit))
					}
					r, err := l.Reserve(ctx, "team-a", n)
					if err != nil || !r.OK() {
						t.Fatalf("Reserve(%d) of %d: %v, %v", n, limit, r, err)
					}
					clk.Advance(wait / 2)
					if change {
						if remove {
							l.RemoveOverride("team-b")
						} else {
							must(t, alg.setOverride(l, "team-b", Per(int64(5*limit), time.Second), 5*limit))
						}
					}
					clk.Advance(wait / 2)
					var d Decision
					if cancel {
						r.Cancel()
						d, _ = l.AllowN(ctx, "team-a", 0)
					} else {
						d, err = r.Settle(actual)
						if err != nil {
							t.Fatal(err)
						}
					}
					return d
				}
				want := run(false)
				got := run(true)
				if got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter || got.RetryAfter != want.RetryAfter {
					t.Fatalf("limit %d, booked %d, settled %d (cancel %v, remove %v) after %v: with another key's override changed %+v, without %+v",
						limit, n, actual, cancel, remove, wait, got, want)
				}
			}
		})
	}
}

// TestOverrideOwnKeyVoidsSurplus: a change of the key's own override voids
// its bookings' surplus: the example of the docs, on the token bucket.
func TestOverrideOwnKeyVoidsSurplus(t *testing.T) {
	ctx := context.Background()
	clk := NewManualClock(time.Unix(1000, 0))
	tb, err := NewTokenBucket(PerSecond(5), 6, WithClock(clk))
	must(t, err)
	r, err := tb.Take(ctx, "team-a", 4)
	must(t, err)
	must(t, tb.SetOverride("team-b", PerSecond(50), 50))
	d, err := r.Settle(1)
	must(t, err)
	if d.Remaining != 5 {
		t.Fatalf("another key's override: Remaining %d, want 5", d.Remaining)
	}
	r, err = tb.Take(ctx, "team-a", 4) // 1 left
	must(t, err)
	must(t, tb.SetOverride("team-a", PerSecond(5), 6))
	d, err = r.Settle(1)
	must(t, err)
	if d.Remaining != 1 {
		t.Fatalf("the key's own override: Remaining %d, want 1 (the surplus voided)", d.Remaining)
	}
}
