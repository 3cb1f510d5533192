package charge

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// BenchmarkTakeObserved: a request of cost 1 under two observed rules
// (a per-key bucket and a global one), through Take (the cost path) and,
// as its peer, through ratelimit.AllowAll (the path without a cost).
func BenchmarkTakeObserved(b *testing.B) {
	c := &ratelimit.Counter{}
	mk := func(name string) *ratelimit.TokenBucket {
		tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1<<30, ratelimit.WithName(name), ratelimit.WithObserver(c))
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	ip, global := mk("ip"), mk("global")
	ctx := context.Background()
	b.Run("Take", func(b *testing.B) {
		limits := []Limit{{Taker: ip, Key: "k"}, {Taker: global}}
		ds := make([]ratelimit.Decision, 2)
		res := make([]*ratelimit.Reservation, 2)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Take(ctx, 1, limits, ds, res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AllowAll", func(b *testing.B) {
		pairs := []ratelimit.LimiterKey{{Limiter: ip, Key: "k"}, {Limiter: global}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ratelimit.AllowAll(ctx, 1, pairs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
