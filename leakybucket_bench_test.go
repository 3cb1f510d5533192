package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
