package ratelimit

// The root package's benchmarks: Allow on every algorithm and the store
// (keyed), the leaky bucket's shaper, overrides, and the bulkhead. The
// peers are measured side by side in the benchmarks module.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys returns n distinct keys of about 10 bytes, built once per
// process so that building keys is not measured.
var benchKeys = sync.OnceValue(func() []string {
	keys := make([]string, 1_000_000)
	for i := range keys {
		keys[i] = "10." + strconv.Itoa(i/65536) + "." + strconv.Itoa(i%65536/256) + "." + strconv.Itoa(i%256)
	}
	return keys
})

type allower interface{ Allow(string) bool }

// allowBench builds what the Allow benchmarks run on: a limiter that
// allows (almost) every call and one that denies every call after the
// first.
type allowBench struct {
	allow, deny func() (allower, error)
}

// allowCase is a limiter of the Allow benchmarks, by name.
type allowCase struct {
	name string
	allowBench
}

// allowAlgorithms lists what the Allow benchmarks run over: the registry's
// algorithms (algorithms_test.go) and, last, the naive baseline: a fixed
// window in a map behind one mutex, reading time.Now, as many hand-rolled
// limiters do.
func allowAlgorithms() []allowCase {
	var cs []allowCase
	for _, alg := range algorithms {
		cs = append(cs, allowCase{alg.name, alg.bench})
	}
	return append(cs, allowCase{"NaiveFixedWindow", allowBench{
		allow: func() (allower, error) { return newNaiveFixedWindow(1e9, time.Second), nil },
		deny:  func() (allower, error) { return newNaiveFixedWindow(1, 24*time.Hour), nil },
	}})
}

type naiveFixedWindow struct {
	mu     sync.Mutex
	limit  int64
	window time.Duration
	keys   map[string]*naiveWindow
}

type naiveWindow struct {
	start time.Time
	count int64
}

func newNaiveFixedWindow(limit int64, window time.Duration) *naiveFixedWindow {
	return &naiveFixedWindow{limit: limit, window: window, keys: map[string]*naiveWindow{}}
}

func (l *naiveFixedWindow) Allow(key string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		// A server's key is a new string per request: keeping it keeps a
		// copy, as the store's strings.Clone does.
		w = &naiveWindow{}
		l.keys[strings.Clone(key)] = w
	}
	if now.Sub(w.start) >= l.window {
		w.start, w.count = now.Truncate(l.window), 0
	}
	if w.count >= l.limit {
		return false
	}
	w.count++
	return true
}

// BenchmarkAllow measures Allow on existing keys: one key, 10,000 keys and
// 1,000,000 keys, serial and in parallel. It must report 0 allocs/op.
func BenchmarkAllow(b *testing.B) {
	for _, alg := range allowAlgorithms() {
		for _, tc := range []struct {
			name  string
			keys  int
			build func() (allower, error)
		}{
			{"1key/allow", 1, alg.allow},
			{"1key/deny", 1, alg.deny},
			{"10k", 10_000, alg.allow},
			{"1M", 1_000_000, alg.allow},
		} {
			keys := benchKeys()[:tc.keys]
			lim, err := tc.build()
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				lim.Allow(k)
			}
			b.Run(alg.name+"/"+tc.name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					lim.Allow(keys[i])
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
			b.Run(alg.name+"/"+tc.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var seed atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i := int(seed.Add(7919)) % len(keys)
					for pb.Next() {
						lim.Allow(keys[i])
						if i++; i == len(keys) {
							i = 0
						}
					}
				})
			})
		}
	}
}

// BenchmarkClockFloor is the reference: what a clock read alone costs.
func BenchmarkClockFloor(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("nanoClock", func(b *testing.B) {
		nc := newNanoClock(SystemClock())
		for b.Loop() {
			_ = nc.now()
		}
	})
}

// BenchmarkBytesPerKey measures the live heap each key costs: 10,000,
// 100,000 and 1,000,000 keys of about 10 bytes, each allowed once by a new
// limiter, reported as B/key (table slots at their load, key bytes and,
// for the sliding log, its ring of L instants). ns/op is meaningless here:
// run it with -benchtime 1x.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		keys := benchKeys()[:n]
		for _, alg := range allowAlgorithms() {
			b.Run("keys="+strconv.Itoa(n)+"/"+alg.name, func(b *testing.B) {
				var perKey float64
				for b.Loop() {
					base := liveHeap()
					lim, err := alg.allow()
					if err != nil {
						b.Fatal(err)
					}
					for _, k := range keys {
						lim.Allow(k)
					}
					perKey = float64(liveHeap()-base) / float64(len(keys))
					if st, ok := lim.(interface{ Stats() Stats }); ok && st.Stats().Keys != len(keys) {
						b.Fatalf("%d keys held, want %d", st.Stats().Keys, len(keys))
					}
					runtime.KeepAlive(lim)
				}
				b.ReportMetric(perKey, "B/key")
			})
		}
	}
}

// naiveLeaky is the baseline for LeakyBucket: the same shaper decision for
// Allow (the queue must be empty) written the obvious way, a map of keys to
// the end of their queue behind one mutex, reading time.Now.
type naiveLeaky struct {
	mu       sync.Mutex
	interval int64
	end      map[string]int64
}

func (l *naiveLeaky) Allow(key string) bool {
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end[key] > now {
		return false
	}
	l.end[key] = now + l.interval
	return true
}

// BenchmarkLeakyBucket measures Allow on existing keys with the system
// clock, next to the TokenBucket and a naive map+mutex baseline in the same
// run. "allow": a rate so fast that every call is allowed (the write path);
// "deny": so slow that all but the first are refused.
func BenchmarkLeakyBucket(b *testing.B) {
	type allower interface{ Allow(string) bool }
	impls := []struct {
		name string
		new  func(rate Rate, capacity int) allower
	}{
		{"LeakyBucket", func(rate Rate, capacity int) allower {
			lb, err := NewLeakyBucket(rate, capacity)
			if err != nil {
				b.Fatal(err)
			}
			return lb
		}},
		{"TokenBucket", func(rate Rate, capacity int) allower {
			tb, err := NewTokenBucket(rate, capacity)
			if err != nil {
				b.Fatal(err)
			}
			return tb
		}},
		{"naive", func(rate Rate, capacity int) allower {
			return &naiveLeaky{interval: int64(rate.Period) / rate.N, end: map[string]int64{}}
		}},
	}
	cases := []struct {
		name string
		rate Rate
	}{
		{"allow", Per(1, time.Nanosecond)},
		{"deny", PerHour(1)},
	}
	keys := benchKeys()[:10_000]
	for _, c := range cases {
		for _, impl := range impls {
			b.Run(c.name+"/1key/serial/"+impl.name, func(b *testing.B) {
				lim := impl.new(c.rate, 1)
				lim.Allow("10.0.0.1")
				b.ReportAllocs()
				for b.Loop() {
					lim.Allow("10.0.0.1")
				}
			})
			b.Run(c.name+"/1key/parallel/"+impl.name, func(b *testing.B) {
				lim := impl.new(c.rate, 1)
				lim.Allow("10.0.0.1")
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						lim.Allow("10.0.0.1")
					}
				})
			})
			if c.name == "allow" {
				// An allowed key is at rest (its queue is empty) at every
				// call, so inserts elsewhere drop keys among many: only the
				// single key measures the write path on an existing key.
				continue
			}
			b.Run(c.name+"/10kkeys/parallel/"+impl.name, func(b *testing.B) {
				lim := impl.new(c.rate, 1)
				for _, k := range keys {
					lim.Allow(k)
				}
				var next atomic.Uint32
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919)) // each goroutine starts elsewhere
					for pb.Next() {
						lim.Allow(keys[i%len(keys)])
						i++
					}
				})
			})
		}
	}
}

// TestLeakyBucketAllowAllocs: Allow on an existing key allocates nothing.
func TestLeakyBucketAllowAllocs(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(1000), 1)
	lb.Allow("k")
	allocs := testing.AllocsPerRun(1000, func() {
		clk.Advance(time.Millisecond)
		lb.Allow("k")
	})
	if allocs != 0 {
		t.Errorf("Allow on an existing key: %v allocations per call", allocs)
	}
}

// BenchmarkAllowOverride measures Allow on a key with an override and on
// one without, on a limiter holding 1,000 overrides: what a flagged key
// pays for its lookup, and that the others pay nothing.
func BenchmarkAllowOverride(b *testing.B) {
	for _, alg := range algorithms {
		lim, err := alg.bench.allow()
		if err != nil {
			b.Fatal(err)
		}
		l := lim.(testLimiter)
		rate, capacity := allowRate(alg)
		for i := range 1000 {
			if err := alg.setOverride(l, "paid-"+strconv.Itoa(i), rate, capacity); err != nil {
				b.Fatal(err)
			}
		}
		for _, key := range []string{"paid-500", "free"} {
			l.Allow(key)
			b.Run(alg.name+"/"+key[:4], func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					l.Allow(key)
				}
			})
		}
	}
}

// allowRate is the rate and capacity of alg's allowing benchmark limiter,
// for an override that allows as much.
func allowRate(alg algorithm) (Rate, int) {
	switch alg.name {
	case "LeakyBucket":
		return Every(1), 1
	case "SlidingLog":
		return Per(8, 250), 8
	}
	return PerSecond(1e9), 1e9
}

// BenchmarkSetOverride measures SetOverride on a table of n overrides: one
// call, the key absent from the store.
func BenchmarkSetOverride(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			tb, err := NewTokenBucket(PerSecond(10), 10)
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				must2(b, tb.SetOverride("k"+strconv.Itoa(i), PerSecond(100), 100))
			}
			i := 0
			for b.Loop() {
				must2(b, tb.SetOverride("k"+strconv.Itoa(i%n), PerSecond(int64(100+i%2)), 100))
				i++
			}
		})
	}
}

// BenchmarkLoadOverrides measures loading 100,000 overrides one by one
// into a new limiter: ns/op is the whole load.
func BenchmarkLoadOverrides(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
	}
	for b.Loop() {
		tb, err := NewTokenBucket(PerSecond(10), 10)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			must2(b, tb.SetOverride(k, PerSecond(100), 100))
		}
	}
}

func must2(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// Benchmarks of Bulkhead next to two naive semaphores with the same
// TryAcquire/Release contract: a buffered channel, and a mutex guarding the
// count (what Bulkhead's fast path would be without its atomic word). The
// comparison with golang.org/x/sync/semaphore and other peers lives in the
// nested benchmarks module, to keep them out of the core's go.mod.

// bhSemaphore is the contract the benchmarks drive.
type bhSemaphore interface {
	TryAcquire() bool
	Release()
}

// bhChanSem is the classic buffered-channel semaphore: a send takes a
// permit, a receive gives it back.
type bhChanSem chan struct{}

func (s bhChanSem) TryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s bhChanSem) Release() { <-s }

// bhMutexSem is Bulkhead's fast path written with a mutex instead of an
// atomic word: refuse while anyone waits, else take a permit if one is
// free.
type bhMutexSem struct {
	mu       sync.Mutex
	inFlight int
	limit    int
	waiting  int
}

func (s *bhMutexSem) TryAcquire() bool {
	s.mu.Lock()
	ok := s.waiting == 0 && s.inFlight < s.limit
	if ok {
		s.inFlight++
	}
	s.mu.Unlock()
	return ok
}

func (s *bhMutexSem) Release() {
	s.mu.Lock()
	if s.inFlight == 0 {
		s.mu.Unlock()
		panic(errReleaseWithoutAcquire)
	}
	s.inFlight--
	s.mu.Unlock()
}

// bhSemaphores returns the implementations under comparison, each with
// limit permits.
func bhSemaphores(b *testing.B, limit int) []struct {
	name string
	sem  bhSemaphore
} {
	bh, err := NewBulkhead(limit)
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		sem  bhSemaphore
	}{
		{"impl=Bulkhead", bh},
		{"impl=mutex", &bhMutexSem{limit: limit}},
		{"impl=chan", make(bhChanSem, limit)},
	}
}

// BenchmarkBulkheadTryAcquireRelease is the uncontended hot path: one
// goroutine takes and gives back a permit.
func BenchmarkBulkheadTryAcquireRelease(b *testing.B) {
	for _, s := range bhSemaphores(b, 10) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !s.sem.TryAcquire() {
					b.Fatal("refused")
				}
				s.sem.Release()
			}
		})
	}
}

// BenchmarkBulkheadTryAcquireReleaseParallel is the same pair on every
// core at once, on one shared semaphore with a limit that is never
// reached: the cost of the contended cache line.
func BenchmarkBulkheadTryAcquireReleaseParallel(b *testing.B) {
	for _, s := range bhSemaphores(b, 1<<16) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !s.sem.TryAcquire() {
						panic("refused")
					}
					s.sem.Release()
				}
			})
		})
	}
}

// BenchmarkBulkheadAcquireRelease is Acquire with a free permit, the path
// of Do when the bulkhead is not full.
func BenchmarkBulkheadAcquireRelease(b *testing.B) {
	bh, err := NewBulkhead(10)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bh.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		bh.Release()
	}
}

// BenchmarkBulkheadDo wraps a trivial function.
func BenchmarkBulkheadDo(b *testing.B) {
	bh, err := NewBulkhead(10)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := bh.Do(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBulkheadContended has more goroutines than permits, so that
// most Acquire calls queue and are woken by a handover: the slow path,
// which allocates a waiter.
func BenchmarkBulkheadContended(b *testing.B) {
	bh, err := NewBulkhead(2)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bh.Acquire(ctx); err != nil {
				panic(err)
			}
			bh.Release()
		}
	})
}

// BenchmarkKeyedBulkhead measures TryAcquire+Release per key: on an idle
// key (added and dropped each time), on a key with a call in flight
// (kept), and in parallel on distinct keys.
func BenchmarkKeyedBulkhead(b *testing.B) {
	newKB := func(b *testing.B) *KeyedBulkhead {
		kb, err := NewKeyedBulkhead(1 << 16)
		if err != nil {
			b.Fatal(err)
		}
		return kb
	}
	b.Run("key=idle", func(b *testing.B) {
		kb := newKB(b)
		b.ReportAllocs()
		for b.Loop() {
			if !kb.TryAcquire("user-42") {
				b.Fatal("refused")
			}
			kb.Release("user-42")
		}
	})
	b.Run("key=busy", func(b *testing.B) {
		kb := newKB(b)
		kb.TryAcquire("user-42")
		b.ReportAllocs()
		for b.Loop() {
			if !kb.TryAcquire("user-42") {
				b.Fatal("refused")
			}
			kb.Release("user-42")
		}
	})
	b.Run("keys=distinct/parallel", func(b *testing.B) {
		kb := newKB(b)
		var id atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("user-", id.Add(1))
			for pb.Next() {
				if !kb.TryAcquire(key) {
					panic("refused")
				}
				kb.Release(key)
			}
		})
	})
}
