package ratelimit

import (
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
