package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// This file pins SetRate on Redis beyond the random traces of
// conformance_test.go (the same decisions as in memory, through raises,
// lowerings, several changes while idle, Resets and Cancels): invalid
// changes, the round trips a change costs, several instances sharing keys
// under different parameters, the failure policy, and changes racing
// callers.

// TestSetRateInvalid: a change the constructor would refuse is refused
// with the constructor's error, and leaves the limiter as it was.
func TestSetRateInvalid(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	bad := []params{
		{ratelimit.Per(0, time.Second), 4},
		{ratelimit.Per(4, 0), 4},
		{ratelimit.Per(4, time.Second), 0},     // the buckets' capacity
		{ratelimit.Per(1, 36*24*time.Hour), 1}, // past the backend's span
		{ratelimit.Per(1<<41, time.Second), 1}, // past the windows' count
		{ratelimit.Per(1<<21, time.Second), 1}, // a sliding log of 2^21
		{ratelimit.Per(1, time.Hour), 1000},    // a bucket spanning 41 days
	}
	for _, a := range testAlgorithms {
		p0 := a.conformance[0]
		c := a.conformanceCase(p0)
		for _, p := range bad {
			mc := ratelimit.NewManualClock(start)
			_, rds := pairFor(t, c, mc, client)
			if d, err := rds.AllowN(bg, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", c.name, d, err)
			}
			before, _ := rds.AllowN(bg, "k", 0)
			_, want := a.redis(client, p.rate, p.capacity)
			got := setRate(rds, a.bucket, p)
			if (want == nil) != (got == nil) || (want != nil && got.Error() != want.Error()) {
				t.Errorf("%s: SetRate(%v, %d) = %v, the constructor says %v", c.name, p.rate, p.capacity, got, want)
			}
			if want == nil {
				continue // valid for this algorithm (a window ignores the capacity)
			}
			if !errors.Is(got, ratelimit.ErrInvalidRate) && !errors.Is(got, ratelimit.ErrInvalidCapacity) {
				t.Errorf("%s: SetRate(%v, %d) = %v, matching neither ErrInvalidRate nor ErrInvalidCapacity", c.name, p.rate, p.capacity, got)
			}
			if after, err := rds.AllowN(bg, "k", 0); err != nil || after != before || limitOf(rds) != c.limit {
				t.Fatalf("%s: a refused SetRate(%v, %d) changed the limiter: %+v, then %+v %v", c.name, p.rate, p.capacity, before, after, err)
			}
		}
	}
}

// TestSetRateCancelAcrossChange: for every algorithm, a booking made
// before a change (even to the same parameters) is not given back by its
// Cancel; one made after it is; in memory and on Redis alike.
func TestSetRateCancelAcrossChange(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		if c.limit < 3 {
			continue
		}
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		same := func(what string, n int) ratelimit.Decision {
			t.Helper()
			dc, errc := core.AllowN(bg, "k", n)
			dr, errr := rds.AllowN(bg, "k", n)
			if errc != nil || errr != nil || dc != dr {
				t.Fatalf("%s: %s: AllowN(%d): core %+v %v, redis %+v %v", c.name, what, n, dc, errc, dr, errr)
			}
			return dc
		}
		reserve := func() (rc, rr *ratelimit.Reservation) {
			t.Helper()
			rc, errc := core.Reserve(bg, "k", 1)
			rr, errr := rds.Reserve(bg, "k", 1)
			if errc != nil || errr != nil || !rc.OK() || !rr.OK() || rc.Decision() != rr.Decision() {
				t.Fatalf("%s: Reserve: core %+v %v, redis %+v %v", c.name, rc, errc, rr, errr)
			}
			return rc, rr
		}
		// Room for two more: the leaky bucket's queue may lose a fraction
		// of a place at the change (its end is rounded up).
		same("take", c.limit-3)
		rc, rr := reserve()
		for _, l := range []ratelimit.Limiter{core, rds} {
			if err := setRate(l, c.bucket, c.params); err != nil {
				t.Fatal(err)
			}
		}
		before := same("after the change", 0)
		rc.Cancel()
		rr.Cancel()
		if after := same("after a Cancel of a booking made before the change", 0); after != before {
			t.Fatalf("%s: the Cancel gave back: %+v, then %+v", c.name, before, after)
		}
		rc, rr = reserve()
		rc.Cancel()
		rr.Cancel()
		if after := same("after a Cancel of a booking made after the change", 0); after != before {
			t.Fatalf("%s: the latest booking's Cancel left %+v, want %+v", c.name, after, before)
		}
	}
}

// TestSetRateRoundTrips: a decision on a state written under the current
// parameters is one call to Redis, before and after a change; the first
// decision on a key written under this limiter's earlier token-bucket
// parameters takes two (the state, then the decision on it re-expressed),
// and the next one again one. The leaky bucket and the windows never need
// a second.
func TestSetRateRoundTrips(t *testing.T) {
	srv := ownServer(t)
	client := newClient(t, srv.addr, true)
	for _, a := range testAlgorithms {
		p := a.conformance[0]
		c := a.conformanceCase(p)
		mc := ratelimit.NewManualClock(start)
		_, rds := pairFor(t, c, mc, client)
		calls := func() int64 {
			m := commandCalls(t, client)
			return m["fcall"]
		}
		step := func(want int64) {
			t.Helper()
			before := calls()
			if _, err := rds.AllowN(bg, "k", 1); err != nil {
				t.Fatal(err)
			}
			if got := calls() - before; got != want {
				t.Errorf("%s: a decision took %d calls, want %d", c.name, got, want)
			}
		}
		if _, err := rds.AllowN(bg, "k", 1); err != nil { // loads the library
			t.Fatal(err)
		}
		step(1)
		q := p
		q.rate.N *= 2
		q.capacity *= 2
		if err := setRate(rds, a.bucket, q); err != nil {
			t.Fatal(err)
		}
		if a.name == "TokenBucket" || a.name == "LeakyMeter" { // the same GCRA
			step(2)
		} else {
			step(1)
		}
		step(1)
	}
}

// TestSetRateTwoInstances: instances sharing keys decide each under its
// own parameters. One with the same parameters reads another's state as
// its own (a restarted instance's, a new nonce); one with other parameters
// reads it as empty until its TAT (full if that has passed): never more
// tokens than its own capacity, no event before a booking the state
// holds.
func TestSetRateTwoInstances(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	prefix := testPrefix(t)
	build := func(rate ratelimit.Rate, capacity int) *TokenBucket {
		t.Helper()
		tb, err := NewTokenBucket(client, rate, capacity, WithClock(mc), WithPrefix(prefix), withClockTime(60_000),
			WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	a := build(ratelimit.PerSecond(1), 4)
	b := build(ratelimit.PerSecond(1), 4)
	peek := func(l *TokenBucket, key string) ratelimit.Decision {
		t.Helper()
		d, err := l.AllowN(bg, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The same parameters: one bucket.
	if d, _ := a.AllowN(bg, "k", 3); !d.Allowed {
		t.Fatalf("a: %+v", d)
	}
	if d := peek(b, "k"); d.Remaining != 1 {
		t.Fatalf("b, same parameters, sees %+v, want a's 1 token", d)
	}
	// a raises its rate and capacity: b does not know a's parameters and
	// reads a's state as empty until its TAT; a reads b's the same way.
	must(t, a.SetRate(ratelimit.PerSecond(10), 40))
	if d, _ := a.AllowN(bg, "k", 1); !d.Allowed || d.Remaining != 0 { // a re-expresses its own: 1 token, capped at 40
		t.Fatalf("a after the raise: %+v", d)
	}
	// a's TAT is at +4s (1 token re-expressed as 3.9s, one more taken).
	if d := peek(b, "k"); d.Remaining != 0 || d.ResetAfter != 4*time.Second+4*time.Second {
		t.Fatalf("b reading a's state: %+v, want empty until a's TAT, then 4s to refill at b's rate", d)
	}
	// Before a's TAT, b waits for it and one of its own intervals; at
	// it, the key is at rest under a's parameters, and full for b.
	mc.Advance(4*time.Second - 1)
	if d, _ := b.AllowN(bg, "k", 1); d.Allowed || d.RetryAfter != time.Second+1 {
		t.Fatalf("b 1ns before a's TAT: %+v, want a wait of 1s+1ns", d)
	}
	mc.Advance(1)
	if d, _ := b.AllowN(bg, "k", 1); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("b at a's TAT: %+v, want full at b's capacity", d)
	}
	// A full bucket of a's (its TAT passed) is full for b, at b's
	// capacity, and b's is full for a at a's.
	mc.Advance(time.Hour)
	if d := peek(b, "k"); d.Remaining != 4 {
		t.Fatalf("b, key at rest: %+v", d)
	}
	if d, _ := a.AllowN(bg, "k", 40); !d.Allowed {
		t.Fatalf("a, key at rest, 40 at once: %+v", d)
	}
	if d := peek(b, "k"); d.Remaining != 0 || d.ResetAfter != 4*time.Second+4*time.Second {
		t.Fatalf("b after a drained it: %+v", d)
	}
	// A restarted instance with a's new parameters (a new nonce) reads
	// a's state as its own.
	c := build(ratelimit.PerSecond(10), 40)
	if d := peek(c, "k"); d.Remaining != 0 || d.ResetAfter != 4*time.Second {
		t.Fatalf("c, a's parameters: %+v, want a's state as it stands", d)
	}
}

// TestSetRateTwoInstancesBound: two instances on one key, changing their
// rates at random (a raise, a lowering, back), with Allow, Reserve and
// Cancel from either: the events that act never exceed the bound of the
// largest configuration either used, C + ⌊r·D⌋ for the token bucket, and
// the leaky bucket never lets out faster than the fastest rate.
func TestSetRateTwoInstancesBound(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	configs := []params{
		{ratelimit.PerSecond(3), 5},
		{ratelimit.PerSecond(6), 10},
		{ratelimit.Per(7, 2*time.Second), 3},
		{ratelimit.PerSecond(2), 8},
	}
	largest := params{ratelimit.PerSecond(6), 10}
	for _, a := range testAlgorithms {
		if !a.bucket {
			continue
		}
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, 77))
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			var inst [2]ratelimit.Limiter
			for i := range inst {
				l, err := a.redis(client, configs[0].rate, configs[0].capacity, WithClock(mc), WithPrefix(prefix), withClockTime(60_000),
					WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
				if err != nil {
					t.Fatal(err)
				}
				inst[i] = l
			}
			type pending struct {
				r *ratelimit.Reservation
				n int
			}
			var open []pending
			var acted []booked
			for range 300 {
				mc.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				now := mc.Now().UnixNano()
				l := inst[rng.IntN(2)]
				limit := limitOf(l)
				n := 1 + rng.IntN(limit)
				switch op := rng.IntN(12); {
				case op < 1:
					must(t, setRate(l, true, configs[rng.IntN(len(configs))]))
				case op < 6:
					d, err := l.AllowN(bg, "k", min(n, 2))
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						acted = append(acted, booked{now, min(n, 2)})
					}
				case op < 9:
					r, err := l.Reserve(bg, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if r.OK() {
						open = append(open, pending{r, n})
					}
				default:
					if len(open) == 0 {
						continue
					}
					j := rng.IntN(len(open))
					p := open[j]
					open = append(open[:j], open[j+1:]...)
					p.r.Cancel()
					if act := p.r.TimeToAct().UnixNano(); act < now {
						acted = append(acted, booked{act, p.n})
					}
				}
			}
			for _, p := range open {
				acted = append(acted, booked{p.r.TimeToAct().UnixNano(), p.n})
			}
			if len(acted) == 0 {
				t.Fatalf("%s seed %d: nothing acted", a.name, seed)
			}
			check := tokenBound(largest.rate, largest.capacity)
			if a.name == "LeakyBucket" {
				check = leakyBound(largest.rate)
			}
			if err := check(acted); err != nil {
				t.Errorf("%s seed %d: bound broken: %v", a.name, seed, err)
			}
		}
	}
}

// TestSetRateFailLocal: under FailLocal, SetRate changes the local
// limiter too, so that while Redis is down the new parameters hold.
func TestSetRateFailLocal(t *testing.T) {
	dead := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { dead.Close() })
	mc := ratelimit.NewManualClock(start)
	for _, a := range testAlgorithms {
		p := a.conformance[0]
		l, err := a.redis(dead, p.rate, p.capacity, WithClock(mc), WithPrefix(testPrefix(t)), WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		q := p
		q.rate.N *= 2
		q.capacity *= 2
		must(t, setRate(l, a.bucket, q))
		want := q.capacity
		if !a.bucket {
			want = int(q.rate.N)
		}
		d, err := l.AllowN(bg, "k", want)
		if err != nil || !d.Allowed || d.Limit != want {
			t.Errorf("%s: AllowN(%d) from the local limiter after SetRate: %+v %v", a.name, want, d, err)
		}
	}
}

// TestSetRateRacesCallers: SetRate, back and forth between two
// configurations, racing eight goroutines of Allow, Reserve and Cancel on
// one key, on the server's clock: no error, and (nothing refills in a
// rate of a few per hour) no more events act than the larger capacity.
func TestSetRateRacesCallers(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		if !a.bucket && a.name != "FixedWindow" && a.name != "SlidingLog" {
			continue // the counter's bound over a change is not its limit
		}
		small, large := params{ratelimit.PerHour(5), 5}, params{ratelimit.PerHour(12), 12}
		if !a.bucket {
			small.rate, large.rate = ratelimit.Per(5, 24*time.Hour), ratelimit.Per(12, 24*time.Hour)
		}
		var failed atomic.Int64
		l, err := a.redis(client, small.rate, small.capacity, WithPrefix(testPrefix(t)), WithTimeout(5*time.Second),
			WithOnError(func(key string, err error) {
				if failed.Add(1) == 1 {
					t.Logf("%s: %v", a.name, err)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		var acted atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					switch (g + i) % 3 {
					case 0:
						if l.Allow("k") {
							acted.Add(1)
						}
					case 1:
						// Only a booking due now acts for sure: one ahead
						// may never be reached in the run.
						r, err := l.Reserve(context.Background(), "k", 1)
						if err == nil && r.OK() && r.Delay() <= 0 {
							acted.Add(1)
						}
					default:
						// Cancelled at once: given back, or kept taken if
						// it was due already (then it acted).
						r, err := l.Reserve(context.Background(), "k", 1)
						if err == nil && r.OK() {
							if r.Delay() <= 0 {
								acted.Add(1)
							}
							r.Cancel()
						}
					}
				}
			}()
		}
		for i := range 40 {
			p := small
			if i%2 == 0 {
				p = large
			}
			must(t, setRate(l, a.bucket, p))
			time.Sleep(time.Millisecond) // real time on the server's clock: the callers run meanwhile
		}
		close(stop)
		wg.Wait()
		if failed.Load() != 0 {
			t.Errorf("%s: %d failed calls", a.name, failed.Load())
		}
		// At most what the larger configuration holds: nothing refills
		// within the run, and a window boundary (midnight UTC) is not
		// crossed unless the run straddles it.
		if n := acted.Load(); n > large.rate.N || n == 0 {
			t.Errorf("%s: %d events acted, bound %d", a.name, n, large.rate.N)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
