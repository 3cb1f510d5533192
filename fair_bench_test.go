package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkFairAllow compares Fair's Allow for known tenants, all within
// their shares, with a plain Allow of the same shared token bucket on its
// one key (the peer it wraps). Both read a manual clock, set once: the
// tenants are guaranteed in a window what they asked in the one before.
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
			// Known, and guaranteed in the next window what they ask in
			// this one: more than the loop will ask of each.
			per := rate / tenants / 2
			for _, n := range names {
				if d, err := f.AllowN(context.Background(), n, per); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
			// The window's last instant: the guarantees are paced over
			// the window, and this clock does not move.
			clk.Set(fairT0.Add(2*time.Second - 1))
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

// BenchmarkFairBorrow is Fair's Allow for a tenant past its guarantee,
// borrowing the headroom (a peek and a take of the shared limiter), with
// the plain Allow of the same token bucket as its peer.
func BenchmarkFairBorrow(b *testing.B) {
	const rate = 1 << 40
	b.Run("plain", func(b *testing.B) {
		tb, err := NewTokenBucket(PerSecond(rate), rate, WithClock(NewManualClock(fairT0)))
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tb.Allow("")
		}
	})
	b.Run("fair", func(b *testing.B) {
		clk := NewManualClock(fairT0)
		tb, err := NewTokenBucket(PerSecond(rate), rate, WithClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		f, err := NewFair(tb, PerSecond(rate), WithFairClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		f.Allow("a") // guaranteed 1 in the next window
		clk.Set(fairT0.Add(time.Second))
		for b.Loop() {
			if !f.Allow("a") {
				b.Fatal("refused")
			}
		}
	})
}
