package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkFairAllow compares Fair's Allow for known tenants, all within
// their shares, with a plain Allow of the same shared token bucket on its
// one key (the peer it wraps). Both read a manual clock, set once: the
// tenants are counted from the window after the one they first asked in.
func BenchmarkFairAllow(b *testing.B) {
	const rate = 1 << 40 // per second: never the limit here
	for _, tenants := range []int{1, 100, 10_000} {
		names := make([]string, tenants)
		for i := range names {
			names[i] = "tenant-" + strconv.Itoa(i)
		}
		b.Run("plain/tenants="+strconv.Itoa(tenants), func(b *testing.B) {
			tb, err := NewTokenBucket(PerSecond(rate), rate, WithClock(NewManualClock(fairT0)))
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				if !tb.Allow("") {
					b.Fatal("refused")
				}
				i++
			}
		})
		b.Run("fair/tenants="+strconv.Itoa(tenants), func(b *testing.B) {
			clk := NewManualClock(fairT0)
			tb, err := NewTokenBucket(PerSecond(rate), rate, WithClock(clk))
			if err != nil {
				b.Fatal(err)
			}
			f, err := NewFair(tb, PerSecond(rate), WithFairClock(clk))
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range names { // known, and counted from the next window
				f.Allow(n)
			}
			clk.Set(fairT0.Add(time.Second))
			i := 0
			for b.Loop() {
				if !f.Allow(names[i%tenants]) {
					b.Fatal("refused")
				}
				i++
			}
		})
	}
}
