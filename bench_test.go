package ratelimit

import (
	"strconv"
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

// allowAlgorithms lists what the Allow benchmarks run over: each builds a
// limiter that allows (almost) every call and one that denies every call
// after the first.
var allowAlgorithms = []struct {
	name  string
	allow func() (interface{ Allow(string) bool }, error)
	deny  func() (interface{ Allow(string) bool }, error)
}{
	{"TokenBucket",
		func() (interface{ Allow(string) bool }, error) { return NewTokenBucket(PerSecond(1e9), 1e9) },
		func() (interface{ Allow(string) bool }, error) { return NewTokenBucket(PerDay(1), 1) }},
	{"LeakyBucket", // Allow needs an empty queue: slots of 1 ns empty between calls
		func() (interface{ Allow(string) bool }, error) { return NewLeakyBucket(Every(time.Nanosecond), 1) },
		func() (interface{ Allow(string) bool }, error) { return NewLeakyBucket(PerDay(1), 1) }},
}

// BenchmarkAllow measures Allow on existing keys: one key, 10,000 keys and
// 1,000,000 keys, serial and in parallel. It must report 0 allocs/op.
func BenchmarkAllow(b *testing.B) {
	for _, alg := range allowAlgorithms {
		for _, tc := range []struct {
			name  string
			keys  int
			build func() (interface{ Allow(string) bool }, error)
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
