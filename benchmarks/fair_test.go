package benchmarks

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// BenchmarkFair measures ratelimit.Fair's Allow for known tenants, each
// within its share, cycled through in order, against the plain Allow of
// the same token bucket on its one shared key (impl=shared-tokenbucket,
// the limiter Fair asks for every event it allows), with 1, 100 and
// 10,000 active tenants, on two clocks. clock=manual: a manual clock that
// does not move, at the last instant of a window whose guarantees (what
// each tenant asked in the window before) cover every call the loop makes.
// clock=system: the system clock, the loop started at the start of a
// second after the tenants' first asks, so that each is guaranteed what
// it asked in the second before. Either way every call is allowed on the
// guaranteed path; the rate is never the limit here.
func BenchmarkFair(b *testing.B) {
	for _, system := range []bool{false, true} {
		clock := "clock=manual/"
		if system {
			clock = "clock=system/"
		}
		for _, tenants := range []int{1, 100, 10_000} {
			b.Run(clock+"tenants="+strconv.Itoa(tenants), func(b *testing.B) { benchFair(b, tenants, system) })
		}
	}
}

// benchFair is one row pair of BenchmarkFair.
func benchFair(b *testing.B, tenants int, system bool) {
	const rate = 1 << 40 // per second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clockOf := func() (ratelimit.Clock, *ratelimit.ManualClock) {
		if system {
			return ratelimit.SystemClock(), nil
		}
		m := ratelimit.NewManualClock(start)
		return m, m
	}
	names := make([]string, tenants)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	b.Run("impl=shared-tokenbucket", func(b *testing.B) {
		clk, _ := clockOf()
		tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), rate, ratelimit.WithClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		tb.Allow("")
		b.ReportAllocs()
		for b.Loop() {
			if !tb.Allow("") {
				b.Fatal("refused")
			}
		}
	})
	b.Run("impl=ours-fair", func(b *testing.B) {
		clk, manual := clockOf()
		tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), rate, ratelimit.WithClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		f, err := ratelimit.NewFair(tb, ratelimit.PerSecond(rate), ratelimit.WithFairClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		// Each tenant asks, in the window before, more than the loop
		// will ask of it: its guarantee in the next window.
		per := rate / tenants / 2
		for _, n := range names {
			if d, err := f.AllowN(context.Background(), n, per); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
		// The next window: on the manual clock its last instant (the
		// guarantees are paced over the window, and this clock does not
		// move); on the system clock its start.
		if manual != nil {
			manual.Set(start.Add(2*time.Second - 1))
		} else {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if !f.Allow(names[i]) {
				b.Fatal("refused")
			}
			if i++; i == tenants {
				i = 0
			}
		}
	})
}
