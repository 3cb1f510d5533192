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
// no two successes are closer than the rate allows, and every booking given
// back is reused by a later arrival: the successes form an unbroken queue,
// the last one exactly when its place in it says.
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
		// Every freed booking was reused: the successes form an unbroken
		// queue, the last one exactly when its place in it says.
		want := first + time.Duration(len(okTimes)-capacity)*interval
		if last := okTimes[len(okTimes)-1]; last != want {
			t.Fatalf("last of %d successes at %v, want %v: bookings given back were not reused", len(okTimes), last, want)
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
// the README: a slot of the table (tag, key offset, a 16-byte state: 24 B)
// at the lowest load a table has after growing (0.55: 44 B), plus the key's
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
