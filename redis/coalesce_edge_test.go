package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// exact52 is 2^52: below it the sliding window counter multiplies in
// doubles, from it on in 26-bit limbs (see luaSWCMath).
const exact52 = 1 << 52

// edgeCases are parameters at the edges of the scripts' arithmetic, each
// with the clock's typical move (step) chosen so that windows roll and
// buckets refill within a trace:
//   - the sliding window counter where prev*W, the largest product it
//     forms, lies just below, at and just above 2^52, for a small limit
//     over a long window and for the largest limit over a short one, so
//     that one trace takes both paths as the previous window's count grows;
//   - the buckets with a rate's count at 2^52 and capacity/rate at 35 days;
//   - the fixed window with the largest limit, and a 1 ns window.
func edgeCases() []algoCase {
	byName := map[string]testAlgorithm{}
	for _, a := range testAlgorithms {
		byName[a.name] = a
	}
	var cs []algoCase
	add := func(name string, p params, step time.Duration) {
		c := byName[name].conformanceCase(p)
		c.step = step
		cs = append(cs, c)
	}
	w3 := time.Duration(exact52 / 3) // 3*w3 = 2^52 - 1
	for _, w := range []time.Duration{w3, w3 + 1} {
		add("SlidingWindowCounter", params{rate: ratelimit.Per(3, w)}, w/5)
	}
	for _, w := range []time.Duration{1<<30 - 1, 1 << 30, 1<<30 + 1} {
		add("SlidingWindowCounter", params{rate: ratelimit.Per(1<<22, w)}, w/7)
	}
	for _, w := range []time.Duration{4095, 4096, 4097} {
		add("SlidingWindowCounter", params{rate: ratelimit.Per(1<<40, w)}, w/5)
	}
	add("SlidingWindowCounter", params{rate: ratelimit.Per(2, maxSpan)}, maxSpan/5)
	for _, name := range []string{"TokenBucket", "LeakyBucket", "LeakyMeter"} {
		add(name, params{ratelimit.Per(1<<52, time.Second), 1 << 20}, time.Second>>22)
		add(name, params{ratelimit.Per(1, maxSpan), 1}, maxSpan/3)
		add(name, params{ratelimit.Per(5, 7*24*time.Hour), 25}, 24*time.Hour)
	}
	add("FixedWindow", params{rate: ratelimit.Per(1<<40, maxSpan)}, maxSpan/5)
	add("FixedWindow", params{rate: ratelimit.Per(3, time.Nanosecond)}, 1)
	return cs
}

// TestBatchedDecisionsAtEdges runs the batched traces of
// TestBatchedDecisions (batches of AllowN, Reserve, Take and Cancel on
// repeated keys, against the in-memory limiter one decision at a time) on
// edgeCases.
func TestBatchedDecisionsAtEdges(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for i, c := range edgeCases() {
		t.Run(fmt.Sprintf("%d_%s", i, c.name), func(t *testing.T) { batchedTrace(t, c, client, uint64(i)+11, 40) })
	}
}

// TestSlidingCounterProductsExact: the sliding window counter's earliest
// and remaining at the instants and counts where the products they
// compare meet exactly (a full or half-full previous window, counts of
// half the limit and one more, offsets of 0, 1, a quarter and a half
// window, a nanosecond before its end), for windows whose products lie
// below, at and above 2^52: every decision, through the batch form of
// the script, as in memory.
func TestSlidingCounterProductsExact(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	w3 := time.Duration(exact52 / 3)
	rates := []ratelimit.Rate{
		ratelimit.Per(3, w3), ratelimit.Per(3, w3+1), ratelimit.Per(4, 8),
		ratelimit.Per(1<<22, 1<<30-1), ratelimit.Per(1<<22, 1<<30), ratelimit.Per(1<<22, 1<<30+1),
		ratelimit.Per(1<<40, 4095), ratelimit.Per(1<<40, 4096), ratelimit.Per(1<<40, 4097),
	}
	var c testAlgorithm
	for _, a := range testAlgorithms {
		if a.vectors == "slidingcounter" {
			c = a
		}
	}
	for _, rate := range rates {
		ac := c.conformanceCase(params{rate: rate})
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, ac, mc, client, withBatchAlways())
		L, W := int(rate.N), rate.Period
		firsts := []int{L, L / 2, L/2 + 1, L - 1}
		seconds := []int{L / 2, L/2 + 1, L / 4, 1, L}
		offsets := []time.Duration{0, 1, W / 4, W / 2, W - 1}
		at := time.Unix(0, windowStart(start.UnixNano(), int64(W))+int64(W)) // a window's start
		k := 0
		for _, f := range firsts {
			for _, off := range offsets {
				for _, s := range seconds {
					key := fmt.Sprint("k", k)
					k++
					for _, step := range []struct {
						d time.Duration
						n int
					}{{0, f}, {W + off, s}, {W + off, 0}} {
						mc.Set(at.Add(step.d))
						want, err1 := core.AllowN(bg, key, step.n)
						got, err2 := rds.AllowN(bg, key, step.n)
						if want != got || err1 != nil || err2 != nil {
							t.Fatalf("%v: AllowN(%d) at +%v after %d at the window's start: core %+v %v, redis %+v %v",
								rate, step.n, step.d, f, want, err1, got, err2)
						}
					}
				}
			}
		}
	}
}
