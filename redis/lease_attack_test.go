package redis

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// leaseTwins returns two token buckets of 10 a second and the capacity
// given on the manual clock mc, each on a prefix of its own: the first with
// WithLease(share), the second without leases.
func leaseTwins(t *testing.T, mc *ratelimit.ManualClock, capacity int, share float64) (leased, plain *TokenBucket) {
	t.Helper()
	client := newClient(t, redisAddr(t), true)
	build := func(opts ...Option) *TokenBucket {
		common := []Option{WithClock(mc), WithPrefix(testPrefix(t) + ":" + time.Now().Format("150405.000000000") + ":"),
			withClockTime(60_000), WithTimeout(5 * time.Second)}
		l, err := NewTokenBucket(client, ratelimit.PerSecond(10), capacity, append(slices.Clone(common), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	return build(WithLease(share)), build()
}

// TestLeaseFromFullBucketAdmits: a token bucket whose lease cap is one
// unit (capacity 1 here) takes every lease from a full bucket, where the
// unit's instant passes within the round trip; such a lease must not lapse
// whole and refuse the event, or the key would admit nothing at all. A twin
// limiter without leases gets the same calls on its own prefix.
func TestLeaseFromFullBucketAdmits(t *testing.T) {
	mc := ratelimit.NewManualClock(start)
	leased, plain := leaseTwins(t, mc, 1, 1)
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

// TestLeaseGrowsPastFullBucket: a hot key's first lease, of one unit from
// a full bucket, would lapse whole within the round trip and is given
// back (Redis decides); the next asks for four times as many units, and
// so on, until a lease outlasts the round trip and the key is served from
// leases. (When a lease given back made the key forgotten, its size
// started again at one unit, and on a real round trip, longer than a few
// units' interval, every lease was given back: no key was ever served
// from leases.) Here the manual clock does not move during a call, so a
// lease of k units from full keeps k-1, and the test checks that the
// size grew; the cap is 25 units (capacity 100, share 0.5).
func TestLeaseGrowsPastFullBucket(t *testing.T) {
	mc := ratelimit.NewManualClock(start)
	leased, plain := leaseTwins(t, mc, 100, 0.5)
	s := leaserOf(t, leased)
	s.inline = true
	for i := range 3 {
		if !leased.Allow("k") || !plain.Allow("k") {
			t.Fatalf("call %d refused by a full bucket", i)
		}
	}
	gk := s.peek("k")
	if gk == nil {
		t.Fatal("the key holds no lease state after three calls")
	}
	gk.mu.Lock()
	g, size := gk.cur.Load(), gk.size
	gk.mu.Unlock()
	if g == nil {
		t.Fatalf("no lease held after three calls (next lease size %d)", size)
	}
	if g.k < 4 {
		t.Fatalf("the lease held has %d units, want the grown size (4 or more)", g.k)
	}
	// The lease's units spend locally, as the twin without leases admits.
	for i := range 2 {
		if got, want := leased.Allow("k"), plain.Allow("k"); got != want {
			t.Fatalf("call %d after the lease: %v with it, %v without", i, got, want)
		}
	}
}

// TestLeaseHotKeyRealClock: on the real clock, one key from 8 goroutines
// (a hot key, its bucket far from empty) is served from leases: the units
// leases took cover most of the events admitted, where Redis decided every
// event while each lease from the full bucket was given back and the key
// started again at one unit.
func TestLeaseHotKeyRealClock(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	tally := &leaseTally{}
	l, err := NewTokenBucket(client, ratelimit.PerSecond(1_000_000), 100_000,
		WithPrefix(testPrefix(t)+":"+time.Now().Format("150405.000000000")+":"), WithLease(0.1), WithLeaseObserver(tally))
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, calls = 8, 4000
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				if l.Allow("hot") {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	tally.mu.Lock()
	taken, leases := tally.taken, tally.leases_
	tally.mu.Unlock()
	if n := admitted.Load(); n < goroutines*calls*9/10 {
		t.Fatalf("%d of %d events admitted at a tenth of the rate", n, goroutines*calls)
	}
	if taken < goroutines*calls/2 {
		t.Fatalf("leases took %d units in %d leases for %d events: the key was not served from leases", taken, leases, goroutines*calls)
	}
}
