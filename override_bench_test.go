package ratelimit

import (
	"strconv"
	"testing"
)

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
