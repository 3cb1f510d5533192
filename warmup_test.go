package ratelimit

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var wbEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newWB(t *testing.T, rate Rate, c int, w WarmUp) (*WarmingBucket, *ManualClock) {
	t.Helper()
	clk := NewManualClock(wbEpoch)
	wb, err := NewWarmingBucket(rate, c, w, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return wb, clk
}

// wbHammer asks Allow every step for d and returns how many were allowed.
func wbHammer(wb *WarmingBucket, clk *ManualClock, key string, d, step time.Duration) int {
	n := 0
	for e := time.Duration(0); e < d; e += step {
		if wb.Allow(key) {
			n++
		}
		clk.Advance(step)
	}
	return n
}

// TestWarmingTimeline pins the curve of docs/protections.md: 10/s,
// capacity 4, warm-up 10s, cold factor 3, asked every millisecond.
func TestWarmingTimeline(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 4, WarmUp{Period: 10 * time.Second})
	// Cold burst: 1 + ⌊(C−1)/k⌋ = 2 at once.
	burst := 0
	for range 4 {
		if wb.Allow("") {
			burst++
		}
	}
	if burst != 2 {
		t.Fatalf("cold burst %d, want 2", burst)
	}
	wb.Reset("")
	want := []int{5, 4, 5, 6, 6, 7, 8, 8, 9, 10, 10, 10, 10} // per second, from idle
	for i, w := range want {
		if got := wbHammer(wb, clk, "", time.Second, time.Millisecond); got != w {
			t.Errorf("second %d: %d allowed, want %d", i, got, w)
		}
	}
	// Idle for IdleAfter (10s) after the bucket refilled: cold again.
	clk.Advance(11 * time.Second)
	if got := wbHammer(wb, clk, "", time.Second, time.Millisecond); got != want[0] {
		t.Errorf("after idle: %d allowed in the first second, want %d", got, want[0])
	}
}

// TestWarmingTrickleWarms: a steady trickle below the full rate (gaps
// shorter than IdleAfter) does not keep the bucket cold: the ramp ends
// after the warm-up period, and the full rate is then available at once.
func TestWarmingTrickleWarms(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 1, WarmUp{Period: 10 * time.Second, IdleAfter: time.Second})
	for range 150 { // 30 s at 5/s
		wb.Allow("k")
		clk.Advance(200 * time.Millisecond)
	}
	if got := wbHammer(wb, clk, "k", time.Second, time.Millisecond); got != 10 {
		t.Fatalf("after a 30s trickle: %d allowed in a second, want the full rate 10", got)
	}
}

// TestWarmingNotTooFastAfterIdle: after idle, the first second gets the
// ramp's start, not the full rate, and never more than the bound.
func TestWarmingNotTooFastAfterIdle(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 1, WarmUp{Period: 10 * time.Second, IdleAfter: time.Second})
	wbHammer(wb, clk, "k", 20*time.Second, time.Millisecond) // warm
	clk.Advance(2 * time.Second)                             // idle
	// d(x) = ⌈300ms·10s/(10s+2x)⌉: at most 1 + ⌊1s/d(1s)⌋ = 1 + ⌊1000/250⌋.
	if got := wbHammer(wb, clk, "k", time.Second, time.Millisecond); got > 5 || got < 3 {
		t.Fatalf("first second after idle: %d allowed, want 3..5", got)
	}
}

func TestWarmingErrors(t *testing.T) {
	for _, w := range []WarmUp{{}, {Period: -1}, {Period: time.Second, ColdFactor: -1}, {Period: time.Second, ColdFactor: 1001},
		{Period: time.Second, IdleAfter: -1}, {Period: 1 << 62}} {
		if _, err := NewWarmingBucket(PerSecond(1), 1, w); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%+v: err %v, want ErrInvalidOption", w, err)
		}
	}
	if _, err := NewWarmingBucket(Rate{}, 1, WarmUp{Period: time.Second}); !errors.Is(err, ErrInvalidRate) {
		t.Errorf("zero rate: %v", err)
	}
	if _, err := NewWarmingBucket(PerSecond(1), 0, WarmUp{Period: time.Second}); !errors.Is(err, ErrInvalidCapacity) {
		t.Errorf("zero capacity: %v", err)
	}
	if _, err := NewWarmingBucket(Every(time.Hour*24*365*20), 1, WarmUp{Period: time.Second}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("cold span too long: %v", err)
	}
}

func TestWarmingCancelLatest(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 1, WarmUp{Period: 10 * time.Second})
	ctx := context.Background()
	if !wb.Allow("k") {
		t.Fatal("first refused")
	}
	r, _ := wb.Reserve(ctx, "k", 1)
	if !r.OK() || r.Delay() != 300*time.Millisecond {
		t.Fatalf("booking: ok %v delay %v, want 300ms", r.OK(), r.Delay())
	}
	r.Cancel()
	clk.Advance(300 * time.Millisecond)
	if !wb.Allow("k") {
		t.Fatal("cancelled booking not given back")
	}
}

func TestWarmingAllowNoAlloc(t *testing.T) {
	wb, clk := newWB(t, PerSecond(1000), 10, WarmUp{Period: time.Second})
	wb.Allow("key")
	if a := testing.AllocsPerRun(1000, func() {
		wb.Allow("key")
		clk.Advance(time.Microsecond)
	}); a != 0 {
		t.Fatalf("Allow allocates %v", a)
	}
}

// wbOracle is the rule of WarmingBucket in exact rationals, for one key.
type wbOracle struct {
	i, slack        *big.Rat // I and (C−1)·I
	cold            int64
	k, w, idle, cap int64
	tat             *big.Rat
	ramp            int64
}

func newWBOracle(r Rate, c int64, w WarmUp) *wbOracle {
	k := int64(w.ColdFactor)
	if k == 0 {
		k = 3
	}
	idle := int64(w.IdleAfter)
	if idle == 0 {
		idle = int64(w.Period)
	}
	i := big.NewRat(int64(r.Period), r.N)
	cold := new(big.Rat).Mul(i, big.NewRat(k, 1))
	return &wbOracle{i: i, slack: new(big.Rat).Mul(i, big.NewRat(c-1, 1)), cold: ceilRat(cold),
		k: k, w: int64(w.Period), idle: idle, cap: c, tat: nil}
}

func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// cost is d(x) as a rational.
func (o *wbOracle) cost(x int64) *big.Rat {
	if x >= o.w {
		return o.i
	}
	num := new(big.Int).Mul(big.NewInt(o.cold), big.NewInt(o.w))
	return new(big.Rat).SetInt64(ceilRat(new(big.Rat).SetFrac(num, big.NewInt(o.w+(o.k-1)*x))))
}

// allow decides n events at t; it returns the cost charged to each.
func (o *wbOracle) allow(t, n int64) (*big.Rat, int64, bool) {
	tr := new(big.Rat).SetInt64(t)
	if o.tat == nil || ceilRat(o.tat) <= t-o.idle {
		o.tat, o.ramp = tr, t
	}
	d := o.cost(t - o.ramp)
	base := o.tat
	if base.Cmp(tr) < 0 {
		base = tr
	}
	last := new(big.Rat).Add(base, new(big.Rat).Mul(d, big.NewRat(n-1, 1)))
	if last.Cmp(new(big.Rat).Add(tr, o.slack)) > 0 {
		return d, o.ramp, false
	}
	o.tat = new(big.Rat).Add(last, d)
	return d, o.ramp, true
}

// TestWarmingBoundProperty checks, on random traces with idle gaps, every
// decision against the exact oracle and the stated bounds over every
// interval between two allowed events: the costs charged fill at most the
// interval plus (C−1)·I, the count is at most C + ⌊D/I⌋, and within one
// ramp at most 1 + ⌊(D + (C−1)·I)/d(b − s)⌋.
func TestWarmingBoundProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 2))
	periods := []time.Duration{time.Second, time.Second + 1, 7 * time.Millisecond, 999_999_937}
	for trial := range 120 {
		rate := Rate{N: 1 + rng.Int64N(7), Period: periods[rng.IntN(len(periods))]}
		c := 1 + rng.Int64N(5)
		w := WarmUp{Period: time.Duration(1 + rng.Int64N(int64(20*rate.Period))), ColdFactor: rng.IntN(6),
			IdleAfter: time.Duration(rng.Int64N(int64(3 * rate.Period)))}
		wb, clk := newWB(t, rate, int(c), w)
		o := newWBOracle(rate, c, w)
		var times []int64
		var costs []*big.Rat
		var ramps []int64
		now := int64(0)
		for step := range 300 {
			switch rng.IntN(10) {
			case 0:
				clk.Advance(time.Duration(rng.Int64N(int64(5 * w.Period)))) // idle gap
			default:
				clk.Advance(time.Duration(rng.Int64N(int64(rate.Period) / rate.N)))
			}
			now = clk.Now().Sub(wbEpoch).Nanoseconds()
			n := int64(1)
			var got bool
			if rng.IntN(4) == 0 {
				n = 1 + rng.Int64N(c)
				d, _ := wb.AllowN(context.Background(), "key", int(n))
				got = d.Allowed
			} else {
				got = wb.Allow("key")
			}
			d, ramp, want := o.allow(now, n)
			if got != want {
				t.Fatalf("trial %d step %d (rate %v c %d %+v): Allow(%d) at %d = %v, oracle %v", trial, step, rate, c, w, n, now, got, want)
			}
			if got {
				for range n {
					times, costs, ramps = append(times, now), append(costs, d), append(ramps, ramp)
				}
			}
		}
		// Prefix sums of the costs.
		pre := make([]*big.Rat, len(costs)+1)
		pre[0] = new(big.Rat)
		for i, d := range costs {
			pre[i+1] = new(big.Rat).Add(pre[i], d)
		}
		burst := new(big.Rat).Mul(o.i, big.NewRat(c-1, 1))
		for i := range times {
			for j := i; j < len(times); j++ {
				span := big.NewRat(times[j]-times[i], 1)
				sum := new(big.Rat).Sub(pre[j], pre[i]) // costs of events i … j−1
				if sum.Cmp(new(big.Rat).Add(span, burst)) > 0 {
					t.Fatalf("trial %d: events %d..%d in %dns charge %v > span + (C−1)I", trial, i, j, times[j]-times[i], sum.FloatString(1))
				}
				lim := new(big.Rat).Quo(span, o.i)
				maxN := c + new(big.Int).Quo(lim.Num(), lim.Denom()).Int64()
				if int64(j-i+1) > maxN {
					t.Fatalf("trial %d: %d events in %dns > C + ⌊D/I⌋ = %d", trial, j-i+1, times[j]-times[i], maxN)
				}
				// Within one ramp: (m−1)·d(b − s) <= D + (C−1)·I.
				if ramps[i] == ramps[j] && new(big.Rat).Mul(costs[j], big.NewRat(int64(j-i), 1)).Cmp(new(big.Rat).Add(span, burst)) > 0 {
					t.Fatalf("trial %d: %d events in one ramp in %dns, more than 1 + (D + (C−1)I)/d(b−s)", trial, j-i+1, times[j]-times[i])
				}
			}
		}
	}
}

// TestWarmingCostExact: the ramp's interval is rounded up to a whole
// nanosecond, never down: 2s into a 10s ramp from 300ms, 3s/14 ns.
func TestWarmingCostExact(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 1, WarmUp{Period: 10 * time.Second})
	wb.Allow("k")
	clk.Advance(2 * time.Second)
	if !wb.Allow("k") {
		t.Fatal("refused 2s in")
	}
	r, _ := wb.Reserve(context.Background(), "k", 1)
	if want := time.Duration(214_285_715); r.Delay() != want {
		t.Fatalf("delay %d, want ⌈3e9/14⌉ = %d", r.Delay(), want)
	}
	clk.Advance(9 * time.Second) // 11s in: warm, booked ahead by one cost
	wb.Allow("k")
	r, _ = wb.Reserve(context.Background(), "k", 1)
	if r.Delay() != 100*time.Millisecond {
		t.Fatalf("warm delay %v, want 100ms", r.Delay())
	}
}

// TestWarmingPerKey: each key warms on its own; a key new to a warm
// limiter starts cold. Concurrent callers on a still clock share the cold
// burst exactly.
func TestWarmingPerKey(t *testing.T) {
	wb, clk := newWB(t, PerSecond(10), 4, WarmUp{Period: 10 * time.Second})
	wbHammer(wb, clk, "warm", 20*time.Second, time.Millisecond)
	clk.Advance(400 * time.Millisecond) // refilled, far from idle
	count := func(key string) int {
		n := 0
		for range 10 {
			if wb.Allow(key) {
				n++
			}
		}
		return n
	}
	if got := count("warm"); got != 4 {
		t.Errorf("warm key: burst %d, want C = 4", got)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if wb.Allow("cold") {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 2 {
		t.Errorf("new key: burst %d under concurrency, want 1 + ⌊(C−1)/k⌋ = 2", got)
	}
}

// BenchmarkWarmingAllow compares WarmingBucket.Allow with TokenBucket.Allow
// on the same keys and clock, warm (the ramp over).
func BenchmarkWarmingAllow(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + time.Duration(i).String()
	}
	clk := NewManualClock(wbEpoch)
	tb, _ := NewTokenBucket(PerSecond(1_000_000), 1000, WithClock(clk))
	wb, _ := NewWarmingBucket(PerSecond(1_000_000), 1000, WarmUp{Period: time.Millisecond}, WithClock(clk))
	for _, k := range keys {
		tb.Allow(k)
		wb.Allow(k)
	}
	clk.Advance(time.Second)
	for _, c := range []struct {
		name string
		l    interface{ Allow(string) bool }
	}{{"token", tb}, {"warming", wb}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				c.l.Allow(keys[i&1023])
			}
		})
	}
}

// TestWarmingDecision: Remaining counts the events that conform now at
// the current cost; RetryAfter says when the next one does.
func TestWarmingDecision(t *testing.T) {
	wb, _ := newWB(t, PerSecond(10), 4, WarmUp{Period: 10 * time.Second})
	ctx := context.Background()
	steps := []struct {
		n       int
		allowed bool
		rem     int
		retry   time.Duration
	}{
		{0, true, 2, 0}, // a peek on a cold key: the cold burst
		{1, true, 1, 0},
		{1, true, 0, 0},
		{1, false, 0, 300 * time.Millisecond},
	}
	for i, s := range steps {
		d, err := wb.AllowN(ctx, "k", s.n)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.rem || d.RetryAfter != s.retry || d.Limit != 4 {
			t.Errorf("step %d: %+v, %v; want allowed %v remaining %d retry %v", i, d, err, s.allowed, s.rem, s.retry)
		}
	}
	if _, err := wb.AllowN(ctx, "k", 5); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("n > C: %v", err)
	}
}
