package redis

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestLeaseDenialEndsWithRateChange: a denial Redis gave to a leased key is
// answered locally until its RetryAfter, but not past a SetRate or an
// override of the key: the limiter's own deny cache forgets it then, and a
// leased key must answer as the same limiter without leases does. A twin
// limiter without leases gets the same calls on its own prefix.
func TestLeaseDenialEndsWithRateChange(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	changes := []struct {
		name   string
		change func(*TokenBucket) error
	}{
		{"SetRate", func(l *TokenBucket) error { return l.SetRate(ratelimit.PerSecond(100), 100) }},
		{"SetOverride", func(l *TokenBucket) error { return l.SetOverride("k", ratelimit.PerSecond(100), 100) }},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			mc := ratelimit.NewManualClock(start)
			build := func(opts ...Option) *TokenBucket {
				common := []Option{WithClock(mc), WithPrefix(testPrefix(t) + ":" + time.Now().Format("150405.000000000") + ":"),
					withClockTime(60_000), WithTimeout(5 * time.Second)}
				l, err := NewTokenBucket(client, ratelimit.Per(1, time.Hour), 1, append(slices.Clone(common), opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			leased, plain := build(WithLease(1)), build()
			leaserOf(t, leased).inline = true
			for i, want := range []bool{true, false, false} {
				if got, p := leased.Allow("k"), plain.Allow("k"); got != want || p != want {
					t.Fatalf("event %d: leased %v, plain %v, want %v", i, got, p, want)
				}
			}
			if err := c.change(leased); err != nil {
				t.Fatal(err)
			}
			if err := c.change(plain); err != nil {
				t.Fatal(err)
			}
			mc.Advance(time.Second)
			p := plain.Allow("k")
			if !p {
				t.Fatal("plain limiter refused after the change: the test checks nothing")
			}
			if got := leased.Allow("k"); got != p {
				t.Errorf("after %s: leased limiter answered %v, the same limiter without leases %v (a denial cached from before the change)", c.name, got, p)
			}
		})
	}
}
