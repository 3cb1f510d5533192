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
// 10,000 active tenants. Both read a manual clock that does not move: at
// the last instant of a window whose guarantees (what each tenant asked in
// the window before) cover every call the loop makes, so every call is
// allowed on the guaranteed path. The rate is never the limit here.
func BenchmarkFair(b *testing.B) {
	const rate = 1 << 40 // per second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tenants := range []int{1, 100, 10_000} {
		names := make([]string, tenants)
		for i := range names {
			names[i] = "tenant-" + strconv.Itoa(i)
		}
		b.Run("tenants="+strconv.Itoa(tenants), func(b *testing.B) {
			b.Run("impl=shared-tokenbucket", func(b *testing.B) {
				tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), rate, ratelimit.WithClock(ratelimit.NewManualClock(start)))
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
				clk := ratelimit.NewManualClock(start)
				tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), rate, ratelimit.WithClock(clk))
				if err != nil {
					b.Fatal(err)
				}
				f, err := ratelimit.NewFair(tb, ratelimit.PerSecond(rate), ratelimit.WithFairClock(clk))
				if err != nil {
					b.Fatal(err)
				}
				// Each tenant asks, in the window before, more than the
				// loop will ask of it: its guarantee in the next window.
				per := rate / tenants / 2
				for _, n := range names {
					if d, err := f.AllowN(context.Background(), n, per); err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
				}
				// The next window's last instant: the guarantees are paced
				// over the window, and this clock does not move.
				clk.Set(start.Add(2*time.Second - 1))
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
		})
	}
}
