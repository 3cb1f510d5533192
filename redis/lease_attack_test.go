package redis

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestLeaseFromFullBucketAdmits: a token bucket whose lease cap is one
// unit (capacity 1 here) takes every lease from a full bucket, where the
// unit's instant passes within the round trip; such a lease must not lapse
// whole and refuse the event, or the key would admit nothing at all. A twin
// limiter without leases gets the same calls on its own prefix.
func TestLeaseFromFullBucketAdmits(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	build := func(opts ...Option) *TokenBucket {
		common := []Option{WithClock(mc), WithPrefix(testPrefix(t) + ":" + time.Now().Format("150405.000000000") + ":"),
			withClockTime(60_000), WithTimeout(5 * time.Second)}
		l, err := NewTokenBucket(client, ratelimit.PerSecond(10), 1, append(slices.Clone(common), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	leased, plain := build(WithLease(1)), build()
	s := leaserOf(t, leased)
	s.inline = true
	nl, np := 0, 0
	for i := 0; i < 20; i++ {
		if leased.Allow("k") {
			nl++
		}
		if plain.Allow("k") {
			np++
		}
		mc.Advance(100 * time.Millisecond)
		s.sweep(s.now())
	}
	if np != 20 {
		t.Fatalf("the limiter without leases admitted %d of 20 events a refill apart", np)
	}
	if nl != np {
		t.Errorf("with leases %d of 20 events a refill apart admitted, without %d", nl, np)
	}
	if n := s.keys.Load(); n != 0 {
		t.Errorf("%d keys hold lease state with no lease held", n)
	}
}
