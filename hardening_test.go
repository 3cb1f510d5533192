package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A wait storm: 10,000 goroutines arrive over 5 s (twice the rate) to wait
// on one key; some have deadlines too short for their place in the queue,
// some are cancelled while they wait. In a synctest bubble (fake time, the
// default clock) every goroutine returns exactly once, none is left behind,
// no two successes are closer than the rate allows, and the queue loses no
// more than what was cancelled: a cancelled booking's slot goes to a later
// arrival when nothing booked after it holds the next one, and otherwise
// stays empty, so the last success comes no earlier than an unbroken queue
// would end and no later than that plus one slot per cancelled wait.
func TestWaitStorm(t *testing.T) {
	const (
		waiters  = 10_000
		capacity = 10
		interval = time.Millisecond // 1000 per second
	)
	synctest.Test(t, func(t *testing.T) {
		tb, err := NewTokenBucket(Every(interval), capacity)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rng := rand.New(rand.NewPCG(11, 12))
		var mu sync.Mutex
		var okTimes []time.Duration
		returned := make([]int, waiters)
		var cancelled, refused int
		first := time.Hour // the first arrival: the bucket is full until then
		var wg sync.WaitGroup
		// Every cancellation and deadline falls before 4 s, while arrivals go
		// on until 5 s, so each booking given back has later arrivals to
		// take it.
		for i := 0; i < waiters; i++ {
			arrive := time.Duration(rng.Int64N(int64(5 * time.Second)))
			var ctx context.Context
			var cancel context.CancelFunc
			switch rng.IntN(10) {
			case 0: // a deadline, often too short for the queue
				arrive = time.Duration(rng.Int64N(int64(time.Second)))
				timeout := time.Duration(rng.Int64N(int64(3 * time.Second)))
				ctx, cancel = context.WithDeadline(context.Background(), start.Add(arrive+timeout))
			case 1: // cancelled while waiting
				ctx, cancel = context.WithCancel(context.Background())
				at := time.Duration(rng.Int64N(int64(4 * time.Second)))
				arrive = min(arrive, at)
				wg.Go(func() {
					time.Sleep(at)
					cancel()
				})
			default:
				ctx, cancel = context.WithCancel(context.Background())
			}
			first = min(first, arrive)
			wg.Go(func() {
				defer cancel()
				time.Sleep(arrive)
				err := tb.Wait(ctx, "hot")
				mu.Lock()
				defer mu.Unlock()
				returned[i]++
				switch {
				case err == nil:
					okTimes = append(okTimes, time.Since(start))
				case errors.Is(err, ErrLimited) && errors.Is(err, context.DeadlineExceeded):
					refused++
				case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
					cancelled++
				default:
					t.Errorf("waiter %d: unexpected error %v", i, err)
				}
			})
		}
		wg.Wait()
		for i, n := range returned {
			if n != 1 {
				t.Fatalf("waiter %d returned %d times", i, n)
			}
		}
		if len(okTimes)+cancelled+refused != waiters || cancelled == 0 || refused == 0 {
			t.Fatalf("ok %d + cancelled %d + refused %d != %d (or a kind never happened)", len(okTimes), cancelled, refused, waiters)
		}
		slices.Sort(okTimes)
		// The bucket's bound: at most capacity + elapsed/interval successes by
		// any instant.
		for i, at := range okTimes {
			if int64(i+1) > capacity+int64((at-first)/interval) {
				t.Fatalf("success %d at %v breaks the rate", i+1, at)
			}
		}
		// The queue is unbroken but for the slots of cancelled waits.
		unbroken := first + time.Duration(len(okTimes)-capacity)*interval
		if last := okTimes[len(okTimes)-1]; last < unbroken || last > unbroken+time.Duration(cancelled)*interval {
			t.Fatalf("last of %d successes at %v, want within [%v, %v]: more lost than the %d cancelled waits",
				len(okTimes), last, unbroken, unbroken+time.Duration(cancelled)*interval, cancelled)
		}
	})
}

// A flood of distinct keys against a capped store: the cap holds, the
// counters add up, live heap stays under the documented bound while it
// lasts, and after the keys come to rest a sweep gives the memory back.
// CI runs 300,000 keys; BenchmarkFlood runs 1,000,000.
func TestFlood(t *testing.T) {
	keys := 300_000
	if testing.Short() {
		keys = 50_000
	}
	r := runFlood(t, keys, 20_000)
	t.Logf("flood of %d keys, cap %d: peak live heap +%d B (%.0f B/key held), after sweep +%d B",
		keys, 20_000, r.peak, r.perKey, r.after)
}

type floodResult struct {
	peak, after int64
	perKey      float64
}

// floodBytesPerKey bounds the store's memory per key held, documented in
// docs/security.md: a slot of the table (tag, key offset, a 16-byte state:
// 24 B) at the lowest load a table has after growing (0.55: 44 B), plus the key's
// bytes in the shard's arena (12 B for these keys), which at the cap holds
// up to as many dead bytes as live ones before it is rebuilt, with the
// slice's growth slack (up to 30 B). About 60 B measured.
const floodBytesPerKey = 80

func runFlood(t testing.TB, keys, maxKeys int) floodResult {
	clk := NewManualClock(epoch)
	tb, err := NewTokenBucket(PerMinute(60), 5, WithClock(clk), WithMaxKeys(maxKeys))
	if err != nil {
		t.Fatal(err)
	}
	base := liveHeap()
	var peak int64
	var buf [24]byte
	for i := 0; i < keys; i++ {
		key := fmt.Appendf(buf[:0], "ip-%08x", uint32(i)*2654435761)
		tb.Allow(string(key))
		if i%(keys/10) == keys/10-1 {
			clk.Advance(time.Millisecond)
			peak = max(peak, liveHeap()-base)
		}
	}
	s := tb.Stats()
	if s.Keys > maxKeys {
		t.Fatalf("%d keys held, cap %d", s.Keys, maxKeys)
	}
	if s.Inserts != uint64(keys) || s.Inserts-s.EvictedAtRest-s.EvictedLRU != uint64(s.Keys) {
		t.Fatalf("counters do not add up: %+v", s)
	}
	if bound := int64(maxKeys)*floodBytesPerKey + 64<<10; peak > bound {
		t.Fatalf("peak live heap +%d B over the bound %d B for %d keys", peak, bound, maxKeys)
	}
	clk.Advance(10 * time.Second) // every bucket refilled
	tb.Sweep()
	after := liveHeap() - base
	if s := tb.Stats(); s.Keys != 0 || after > 64<<10 {
		t.Fatalf("after the flood: %d keys, +%d B live", s.Keys, after)
	}
	runtime.KeepAlive(tb)
	return floodResult{peak: peak, after: after, perKey: float64(peak) / float64(maxKeys)}
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func BenchmarkFlood(b *testing.B) {
	for b.Loop() {
		r := runFlood(b, 1_000_000, 100_000)
		b.ReportMetric(float64(r.peak), "peak-B")
		b.ReportMetric(r.perKey, "B/key")
		b.ReportMetric(float64(r.after), "after-B")
	}
}

// A wait storm on a LeakyBucket: 10,000 goroutines arrive over 5 s (twice
// the rate) to wait on one key of a queue of 250 slots; some have
// deadlines, some are cancelled while they wait, soon (often while their
// booking is still the tail of the queue) or late. In a synctest bubble
// every goroutine returns, none is left behind, and each outcome is the one
// the leaky bucket's documented semantics give, replayed afterwards on
// lbOracle (the plain list of booked slots of leakybucket_test.go): a
// refusal at once when the queue is full or the slot would start after the
// deadline; a cancellation at the instant the context ends; otherwise a
// success at the exact start of the slot booked at arrival. A cancelled
// booking gives its slot back only while it is the tail of the queue (the
// next booking then takes it); otherwise its slot stays in the queue,
// empty. The successes, in order of arrival, are at least a slot apart.
//
// Arrivals are on even nanoseconds and slots 1 ms long, so every slot
// starts on an even nanosecond; cancellations and deadlines are on odd
// ones, so that no two events the outcome depends on share an instant.
func TestWaitStormLeakyBucket(t *testing.T) {
	const (
		waiters  = 10_000
		capacity = 250
		interval = time.Millisecond // 1000 per second
	)
	type waiter struct {
		arrive, deadline, cancel time.Duration // deadline and cancel: 0 if none
		returned                 bool
		at                       time.Duration // when Wait returned
		err                      error
	}
	rng := rand.New(rand.NewPCG(21, 22))
	ws := make([]waiter, waiters)
	taken := map[time.Duration]bool{}
	distinct := func(d time.Duration) time.Duration {
		for taken[d] {
			d += 2
		}
		taken[d] = true
		return d
	}
	odd := func(d int64) time.Duration { return time.Duration(rng.Int64N(d/2)*2 + 1) }
	for i := range ws {
		w := &ws[i]
		w.arrive = distinct(time.Duration(rng.Int64N(int64(5*time.Second))) &^ 1)
		switch rng.IntN(8) {
		case 0: // a deadline, often too short for the queue
			w.deadline = w.arrive + odd(int64(400*time.Millisecond))
		case 1: // cancelled soon: often still the tail of the queue
			w.cancel = distinct(w.arrive + odd(int64(2*time.Millisecond)))
		case 2: // cancelled later
			w.cancel = distinct(w.arrive + odd(int64(300*time.Millisecond)))
		}
	}
	synctest.Test(t, func(t *testing.T) {
		lb, err := NewLeakyBucket(Every(interval), capacity)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for i := range ws {
			w := &ws[i]
			ctx, cancel := context.WithCancel(context.Background())
			if w.deadline > 0 {
				ctx, cancel = context.WithDeadline(context.Background(), start.Add(w.deadline))
			}
			if w.cancel > 0 {
				wg.Go(func() {
					time.Sleep(w.cancel)
					cancel()
				})
			}
			wg.Go(func() {
				defer cancel()
				time.Sleep(w.arrive)
				w.err = lb.Wait(ctx, "hot")
				w.at, w.returned = time.Since(start), true
			})
		}
		wg.Wait()
	})

	// Replay the arrivals and cancellations, in time order, on the oracle.
	type event struct {
		at     time.Duration
		i      int
		cancel bool
	}
	var events []event
	for i, w := range ws {
		events = append(events, event{w.arrive, i, false})
		if w.cancel > 0 {
			events = append(events, event{w.cancel, i, true})
		}
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	o := &lbOracle{n: 1, period: int64(interval), capacity: capacity}
	booked := make([]bool, waiters)
	act := make([]int64, waiters)
	cancelled := make([]bool, waiters)
	givenBack := map[int64]bool{} // starts of slots given back
	var kept, back, reused int
	for _, e := range events {
		now, w := int64(e.at), ws[e.i]
		if e.cancel {
			if booked[e.i] && now < act[e.i] {
				cancelled[e.i] = true
				held := len(o.slots)
				o.cancel(e.i, 1, act[e.i], now)
				if len(o.slots) < held {
					back++
					givenBack[act[e.i]] = true
				} else {
					kept++
				}
			}
			continue
		}
		maxWait := int64(-1)
		if w.deadline > 0 {
			maxWait = int64(w.deadline - w.arrive)
		}
		if o.ok(now, 1, maxWait) {
			_, act[e.i], booked[e.i] = o.decide(now, 1, maxWait, e.i)
			if givenBack[act[e.i]] {
				reused++
			}
		}
	}
	var ok, full, late int
	var okArrivals []int
	for i, w := range ws {
		var want time.Duration
		switch {
		case !w.returned:
			t.Fatalf("waiter %d never returned", i)
		case !booked[i]:
			want = w.arrive
			if !errors.Is(w.err, ErrLimited) {
				t.Fatalf("waiter %d (arrived %v, deadline %v): %v; the oracle refuses it", i, w.arrive, w.deadline, w.err)
			}
			if w.deadline > 0 && errors.Is(w.err, context.DeadlineExceeded) {
				late++
			} else {
				full++
			}
		case cancelled[i]:
			want = w.cancel
			if !errors.Is(w.err, context.Canceled) {
				t.Fatalf("waiter %d (arrived %v, cancelled %v, slot %v): %v; want context.Canceled",
					i, w.arrive, w.cancel, time.Duration(act[i]), w.err)
			}
		default:
			want = time.Duration(act[i])
			if w.err != nil {
				t.Fatalf("waiter %d (arrived %v, deadline %v, cancel %v): %v; the oracle books it at %v",
					i, w.arrive, w.deadline, w.cancel, w.err, want)
			}
			ok++
			okArrivals = append(okArrivals, i)
		}
		if w.at != want {
			t.Fatalf("waiter %d returned at %v (%v), want %v", i, w.at, w.err, want)
		}
	}
	// FIFO, and the output never bursts.
	slices.SortFunc(okArrivals, func(a, b int) int { return int(ws[a].arrive - ws[b].arrive) })
	for k := 1; k < len(okArrivals); k++ {
		if prev, cur := ws[okArrivals[k-1]], ws[okArrivals[k]]; cur.at-prev.at < interval {
			t.Fatalf("successes arrived at %v and %v depart at %v and %v", prev.arrive, cur.arrive, prev.at, cur.at)
		}
	}
	t.Logf("%d succeeded, %d refused (queue full), %d refused (deadline), %d cancelled: %d given back (%d slots reused), %d kept",
		ok, full, late, back+kept, back, reused, kept)
	if ok == 0 || full == 0 || late == 0 || back == 0 || kept == 0 || reused == 0 {
		t.Fatal("a kind of outcome never happened: the storm is too tame")
	}
}

// A smaller wait storm on each window algorithm: 2,000 goroutines arrive
// over 2 s, ten times the rate of 10 per 100 ms, with deadlines and
// cancellations mixed. Every goroutine returns and none is left behind;
// successes never break the algorithm's bound: at most L per window
// (FixedWindow, and SlidingWindowCounter for its own window), at most L in
// any interval of length W (SlidingLog), at most 2L − ⌈2L/W⌉ in any such
// interval (SlidingWindowCounter); and the successes of FixedWindow and
// SlidingLog come in order of arrival. (SlidingWindowCounter's are not
// always in order: a Cancel of bookings in the window before the key's
// lowers that window's weight, and a new booking may then act before
// earlier ones; see the report of the hardening branch.)
func TestWaitStormWindows(t *testing.T) {
	const (
		waiters = 2000
		limit   = 10
		window  = 100 * time.Millisecond
	)
	rate := Per(limit, window)
	for _, alg := range windowAlgorithms() {
		storm := alg.window.storm
		slide := storm.slide(limit, int64(window))
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, uint64(len(alg.name))))
			type waiter struct {
				arrive   time.Duration
				returned bool
				at       time.Time
				err      error
			}
			ws := make([]waiter, waiters)
			synctest.Test(t, func(t *testing.T) {
				lim, err := alg.newWindow(rate)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for i := range ws {
					w := &ws[i]
					w.arrive = time.Duration(rng.Int64N(int64(2 * time.Second)))
					ctx, cancel := context.WithCancel(context.Background())
					switch rng.IntN(5) {
					case 0: // a deadline, often too short
						ctx, cancel = context.WithTimeout(context.Background(), w.arrive+time.Duration(rng.Int64N(int64(time.Second))))
					case 1: // cancelled, perhaps while waiting
						at := w.arrive + time.Duration(rng.Int64N(int64(2*time.Second)))
						wg.Go(func() {
							time.Sleep(at)
							cancel()
						})
					}
					wg.Go(func() {
						defer cancel()
						time.Sleep(w.arrive)
						w.err = lim.Wait(ctx, "hot")
						w.at, w.returned = time.Now(), true
					})
				}
				wg.Wait()
			})
			var ok, refused, cancelled int
			var events []winEvent
			var order []int
			for i, w := range ws {
				switch {
				case !w.returned:
					t.Fatalf("waiter %d never returned", i)
				case w.err == nil:
					ok++
					events = append(events, winEvent{t: w.at.UnixNano(), key: "hot", n: 1})
					order = append(order, i)
				case errors.Is(w.err, ErrLimited) && errors.Is(w.err, context.DeadlineExceeded):
					refused++
				case errors.Is(w.err, context.Canceled), errors.Is(w.err, context.DeadlineExceeded):
					cancelled++
				default:
					t.Fatalf("waiter %d: unexpected error %v", i, w.err)
				}
			}
			if ok == 0 || refused == 0 || cancelled == 0 {
				t.Fatalf("ok %d, refused %d, cancelled %d: a kind never happened", ok, refused, cancelled)
			}
			if most := winMaxInWindow(events, int64(window))["hot"]; most > slide {
				t.Fatalf("%d successes within %v, bound %d", most, window, slide)
			}
			if storm.fixed {
				per := map[int64]int{}
				for _, e := range events {
					if per[e.t/int64(window)]++; per[e.t/int64(window)] > limit {
						t.Fatalf("more than %d successes in the window of %v", limit, time.Unix(0, e.t))
					}
				}
			}
			slices.SortFunc(order, func(a, b int) int { return int(ws[a].arrive - ws[b].arrive) })
			for k := 1; k < len(order) && storm.fifo; k++ {
				if prev, cur := ws[order[k-1]], ws[order[k]]; cur.at.Before(prev.at) {
					t.Fatalf("arrived at %v and %v, served at %v and %v: out of order",
						prev.arrive, cur.arrive, prev.at.Sub(ws[0].at), cur.at.Sub(ws[0].at))
				}
			}
			t.Logf("%d succeeded, %d refused at once, %d cancelled or timed out while waiting", ok, refused, cancelled)
		})
	}
}
