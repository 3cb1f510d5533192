package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// leaseCase is an algorithm that leases, with small parameters where
// bursts and lapses matter.
type leaseCase struct {
	name  string
	p     params
	build func(c Client, p params, opts ...Option) (ratelimit.Limiter, error)
	core  func(p params, clk ratelimit.Clock) (ratelimit.Limiter, error)
	bound func(p params) func([]booked) error
}

func leaseCases() []leaseCase {
	return []leaseCase{
		{
			name: "TokenBucket", p: params{ratelimit.PerSecond(50), 20},
			build: func(c Client, p params, o ...Option) (ratelimit.Limiter, error) {
				return NewTokenBucket(c, p.rate, p.capacity, o...)
			},
			core: func(p params, clk ratelimit.Clock) (ratelimit.Limiter, error) {
				return ratelimit.NewTokenBucket(p.rate, p.capacity, ratelimit.WithClock(clk))
			},
			bound: func(p params) func([]booked) error { return tokenBound(p.rate, p.capacity) },
		},
		{
			name: "TokenBucketSlowRefill", p: params{ratelimit.Per(7, 2*time.Second), 12},
			build: func(c Client, p params, o ...Option) (ratelimit.Limiter, error) {
				return NewTokenBucket(c, p.rate, p.capacity, o...)
			},
			core: func(p params, clk ratelimit.Clock) (ratelimit.Limiter, error) {
				return ratelimit.NewTokenBucket(p.rate, p.capacity, ratelimit.WithClock(clk))
			},
			bound: func(p params) func([]booked) error { return tokenBound(p.rate, p.capacity) },
		},
		{
			name: "FixedWindow", p: params{rate: ratelimit.Per(30, 300*time.Millisecond)},
			build: func(c Client, p params, o ...Option) (ratelimit.Limiter, error) {
				return NewFixedWindow(c, p.rate, o...)
			},
			core: func(p params, clk ratelimit.Clock) (ratelimit.Limiter, error) {
				return ratelimit.NewFixedWindow(p.rate, ratelimit.WithClock(clk))
			},
			bound: func(p params) func([]booked) error { return fixedWindowBound(p.rate) },
		},
		{
			name: "SlidingWindowCounter", p: params{rate: ratelimit.Per(30, 300*time.Millisecond)},
			build: func(c Client, p params, o ...Option) (ratelimit.Limiter, error) {
				return NewSlidingWindowCounter(c, p.rate, o...)
			},
			core: func(p params, clk ratelimit.Clock) (ratelimit.Limiter, error) {
				return ratelimit.NewSlidingWindowCounter(p.rate, ratelimit.WithClock(clk))
			},
			bound: func(p params) func([]booked) error {
				n, w := p.rate.N, int64(p.rate.Period)
				return slidingBound(p.rate.Period, 2*n-(2*n+w-1)/w)
			},
		},
	}
}

func leaserOf(t testing.TB, l ratelimit.Limiter) *leaser {
	t.Helper()
	var s *leaser
	switch x := l.(type) {
	case *TokenBucket:
		s = x.lease
	case *FixedWindow:
		s = x.lease
	case *SlidingWindowCounter:
		s = x.lease
	}
	if s == nil {
		t.Fatalf("%T has no leases", l)
	}
	return s
}

// leaseTally sums a limiter's lease events.
type leaseTally struct {
	mu                                   sync.Mutex
	taken, spent, returned, lapsed       int64
	outstanding, maxOutstanding, leases_ int64
}

func (c *leaseTally) Observe(e ratelimit.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(e.N)
	switch e.Kind {
	case ratelimit.EventLeaseTaken:
		c.taken += n
		c.outstanding += n
		c.leases_++
		c.maxOutstanding = max(c.maxOutstanding, c.outstanding)
	case ratelimit.EventLeaseSpent:
		c.spent += n
		c.outstanding -= n
	case ratelimit.EventLeaseReturned:
		c.returned += n
		c.outstanding -= n
	case ratelimit.EventLeaseLapsed:
		c.lapsed += n
		c.outstanding -= n
	}
}

func TestLeaseOptionErrors(t *testing.T) {
	client := newClient(t, "127.0.0.1:1", true) // never dialled
	r := ratelimit.PerSecond(10)
	for _, share := range [][]float64{{0}, {-0.5}, {1.5}, {0.1, 0.2}} {
		if _, err := NewTokenBucket(client, r, 10, WithLease(share...)); !errors.Is(err, ratelimit.ErrInvalidOption) {
			t.Errorf("WithLease(%v): %v, want ErrInvalidOption", share, err)
		}
	}
	if _, err := NewLeakyBucket(client, r, 10, WithLease()); !errors.Is(err, ErrLeaseUnsupported) {
		t.Errorf("leaky bucket: %v", err)
	}
	if _, err := NewSlidingLog(client, r, WithLease()); !errors.Is(err, ErrLeaseUnsupported) {
		t.Errorf("sliding log: %v", err)
	}
	if _, err := NewBulkhead(client, 3, time.Second, WithLease()); !errors.Is(err, ErrLeaseUnsupported) {
		t.Errorf("bulkhead: %v", err)
	}
	for _, c := range leaseCases() {
		if _, err := c.build(client, c.p, WithLease(), WithLease(1)); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestLeaseBoundAcrossInstances drives several instances of a limiter on
// one key, all but one with leases, in a random interleaving on one
// manual clock, against one redis-server, and records the instant of
// every event admitted. The events together must keep the algorithm's
// bound over every interval, and more: replayed in order through the
// in-memory limiter of the same parameters, each must be allowed (the
// admitted sequence is one the algorithm itself could have admitted).
// It also measures the under-admission: what the same requests would get
// from one in-memory limiter, against what the leases held.
func TestLeaseBoundAcrossInstances(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range leaseCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(6) {
				leaseTrace(t, client, c, seed, 1200)
			}
		})
	}
}

func leaseTrace(t *testing.T, client Client, c leaseCase, seed uint64, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 77))
	mc := ratelimit.NewManualClock(start)
	prefix := testPrefix(t)
	common := []Option{WithClock(mc), WithPrefix(prefix), withClockTime(60_000), WithTimeout(5 * time.Second),
		WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) })}
	tally := &leaseTally{}
	var ls []ratelimit.Limiter
	var leasers []*leaser
	for i := range 4 {
		opts := common
		if i > 0 {
			share := []float64{1, 0.5, 0.25}[i-1]
			opts = append(slices.Clone(common), WithLease(share), WithLeaseObserver(tally))
		}
		l, err := c.build(client, c.p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		if i > 0 {
			s := leaserOf(t, l)
			s.inline = true
			leasers = append(leasers, s)
		}
	}
	ideal, err := c.core(c.p, mc)
	if err != nil {
		t.Fatal(err)
	}
	limit := int(c.p.rate.N)
	if c.p.capacity > 0 {
		limit = c.p.capacity
	}
	step := int64(c.p.rate.Period) / c.p.rate.N
	const key = "k"
	var acted []booked
	type pending struct {
		res, ideal *ratelimit.Reservation
		n          int
	}
	var open []pending
	admitted, idealAdmitted := 0, 0
	for i := range steps {
		switch r := rng.IntN(10); {
		case r < 3: // no time passes
		case r < 9:
			// Busy seeds (even) ask faster than the rate; idle ones
			// (odd) about at it, so that keys are often taken from full.
			mc.Advance(time.Duration(rng.Int64N(step*int64(1+3*(seed%2))/2 + 1)))
		default:
			mc.Advance(time.Duration(rng.Int64N(step*int64(limit)/2 + 1)))
		}
		now := mc.Now().UnixNano()
		if rng.IntN(20) == 0 {
			for _, s := range leasers {
				s.sweep(s.now())
			}
			continue
		}
		l := ls[rng.IntN(len(ls))]
		n := 1
		if rng.IntN(5) == 0 {
			n = 1 + rng.IntN(limit)
		}
		if l == ls[0] && rng.IntN(3) == 0 {
			// The instance without leases also books ahead and cancels
			// (of any earlier booking: a cancel of the latest gives it
			// back past the leases' bookings).
			if len(open) > 0 && rng.IntN(2) == 0 {
				j := rng.IntN(len(open))
				r := open[j]
				open = append(open[:j], open[j+1:]...)
				r.res.Cancel()
				r.ideal.Cancel()
				if act := r.res.TimeToAct().UnixNano(); act < now {
					acted = append(acted, booked{act, r.n}) // due: it acted
				}
				continue
			}
			r, err := l.Reserve(ctx, key, n)
			if err != nil {
				t.Fatalf("seed %d step %d: Reserve(%d): %v", seed, i, n, err)
			}
			ir, _ := ideal.Reserve(ctx, key, n) // the same requests, for the measure
			if r.OK() {
				open = append(open, pending{r, ir, n})
			}
			continue
		}
		var ok bool
		if n == 1 && rng.IntN(2) == 0 {
			ok = l.Allow(key)
		} else {
			d, err := l.AllowN(ctx, key, n)
			if err != nil {
				t.Fatalf("seed %d step %d: AllowN(%d): %v", seed, i, n, err)
			}
			ok = d.Allowed
		}
		if ok {
			acted = append(acted, booked{now, n})
			admitted += n
		}
		if d, _ := ideal.AllowN(ctx, key, n); d.Allowed {
			idealAdmitted += n
		}
	}
	for _, s := range leasers {
		s.sweep(s.now() + int64(time.Hour))
	}
	for _, r := range open {
		acted = append(acted, booked{r.res.TimeToAct().UnixNano(), r.n})
	}
	if admitted == 0 {
		t.Fatalf("seed %d: nothing admitted: the trace tests nothing", seed)
	}
	if err := c.bound(c.p)(acted); err != nil {
		t.Errorf("seed %d: bound broken: %v", seed, err)
	}
	// Replay: the admitted events, in order of their instants, must each
	// be allowed by the algorithm itself.
	slices.SortStableFunc(acted, func(a, b booked) int { return int(min(max(a.at-b.at, -1), 1)) })
	rc := ratelimit.NewManualClock(start)
	replay, err := c.core(c.p, rc)
	if err != nil {
		t.Fatal(err)
	}
	for j, e := range acted {
		rc.Set(time.Unix(0, e.at))
		if d, _ := replay.AllowN(ctx, key, e.n); !d.Allowed {
			t.Errorf("seed %d: event %d (%d at +%v) admitted across the instances, which the algorithm alone would refuse",
				seed, j, e.n, time.Unix(0, e.at).Sub(start))
			break
		}
	}
	tally.mu.Lock()
	defer tally.mu.Unlock()
	if tally.outstanding != 0 || tally.taken != tally.spent+tally.returned+tally.lapsed {
		t.Errorf("seed %d: leases taken %d, spent %d, returned %d, lapsed %d, outstanding %d: they do not add up",
			seed, tally.taken, tally.spent, tally.returned, tally.lapsed, tally.outstanding)
	}
	if tally.leases_ == 0 || tally.spent == 0 {
		t.Errorf("seed %d: no lease was spent: the trace tests nothing", seed)
	}
	t.Logf("seed %d: admitted %d (in memory alone: %d, under %d); %d leases took %d units: spent %d, returned %d, lapsed %d; at most %d held at once",
		seed, admitted, idealAdmitted, idealAdmitted-admitted, tally.leases_, tally.taken, tally.spent, tally.returned, tally.lapsed, tally.maxOutstanding)
}

// TestLeaseConcurrentInstances hammers one key from several leasing
// instances at once, with their background fetches, settlements and
// expiries, on the server's clock: on a limit that does not refill during
// the test, no more than the limit is admitted in all, and every lease's
// units are accounted for (spent, returned or lapsed) once it ends.
func TestLeaseConcurrentInstances(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	const limit = 300
	builds := map[string]func(o ...Option) (ratelimit.Limiter, error){
		"TokenBucket": func(o ...Option) (ratelimit.Limiter, error) {
			return NewTokenBucket(client, ratelimit.PerHour(1), limit, o...)
		},
		"FixedWindow": func(o ...Option) (ratelimit.Limiter, error) {
			return NewFixedWindow(client, ratelimit.Per(limit, 35*24*time.Hour), o...)
		},
		"SlidingWindowCounter": func(o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingWindowCounter(client, ratelimit.Per(limit, 35*24*time.Hour), o...)
		},
	}
	for name, build := range builds {
		t.Run(name, func(t *testing.T) {
			prefix := testPrefix(t)
			tally := &leaseTally{}
			var ls []ratelimit.Limiter
			for range 3 {
				l, err := build(WithPrefix(prefix), WithTimeout(5*time.Second), WithLease(0.5), WithLeaseObserver(tally),
					WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := ls[i%len(ls)]
					for range 150 {
						if i%4 == 3 {
							if d, err := l.AllowN(context.Background(), "k", 2); err == nil && d.Allowed {
								admitted.Add(2)
							}
						} else if l.Allow("k") {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			// Every lease ends within its time, and every fetch within
			// the call timeout; wait for the last.
			deadline := time.Now().Add(10 * time.Second)
			for quiet := 0; quiet < 2; {
				tally.mu.Lock()
				out := tally.outstanding
				tally.mu.Unlock()
				busy := false
				for _, l := range ls {
					busy = busy || leaserOf(t, l).busy()
				}
				if out == 0 && !busy {
					quiet++ // twice in a row: no fetch was about to start
				} else {
					quiet = 0
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			tally.mu.Lock()
			defer tally.mu.Unlock()
			if a := admitted.Load(); a > limit+1 || a == 0 {
				t.Errorf("admitted %d across the instances, limit %d", a, limit)
			}
			if tally.outstanding != 0 || tally.taken != tally.spent+tally.returned+tally.lapsed {
				t.Errorf("leases taken %d, spent %d, returned %d, lapsed %d, outstanding %d: they do not add up",
					tally.taken, tally.spent, tally.returned, tally.lapsed, tally.outstanding)
			}
			t.Logf("admitted %d of %d; %d leases took %d: spent %d, returned %d, lapsed %d", admitted.Load(), limit,
				tally.leases_, tally.taken, tally.spent, tally.returned, tally.lapsed)
		})
	}
}

// TestLeaseTokenBucketHeldUnitsLapse holds leased units while a full
// bucket refills, then spends them in a burst along with another
// instance's: the units whose instant has passed must lapse, or the burst
// would exceed the capacity.
func TestLeaseTokenBucketHeldUnitsLapse(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	mc := ratelimit.NewManualClock(start)
	rate, capacity := ratelimit.PerSecond(100), 40
	common := []Option{WithClock(mc), WithPrefix(testPrefix(t)), withClockTime(60_000), WithTimeout(5 * time.Second)}
	tally := &leaseTally{}
	a, err := NewTokenBucket(client, rate, capacity, append(slices.Clone(common), WithLease(1), WithLeaseObserver(tally))...)
	if err != nil {
		t.Fatal(err)
	}
	leaserOf(t, a).inline = true
	b, err := NewTokenBucket(client, rate, capacity, common...)
	if err != nil {
		t.Fatal(err)
	}
	var acted []booked
	allow := func(l ratelimit.Limiter) bool {
		if l.Allow("k") {
			acted = append(acted, booked{mc.Now().UnixNano(), 1})
			return true
		}
		return false
	}
	// A takes a lease of 20 from the full bucket (its demand grew
	// before: the size is set here) and spends one unit.
	leaserOf(t, a).key("k").size = 20
	if !allow(a) {
		t.Fatal("A: first event refused")
	}
	tally.mu.Lock()
	held := tally.outstanding - 1
	tally.mu.Unlock()
	if held != 19 {
		t.Fatalf("A holds %d leased units, want 19", held)
	}
	// The bucket refills while A holds its units; then both burst.
	mc.Advance(50 * time.Millisecond)
	nb, na := 0, 0
	for allow(b) {
		nb++
	}
	for allow(a) {
		na++
	}
	t.Logf("A held %d; in the burst B got %d, A %d", held, nb, na)
	if err := tokenBound(rate, capacity)(acted); err != nil {
		t.Errorf("bound broken: %v", err)
	}
	if d, err := a.AllowN(ctx, "k", 0); err != nil || d.Limit != capacity {
		t.Errorf("peek: %+v %v", d, err)
	}
}

// busy reports whether a fetch is in flight or a lease is held for any
// key.
func (s *leaser) busy() bool {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		for _, gk := range sh.m {
			gk.mu.Lock()
			b := gk.wait != nil || gk.next != nil || gk.cur.Load() != nil
			gk.mu.Unlock()
			if b {
				sh.mu.RUnlock()
				return true
			}
		}
		sh.mu.RUnlock()
	}
	return false
}

// Allow and AllowN from a lease allocate nothing.
func TestLeaseAllowDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	client := newClient(t, redisAddr(t), true)
	for _, c := range leaseCases() {
		t.Run(c.name, func(t *testing.T) {
			p := params{ratelimit.PerSecond(1_000_000), 1_000_000}
			if c.p.capacity == 0 {
				p = params{rate: ratelimit.Per(1_000_000, time.Hour)}
			}
			l, err := c.build(client, p, WithPrefix(testPrefix(t)), WithLease(1), WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			s := leaserOf(t, l)
			s.inline = true
			s.key("k").size = 200_000
			if !l.Allow("k") {
				t.Fatal("first Allow refused")
			}
			ctx := context.Background()
			if a := testing.AllocsPerRun(200, func() {
				if !l.Allow("k") {
					t.Fatal("refused")
				}
				if d, err := l.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
					t.Fatal("AllowN refused", d, err)
				}
			}); a != 0 {
				t.Errorf("%v allocations per Allow and AllowN", a)
			}
		})
	}
}

// With Redis unreachable, a leasing limiter answers by its failure
// policy: FailOpen allows, FailClosed fails with ErrUnavailable, FailLocal
// leases from the local limiter and so allows exactly its capacity.
func TestLeaseFailurePolicies(t *testing.T) {
	client := newClient(t, "127.0.0.1:1", true) // nothing listens
	ctx := context.Background()
	mk := func(p FailurePolicy) ratelimit.Limiter {
		l, err := NewTokenBucket(client, ratelimit.PerHour(1), 10, WithLease(1), WithFailurePolicy(p),
			WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		leaserOf(t, l).inline = true
		return l
	}
	open := mk(FailOpen)
	for range 3 {
		if d, err := open.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("FailOpen: %+v %v", d, err)
		}
	}
	closed := mk(FailClosed)
	if _, err := closed.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("FailClosed: %v", err)
	}
	if closed.Allow("k") {
		t.Fatal("FailClosed: Allow true")
	}
	local := mk(FailLocal)
	n := 0
	for range 30 {
		if local.Allow("k") {
			n++
		}
	}
	// Each lease taken from the full local bucket loses its first unit,
	// due before the round trip ended (see WithLease).
	if n < 1 || n > 10 {
		t.Fatalf("FailLocal: %d allowed, want some and at most the capacity, 10", n)
	}
}

// Past maxLeaseKeys keys holding lease state, further keys are decided by
// Redis directly, and a key whose leases ended is forgotten.
func TestLeaseKeysAreBounded(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	l, err := NewFixedWindow(client, ratelimit.Per(100, time.Minute), WithLease(1), WithClock(mc),
		WithPrefix(testPrefix(t)), withClockTime(60_000), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := leaserOf(t, l)
	s.inline = true
	for i := range maxLeaseKeys + 50 {
		if !l.Allow("k" + strconv.Itoa(i)) {
			t.Fatalf("key %d refused", i)
		}
	}
	if got := s.keys.Load(); got != maxLeaseKeys {
		t.Fatalf("%d keys hold lease state, want %d", got, maxLeaseKeys)
	}
	mc.Advance(time.Second)
	s.sweep(s.now())
	if got := s.keys.Load(); got != 0 {
		t.Fatalf("%d keys hold lease state after every lease ended", got)
	}
}
