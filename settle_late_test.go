package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestLateSettleIgnoresDrop: on the buckets, a late Settle's excess costs
// the same whether or not the key was dropped at rest before it (by a
// sweep): a debt is charged from now at the earliest, on a bucket full
// again if it has refilled. Random bookings, delays and excesses; the
// Decision after the Settle, and the decisions after it, must match.
func TestLateSettleIgnoresDrop(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms[:2] { // TokenBucket, LeakyBucket
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(25, 2))
			for trial := 0; trial < 300; trial++ {
				limit := 1 + rng.IntN(8)
				n := 1 + rng.IntN(limit)
				actual := n + 1 + rng.IntN(3*limit)
				wait := time.Duration(rng.Int64N(int64(3 * time.Second)))
				run := func(sweep bool) []Decision {
					clk := NewManualClock(time.Unix(1000, 0))
					l, err := alg.new(limit, time.Second, clk)
					must(t, err)
					defer l.Close()
					r, err := l.Reserve(ctx, "k", n)
					must(t, err)
					if !r.OK() {
						t.Fatalf("Reserve(%d) of %d refused", n, limit)
					}
					clk.Advance(wait)
					if sweep {
						l.Sweep()
					}
					d, err := r.Settle(actual)
					must(t, err)
					out := []Decision{d}
					for i := 0; i < 3; i++ {
						clk.Advance(time.Duration(rng.Int64N(int64(time.Second))))
						d, _ := l.AllowN(ctx, "k", 1)
						out = append(out, d)
					}
					return out
				}
				seed := rng.Uint64()
				rng = rand.New(rand.NewPCG(seed, 1))
				kept := run(false)
				rng = rand.New(rand.NewPCG(seed, 1))
				dropped := run(true)
				for i := range kept {
					if kept[i] != dropped[i] {
						t.Fatalf("limit %d, booked %d, settled %d after %v: step %d kept %+v, dropped at rest %+v",
							limit, n, actual, wait, i, kept[i], dropped[i])
					}
				}
				rng = rand.New(rand.NewPCG(seed, 2))
			}
		})
	}
}

// TestLateSettleExample is the docs' example: at 5/s, burst 6, a Take of
// 3 settled at 9 three seconds later leaves the bucket empty, with or
// without a sweep between.
func TestLateSettleExample(t *testing.T) {
	ctx := context.Background()
	for _, sweep := range []bool{false, true} {
		clk := NewManualClock(time.Unix(1000, 0))
		tb, err := NewTokenBucket(PerSecond(5), 6, WithClock(clk))
		must(t, err)
		r, err := tb.Take(ctx, "k", 3)
		must(t, err)
		clk.Advance(3 * time.Second)
		if sweep {
			tb.Sweep()
		}
		d, err := r.Settle(9)
		must(t, err)
		if d.Remaining != 0 || d.ResetAfter != 1200*time.Millisecond {
			t.Errorf("sweep %v: %+v, want Remaining 0, ResetAfter 1.2s", sweep, d)
		}
	}
}
