package ratelimit

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backend simulates a dependency that serves `servers` calls at once,
// each taking `service` (which the test may change), the others waiting in
// one FIFO queue. It runs on a ManualClock, one goroutine, deterministic.
type backend struct {
	clock   *ManualClock
	servers int
	service time.Duration
	free    timeHeap // when each server is next free
	done    timeHeap // completion times of the calls admitted
}

func newBackend(clock *ManualClock, servers int, service time.Duration) *backend {
	b := &backend{clock: clock, servers: servers, service: service}
	for range servers {
		heap.Push(&b.free, clock.Now().UnixNano())
	}
	return b
}

// arrive admits a call now.
func (b *backend) arrive() {
	now := b.clock.Now().UnixNano()
	start := max(heap.Pop(&b.free).(int64), now)
	end := start + int64(b.service)
	heap.Push(&b.free, end)
	heap.Push(&b.done, end)
}

// drive runs n calls through a under unbounded demand (every permit the
// bulkhead gives is used at once) and returns the limit after each.
func (b *backend) drive(a *AdaptiveBulkhead, n int) []int {
	limits := make([]int, 0, n)
	for range n {
		for a.TryAcquire() {
			b.arrive()
		}
		end := heap.Pop(&b.done).(int64)
		b.clock.Set(time.Unix(0, end))
		a.Release()
		limits = append(limits, a.Limit())
	}
	return limits
}

type timeHeap []int64

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// within reports whether every limit of ls, ignoring probe windows (whose
// limit is halved on purpose), is in [lo, hi], and the range seen.
func within(ls []int, lo, hi int) (ok bool, seenLo, seenHi int) {
	seenLo, seenHi = 1<<62, 0
	for _, l := range ls {
		if l < seenLo {
			seenLo = l
		}
		seenHi = max(seenHi, l)
	}
	return seenLo >= lo && seenHi <= hi, seenLo, seenHi
}

func newAdaptiveAt(t *testing.T, p AdaptiveParams) (*AdaptiveBulkhead, *ManualClock) {
	t.Helper()
	clock := NewManualClock(time.Unix(1_000_000, 0))
	a, err := NewAdaptiveBulkhead(p, WithBulkheadClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return a, clock
}

// The limit climbs from 1 to the backend's capacity (C calls at once) and
// settles between C + Alpha − 1 and a growth step over C + Beta; a
// slowdown of the backend shrinks it, and when the slowdown ends it comes
// back to the same band.
func TestAdaptiveConvergesAndRecovers(t *testing.T) {
	for _, c := range []int{5, 20, 100, 400} {
		a, clock := newAdaptiveAt(t, AdaptiveParams{Max: 1000, ProbeEvery: -1})
		b := newBackend(clock, c, 10*time.Millisecond)
		p := a.params

		b.drive(a, 100*c)
		steady := b.drive(a, 50*c)
		// The band: Alpha..Beta calls queued, plus one growth step over.
		lo, hi := c+p.Alpha-1, c+p.Beta+1+(c+p.Beta)/32
		if ok, l, h := within(steady, lo, hi); !ok {
			t.Errorf("C=%d: steady limits in [%d, %d], want within [%d, %d]", c, l, h, lo, hi)
		}
		if got := a.MinLatency(); got != 10*time.Millisecond {
			t.Errorf("C=%d: no-load latency %v, want 10ms", c, got)
		}

		b.service = 30 * time.Millisecond // three times slower: queueing shows
		slow := b.drive(a, 50*c)
		_, steadyLo, _ := within(steady, 0, 0)
		if _, _, h := within(slow[len(slow)-10*c:], 0, 0); h >= steadyLo || (c >= 20 && h >= c) {
			t.Errorf("C=%d: limit up to %d during a 3x slowdown, want below %d (and below C from C=20)", c, h, steadyLo)
		}
		b.service = 10 * time.Millisecond
		b.drive(a, 100*c)
		back := b.drive(a, 50*c)
		if ok, l, h := within(back, lo, hi); !ok {
			t.Errorf("C=%d: limits after the slowdown in [%d, %d], want within [%d, %d]", c, l, h, lo, hi)
		}
	}
}

// A dependency that becomes slower for good: without probes the limit
// would stay low forever (N is stale); with them it re-learns N and
// returns near the capacity.
func TestAdaptiveProbeRelearnsLatency(t *testing.T) {
	const c = 20
	a, clock := newAdaptiveAt(t, AdaptiveParams{Max: 1000, ProbeEvery: 10})
	b := newBackend(clock, c, 10*time.Millisecond)
	b.drive(a, 2000)
	b.service = 40 * time.Millisecond
	b.drive(a, 5000)
	if got := a.MinLatency(); got != 40*time.Millisecond {
		t.Errorf("no-load latency %v after the change, want 40ms", got)
	}
	probes, outside := 0, 0
	p := a.params
	lo, hi := c+p.Alpha-1, c+p.Beta+1+(c+p.Beta)/32
	for _, l := range b.drive(a, 2000) {
		switch {
		case l <= hi/2:
			probes++ // the probe's halved limit
		case l < lo || l > hi:
			outside++
		}
	}
	if outside > 0 || probes == 0 {
		t.Errorf("%d limits outside [%d, %d], %d in probes", outside, lo, hi, probes)
	}

	// Without probes, the same change leaves the limit far below capacity.
	a, clock = newAdaptiveAt(t, AdaptiveParams{Max: 1000, ProbeEvery: -1})
	b = newBackend(clock, c, 10*time.Millisecond)
	b.drive(a, 2000)
	b.service = 40 * time.Millisecond
	b.drive(a, 5000)
	if l := a.Limit(); l >= c {
		t.Errorf("without probes: limit %d, expected the stale no-load latency to keep it below %d", l, c)
	}
}

// An idle client (never more than a few calls in flight) does not grow
// the limit, however fast the dependency.
func TestAdaptiveIdleDoesNotGrow(t *testing.T) {
	a, clock := newAdaptiveAt(t, AdaptiveParams{Min: 10, Max: 1000})
	for range 10_000 {
		a.TryAcquire()
		clock.Advance(time.Millisecond)
		a.Release()
	}
	if l := a.Limit(); l != 10 {
		t.Errorf("limit %d after 10,000 lone calls, want 10", l)
	}
}

func TestQueueEstimate(t *testing.T) {
	for _, tc := range []struct {
		limit    int
		mean, n  int64
		want     int64
		surprise string
	}{
		{10, 100, 100, 0, "no queueing"},
		{10, 100, 200, 0, "faster than the minimum: none"},
		{10, 200, 100, 5, "half the time queued: half the calls"},
		{10, 300, 100, 7, "20/3 rounds up"},
		{10, 0, 0, 0, "zero latency on a frozen clock"},
		{maxBulkheadLimit, 1<<63 - 1, 1, maxBulkheadLimit, "no overflow at the extremes"},
		{maxBulkheadLimit, 1<<63 - 1, 1<<63 - 2, 1, "a 1ns excess still counts"},
	} {
		if got := queueEstimate(tc.limit, tc.mean, tc.n); got != tc.want {
			t.Errorf("%s: queueEstimate(%d, %d, %d) = %d, want %d", tc.surprise, tc.limit, tc.mean, tc.n, got, tc.want)
		}
	}
}

func TestAdaptiveParams(t *testing.T) {
	for _, tc := range []struct {
		p    AdaptiveParams
		want error
	}{
		{AdaptiveParams{}, ErrInvalidCapacity},
		{AdaptiveParams{Max: -1}, ErrInvalidCapacity},
		{AdaptiveParams{Min: 5, Max: 4}, ErrInvalidCapacity},
		{AdaptiveParams{Max: maxBulkheadLimit + 1}, ErrInvalidCapacity},
		{AdaptiveParams{Min: -1, Max: 4}, ErrInvalidCapacity},
		{AdaptiveParams{Max: 4, Initial: 5}, ErrInvalidCapacity},
		{AdaptiveParams{Min: 2, Max: 4, Initial: 1}, ErrInvalidCapacity},
		{AdaptiveParams{Max: 4, Window: -1}, ErrInvalidOption},
		{AdaptiveParams{Max: 4, Alpha: 3, Beta: 3}, ErrInvalidOption},
		{AdaptiveParams{Max: 4, Alpha: -1, Beta: 3}, ErrInvalidOption},
		{AdaptiveParams{Max: 4, Alpha: 0, Beta: 1}, nil},
		{AdaptiveParams{Max: 4}, nil},
	} {
		_, err := NewAdaptiveBulkhead(tc.p)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v: %v, want %v", tc.p, err, tc.want)
		}
	}
	if _, err := NewAdaptiveBulkhead(AdaptiveParams{Max: 4}, WithMaxWait(-1)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a bad bulkhead option: %v", err)
	}
}

// Random interleavings of TryAcquire, Acquire (some cancelled), Release
// and clock moves, with random latencies, seeded. After every step:
//   - the limit is in [Min, Max];
//   - an acquisition never takes the calls in flight past the limit as it
//     was when the permit was granted;
//   - the permits held by the trace are the bulkhead's in flight, and the
//     latencies queued match them (no permit leaked or double-counted).
//
// At the end, with everything released, the full limit can be acquired.
func TestAdaptiveProperties(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 17))
		p := AdaptiveParams{Min: 1 + rng.IntN(3), Max: 4 + rng.IntN(40), Window: 1 + rng.IntN(10), ProbeEvery: rng.IntN(5) - 1}
		p.Initial = p.Min + rng.IntN(p.Max-p.Min+1)
		a, clock := newAdaptiveAt(t, p)
		p = a.params
		held := 0
		check := func(step int, what string) {
			t.Helper()
			if l := a.Limit(); l < p.Min || l > p.Max {
				t.Fatalf("seed %d step %d (%s): limit %d outside [%d, %d]", seed, step, what, l, p.Min, p.Max)
			}
			a.mu.Lock()
			queued := a.starts.len()
			a.mu.Unlock()
			if a.InFlight() != held || queued != held {
				t.Fatalf("seed %d step %d (%s): %d held, bulkhead says %d, %d latencies queued", seed, step, what, held, a.InFlight(), queued)
			}
		}
		for step := range 2000 {
			switch op := rng.IntN(10); {
			case op < 4:
				before := a.Limit()
				if a.TryAcquire() {
					held++
					if held > before {
						t.Fatalf("seed %d step %d: %d in flight after TryAcquire under a limit of %d", seed, step, held, before)
					}
				}
				check(step, "TryAcquire")
			case op < 5:
				// Acquire with a context that is already done, or that
				// can get a free permit at once: it never blocks here.
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(2) == 0 {
					cancel()
				}
				before := a.Limit()
				free := a.InFlight() < before && a.Waiting() == 0
				if free || ctx.Err() != nil {
					if err := a.Acquire(ctx); err == nil {
						held++
						if held > before {
							t.Fatalf("seed %d step %d: %d in flight after Acquire under a limit of %d", seed, step, held, before)
						}
					} else if ctx.Err() == nil {
						t.Fatalf("seed %d step %d: Acquire with a free permit: %v", seed, step, err)
					}
				}
				cancel()
				check(step, "Acquire")
			case op < 8:
				if held > 0 {
					a.Release()
					held--
				}
				check(step, "Release")
			default:
				clock.Advance(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			}
		}
		for ; held > 0; held-- {
			a.Release()
		}
		check(-1, "drained")
		func() {
			defer func() {
				if r := recover(); r != errReleaseWithoutAcquire {
					t.Fatalf("seed %d: Release without Acquire: recovered %v", seed, r)
				}
			}()
			a.Release()
		}()
		check(-1, "after a bad Release")
		l := a.Limit()
		for i := range l {
			if !a.TryAcquire() {
				t.Fatalf("seed %d: permit %d of %d refused after draining", seed, i+1, l)
			}
		}
	}
}

// Many goroutines acquire, wait, hold and release under -race: never more
// than Max in flight at once, nothing held at the end.
func TestAdaptiveConcurrent(t *testing.T) {
	clock := NewManualClock(time.Unix(1_000_000, 0))
	a, err := NewAdaptiveBulkhead(AdaptiveParams{Min: 2, Max: 8, Window: 3, ProbeEvery: 4}, WithBulkheadClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				ok := false
				if (g+i)%2 == 0 {
					ok = a.TryAcquire()
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					ok = a.Acquire(ctx) == nil
					cancel()
				}
				if !ok {
					continue
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				clock.Advance(time.Duration(1+(g*i)%7) * time.Millisecond)
				inFlight.Add(-1)
				a.Release()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 8 {
		t.Errorf("peak of %d in flight, max 8", p)
	}
	if a.InFlight() != 0 || a.Waiting() != 0 {
		t.Errorf("%d in flight, %d waiting at the end", a.InFlight(), a.Waiting())
	}
	if l := a.Limit(); l < 2 || l > 8 {
		t.Errorf("limit %d outside [2, 8]", l)
	}
}

// The cost of a TryAcquire and Release pair, against a plain Bulkhead's:
// the adaptive one takes a mutex and reads the clock twice.
func BenchmarkAdaptiveBulkhead(b *testing.B) {
	b.Run("impl=bulkhead", func(b *testing.B) {
		bh, _ := NewBulkhead(1 << 20)
		b.ReportAllocs()
		for b.Loop() {
			bh.TryAcquire()
			bh.Release()
		}
	})
	b.Run("impl=adaptive", func(b *testing.B) {
		a, _ := NewAdaptiveBulkhead(AdaptiveParams{Max: 1 << 20, Initial: 1 << 20})
		b.ReportAllocs()
		for b.Loop() {
			a.TryAcquire()
			a.Release()
		}
	})
}

// FuzzNextLimit: whatever a window measured, one step of the algorithm
// keeps the limit within [Min, Max], moves it by at most one step's
// bound, and the queue estimate never exceeds the limit.
func FuzzNextLimit(f *testing.F) {
	f.Add(10, 20, int64(200), int64(10), 10, int64(10), 1, 100, 3, 6)
	f.Add(1<<31-1, 1, int64(1<<63-1), int64(0), 1<<31-1, int64(1), 1, 1<<31-1, 0, 1)
	f.Add(5, 3, int64(-7), int64(-1), -2, int64(-5), 5, 5, 3, 6)
	f.Fuzz(func(t *testing.T, limit, n int, sum, wmin int64, flight int, noload int64, lo, hi, alpha, beta int) {
		p, err := AdaptiveParams{Min: lo, Max: hi, Initial: lo, Alpha: alpha, Beta: beta}.withDefaults()
		if err != nil || n < 1 || sum < 0 || limit < p.Min || limit > p.Max {
			return // states the bulkhead never reaches
		}
		if q := queueEstimate(limit, sum/int64(n), noload); q < 0 || q > int64(limit) {
			t.Fatalf("queueEstimate(%d, %d, %d) = %d, outside [0, limit]", limit, sum/int64(n), noload, q)
		}
		got := nextLimit(limit, window{n: n, sum: sum, min: wmin, maxFlight: flight}, noload, p)
		if got < p.Min || got > p.Max {
			t.Fatalf("nextLimit(%d) = %d, outside [%d, %d]", limit, got, p.Min, p.Max)
		}
		if got > limit+1+limit/32 {
			t.Fatalf("nextLimit(%d) = %d: grew by more than a step", limit, got)
		}
	})
}
