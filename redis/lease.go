package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/exact"
)

// ErrLeaseUnsupported is what NewLeakyBucket, NewSlidingLog and
// NewBulkhead return (wrapped) when given WithLease: their state cannot be
// handed out as a count of units to spend later. A leaky bucket's events
// depart at evenly spaced slots, so units spent later than booked would
// burst; a sliding log keeps one instant per event, and an event spent
// later than logged would leave the log's window before it acted; a
// bulkhead counts calls in flight, not events.
var ErrLeaseUnsupported = errors.New("ratelimit: WithLease is for TokenBucket, FixedWindow and SlidingWindowCounter")

// Lease defaults; see WithLease.
const (
	defaultLeaseShare = 0.1
	leaseTTL          = 100 * time.Millisecond
	leaseShards       = 64
	// maxLeaseKeys bounds the keys that hold lease state in one limiter:
	// past it, further keys are decided by Redis as without leases until
	// some key's leases end, so that a flood of keys cannot grow memory.
	maxLeaseKeys = 4096
)

// WithLease makes the limiter take a hot key's allowance from Redis in
// leases and spend them locally: Allow and AllowN answer from the lease at
// in-memory speed, without a round trip, for TokenBucket, FixedWindow and
// SlidingWindowCounter (the other constructors refuse the option with an
// error matching ErrLeaseUnsupported). share, optional (default 0.1), is
// the most of a key's capacity one instance holds in leases at once, in
// (0, 1]; any other value, or more than one, is refused with an error
// matching ratelimit.ErrInvalidOption.
//
// A lease is one Take of k units on Redis: Redis books them as real events
// at its instant, so no two instances can spend the same unit. The
// instance then spends them one Allow at a time, and a lease ends when it
// is spent, when its time is up (at most 100 ms, and for the windows the
// end of the window it was taken in), or when a unit cannot be spent
// without breaking the algorithm's bound (the token bucket's rule below).
// What is left when it ends is settled back to Redis, which gives it back
// by the algorithm's give-back rule (Settle's), or else it lapses. The
// next lease is fetched in the background when half of the current one is
// spent, so that callers do not wait for the round trip while the key has
// allowance; the two leases together hold at most share of the capacity
// (each at most half of it, at least 1 unit). The lease size follows the
// demand: it doubles after a lease fully spent and halves after a lease
// that ended more than half unspent, from 1 unit up to the cap.
//
// The bound is the algorithm's, over the instants at which the events
// act, across every instance, leased or not:
//
//   - windows: a unit booked in a window is spent in that window (before
//     its end as the Redis server's reply gives it, measured from when the
//     request was sent), so the count in each window, and the sliding
//     counter's estimate at each admission, is at most what Redis booked;
//   - token bucket: Redis booked the k units at theoretical arrival times
//     θ_1 < ... < θ_k (θ_k is the TAT the take left less one interval). An
//     event that acts no later than its θ leaves the bucket's state where
//     Redis has it, so the lease spends the units in order and spends the
//     next only while now ≤ its θ (now + held·T ≤ TAT, with the round trip
//     counted against the lease); a unit whose θ has passed lapses. On a
//     hot key, whose bucket is far from full, the θs lie a bucket's span
//     ahead and no unit lapses; a lease taken from a full bucket loses
//     the units due within the round trip, ⌈r·RTT⌉ (at least one); a
//     lease that would lose all its units so is given back at once,
//     Redis decides the event as without leases, and the key's next lease
//     asks for four times as many units (up to the most a lease holds), so
//     that a hot key's leases grow past what a round trip costs.
//
// Under-admission is at most what the leases hold at the time: units that
// one instance holds and does not spend are refused to the others until
// its lease ends and gives them back (or they lapse). A denial is cached
// locally until the RetryAfter Redis gave, or until a rate change,
// override or Reset of the key in this limiter.
//
// Reserve, Wait, Take and AllowN for more units than a lease may hold go
// to Redis as without leases, and so do the keys past the first 4096 that
// hold lease state at once in one limiter (a key's state goes when its
// leases end). A rate change (SetRate, SetOverride)
// applies to a key's leased units when its lease ends; Reset ends the key's
// lease in this instance (its units lapse) but not in the others.
func WithLease(share ...float64) Option {
	return func(c *config) {
		switch len(share) {
		case 0:
			c.lease = defaultLeaseShare
		case 1:
			c.lease = share[0]
			if !(c.lease > 0 && c.lease <= 1) {
				c.lease = -1
			}
		default:
			c.lease = -1
		}
	}
}

// WithLeaseObserver makes the limiter report its leases to o (see
// ratelimit.EventLeaseTaken and the kinds after it), with Event.Limiter
// the limiter's key prefix, Key the key and N the units. Without
// WithLease it does nothing.
func WithLeaseObserver(o ratelimit.Observer) Option {
	return func(c *config) { c.leaseObs = o }
}

// leaseKind is how an algorithm's leases end.
type leaseKind uint8

const (
	leaseTB  leaseKind = iota // token bucket: units in order, each by its θ
	leaseFW                   // fixed window: by the window's end
	leaseSWC                  // sliding window counter: by the window's end
)

// leaser hands out a limiter's leases, per key.
type leaser struct {
	lim    limiter // without the leaser: Take, AllowN
	kind   leaseKind
	share  float64
	obs    ratelimit.Observer
	name   string
	clock  ratelimit.Clock
	sys    bool         // the system clock: read the monotonic clock alone
	base   time.Time    // instants are ns since base
	inline bool         // tests: fetch, settle and expire on the caller's goroutine
	keys   atomic.Int64 // held in the shards, at most maxLeaseKeys
	shards [leaseShards]grantShard
}

type grantShard struct {
	mu sync.RWMutex
	m  map[string]*grantKey
	_  [40]byte
}

// grantKey is one key's leases in this instance.
type grantKey struct {
	cur  atomic.Pointer[grant] // spent from
	deny atomic.Pointer[denial]
	mu   sync.Mutex // guards the rest
	next *grant     // fetched ahead
	wait chan struct{}
	size int64 // the next lease's units
	gone bool  // removed from its shard
	// scarce: the last fetch got fewer units than it asked for, or none;
	// rtt: how long it took.
	scarce bool
	rtt    int64
}

// denial is a refusal Redis gave, answered locally until its end.
type denial struct {
	at, until int64 // when the take was sent; when to ask again
	st        stamp // the parameters it was given under: void after a change
	d         ratelimit.Decision
}

// grant is one lease: k units, left of them still to spend.
type grant struct {
	left     atomic.Int64
	lapsed   atomic.Int64
	fetching atomic.Bool // the next lease was asked for
	k        int64
	limit    int
	start    int64 // when the take was sent
	end      int64 // spendable strictly before
	free     int64 // token bucket: until then every unit is within its θ
	tat      int64 // token bucket: the TAT the take left, less 1 ns
	iv       exact.Interval
	res      *ratelimit.Reservation
	ended    atomic.Bool
	short    bool // Redis held fewer units than asked for
}

func newLeaser(l limiter, script string) (*leaser, error) {
	s := &leaser{lim: l, share: l.cfg.lease, obs: l.cfg.leaseObs, name: l.cfg.prefix, clock: l.cfg.clock}
	switch script {
	case tbScript.name:
		s.kind = leaseTB
	case fwScript.name:
		s.kind = leaseFW
	case swcScript.name:
		s.kind = leaseSWC
	case lbScript.name:
		return nil, fmt.Errorf("%w: a leaky bucket's events leave at evenly spaced slots, and units spent later than booked would burst", ErrLeaseUnsupported)
	default:
		return nil, fmt.Errorf("%w: a sliding log keeps each event's instant, and one spent later than logged would leave the window before it acted", ErrLeaseUnsupported)
	}
	if s.share < 0 {
		return nil, fmt.Errorf("%w: WithLease takes one share of a key's capacity, in (0, 1]", ratelimit.ErrInvalidOption)
	}
	s.sys = s.clock == ratelimit.SystemClock()
	s.base = s.clock.Now()
	for i := range s.shards {
		s.shards[i].m = map[string]*grantKey{}
	}
	return s, nil
}

// now returns the clock's time in ns since base.
func (s *leaser) now() int64 {
	if s.sys {
		return int64(time.Since(s.base))
	}
	return int64(s.clock.Now().Sub(s.base))
}

func (s *leaser) shard(key string) *grantShard {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &s.shards[h%leaseShards]
}

// key returns key's leases, set up on first use, or nil if key has none
// and maxLeaseKeys others have.
func (s *leaser) key(key string) *grantKey {
	sh := s.shard(key)
	sh.mu.RLock()
	gk := sh.m[key]
	sh.mu.RUnlock()
	if gk != nil {
		return gk
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if gk = sh.m[key]; gk == nil {
		if s.keys.Add(1) > maxLeaseKeys {
			s.keys.Add(-1)
			return nil
		}
		gk = &grantKey{size: 1}
		sh.m[key] = gk
	}
	return gk
}

// take spends n units at now, if the lease has them.
func (g *grant) take(n, now int64) (left int64, ok bool) {
	for {
		l := g.left.Load()
		if l < n || now >= g.end {
			return l, false
		}
		if now > g.free {
			// Token bucket: the next unit is the (k-l+1)-th, whose θ
			// is TAT − l·T: it may act only while l·T ≤ TAT − now.
			// Units whose θ has passed lapse.
			c := int64(0)
			if g.tat >= now {
				c = g.iv.Count(exact.Time{Ns: g.tat - now})
			}
			if c < l {
				if g.left.CompareAndSwap(l, c) {
					g.lapsed.Add(l - c)
				}
				continue
			}
		}
		if g.left.CompareAndSwap(l, l-n) {
			return l - n, true
		}
	}
}

// allow is Allow with a lease.
func (s *leaser) allow(key string) bool {
	gk := s.key(key)
	if gk == nil {
		return s.lim.Allow(key)
	}
	now := s.now()
	if g := gk.cur.Load(); g != nil {
		if left, ok := g.take(1, now); ok {
			s.ahead(gk, g, key, left, now)
			return true
		}
	}
	d, err := s.slow(context.Background(), gk, key, 1, now)
	return err == nil && d.Allowed
}

// allowN is AllowN with a lease.
func (s *leaser) allowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	p := s.lim.params(key)
	if err := validN(p, n); err != nil {
		return ratelimit.Decision{}, err
	}
	if n == 0 {
		return s.lim.AllowN(ctx, key, 0)
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	gk := s.key(key)
	if gk == nil {
		return s.lim.AllowN(ctx, key, n)
	}
	now := s.now()
	if g := gk.cur.Load(); g != nil {
		if left, ok := g.take(int64(n), now); ok {
			s.ahead(gk, g, key, left, now)
			return ratelimit.Decision{Allowed: true, Limit: g.limit, Remaining: int(left)}, nil
		}
	}
	return s.slow(ctx, gk, key, int64(n), now)
}

// ahead fetches the next lease once half of g is spent.
func (s *leaser) ahead(gk *grantKey, g *grant, key string, left, now int64) {
	if 2*left > g.k || g.fetching.Load() || !g.fetching.CompareAndSwap(false, true) {
		return
	}
	if s.inline {
		s.prefetch(gk, key, g, now)
		return
	}
	go s.prefetch(gk, key, g, now)
}

// slow answers n units that the current lease could not: from the next
// lease, a denial, a new lease, or Redis itself.
func (s *leaser) slow(ctx context.Context, gk *grantKey, key string, n, now int64) (ratelimit.Decision, error) {
	if n <= s.most(key) {
		for try := 0; try < 6; try++ {
			g := gk.cur.Load()
			if try > 0 {
				now = s.now()
				if g != nil {
					if left, ok := g.take(n, now); ok {
						s.ahead(gk, g, key, left, now)
						return ratelimit.Decision{Allowed: true, Limit: g.limit, Remaining: int(left)}, nil
					}
				}
			}
			if dn := gk.deny.Load(); dn != nil && now < dn.until && s.lim.current(key, dn.st) {
				d := dn.d
				d.RetryAfter = time.Duration(dn.until - now)
				d.ResetAfter = max(d.ResetAfter-time.Duration(now-dn.at), 0)
				return d, nil
			}
			if err := s.advance(ctx, gk, key, g, n, now); err != nil {
				var sc scarce
				if errors.Is(err, errDirect) {
					break
				}
				if errors.Is(err, errOpen) {
					lim := s.lim.params(key).alg.max()
					return ratelimit.Decision{Allowed: true, Limit: lim, Remaining: lim - int(n)}, nil
				}
				if errors.As(err, &sc) {
					p := s.lim.params(key)
					return ratelimit.Decision{Limit: p.alg.max(), RetryAfter: max(time.Duration(sc), 1)}, nil
				}
				return ratelimit.Decision{}, err
			}
		}
	}
	// The leases could not serve n (more than a lease holds, or leases
	// that left nothing spendable, or a failed call): Redis decides, or
	// the failure policy.
	return s.lim.AllowN(ctx, key, int(n))
}

// errDirect is fetch's answer when the lease it took would lapse whole
// (a token bucket taken from full): it gave the units back, and Redis
// decides the event.
var errDirect = errors.New("the lease would lapse whole: redis decides")

// errOpen is fetch's answer when FailOpen answered for Redis.
var errOpen = errors.New("redis is down and FailOpen answers")

// scarce is advance's answer when the key is short and a fetch is in
// flight: refuse, and ask again after the round trip it takes.
type scarce int64

func (scarce) Error() string { return "the key is short and a fetch is in flight" }

// most is the most units one lease of key holds: half of the share.
func (s *leaser) most(key string) int64 {
	c := s.lim.params(key).alg.max()
	return max(int64(float64(c)*s.share/2), 1)
}

// advance moves key's leases on after failed, the current lease (or nil),
// could not serve n units at now: it retires failed, takes up the next
// lease, or waits for a fetch (its own or one in flight).
func (s *leaser) advance(ctx context.Context, gk *grantKey, key string, failed *grant, n, now int64) error {
	var done []*grant
	defer func() {
		for _, g := range done {
			s.finish(key, g, now)
		}
	}()
	gk.mu.Lock()
	if g := gk.cur.Load(); g != failed {
		gk.mu.Unlock()
		return nil // another caller moved it on meanwhile
	}
	if failed != nil {
		gk.cur.Store(nil)
		done = append(done, failed)
	}
	if g := gk.next; g != nil {
		gk.next = nil
		if now < g.end && g.left.Load() >= n {
			gk.cur.Store(g)
			gk.mu.Unlock()
			return nil
		}
		done = append(done, g)
	}
	if w := gk.wait; w != nil {
		if gk.scarce {
			// The key is short on Redis too: refuse rather than wait
			// for the fetch in flight.
			rtt := gk.rtt
			gk.mu.Unlock()
			return scarce(rtt)
		}
		gk.mu.Unlock()
		select {
		case <-w:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w := make(chan struct{})
	gk.wait = w
	size := max(gk.size, n)
	gk.mu.Unlock()

	t := s.now()
	g, dn, err := s.fetch(ctx, key, size, n)

	gk.mu.Lock()
	gk.wait = nil
	gk.scarce, gk.rtt = (g != nil && g.short) || dn != nil, s.now()-t
	close(w)
	if g != nil {
		gk.cur.Store(g)
		gk.deny.Store(nil)
		s.watch(gk, key, g)
	} else if dn != nil {
		gk.deny.Store(dn)
		if gk.cur.Load() == nil && gk.next == nil && !s.inline {
			// Forget the key once the denial is over, unless a lease
			// comes meanwhile.
			d := time.Duration(dn.until - s.now())
			go func() {
				<-s.clock.NewTimer(d).C()
				s.drop(gk, key)
			}()
		}
	}
	grown := false
	if errors.Is(err, errDirect) && size < s.most(key) {
		// The lease would have lapsed whole within the round trip (taken
		// from a full bucket): the next asks for four times as many units,
		// as after a lease used up mostly by lapsing, so that a hot key's
		// leases grow past r·RTT. The key keeps that size until it is
		// forgotten, idle, a lease's time later.
		gk.size = min(4*max(gk.size, size), 1<<40)
		grown = true
	}
	gk.mu.Unlock()
	switch {
	case grown && !s.inline:
		go func() {
			<-s.clock.NewTimer(leaseTTL).C()
			s.drop(gk, key)
		}()
	case grown: // tests (inline) keep it
	case g == nil && dn == nil:
		// Nothing held and nothing to wait for (a failed call, a lease
		// given back whole or voided by a rate change, or one that
		// would have lapsed whole at the most a lease may hold): forget
		// the key, so that it does not hold one of the maxLeaseKeys
		// places.
		s.drop(gk, key)
	}
	return err
}

// prefetch fetches key's next lease, unless one is held or in flight.
func (s *leaser) prefetch(gk *grantKey, key string, cur *grant, now int64) {
	gk.mu.Lock()
	if gk.next != nil || gk.wait != nil {
		gk.mu.Unlock()
		return
	}
	if cur != nil && now-cur.start <= int64(leaseTTL)/2 {
		// Half of the lease went in half its time: the demand is
		// there for twice as much.
		gk.size = min(max(gk.size, 2*cur.k), 1<<40)
	}
	w := make(chan struct{})
	gk.wait = w
	size := gk.size
	gk.mu.Unlock()

	t := s.now()
	g, dn, err := s.fetch(context.Background(), key, size, 1)

	gk.mu.Lock()
	gk.wait = nil
	gk.scarce, gk.rtt = (g != nil && g.short) || dn != nil, s.now()-t
	close(w)
	if err == nil && g != nil {
		if gk.cur.Load() == nil {
			gk.cur.Store(g)
			gk.deny.Store(nil)
		} else {
			gk.next = g
		}
		s.watch(gk, key, g)
	}
	gk.mu.Unlock()
}

// fetch takes a lease of size units for key, or of fewer if Redis holds
// fewer but at least n. It returns the lease, or the denial to answer
// with, or neither (a failed call: the caller asks Redis through AllowN).
func (s *leaser) fetch(ctx context.Context, key string, size, n int64) (*grant, *denial, error) {
	short := false
	for {
		st := s.lim.stampOf(key)
		p := s.lim.params(key)
		size = min(size, max(int64(float64(p.alg.max())*s.share/2), 1))
		n = min(n, size)
		sent := s.now()
		res, err := s.lim.Take(ctx, key, int(size))
		if err != nil {
			return nil, nil, err // ctx's, or FailClosed's ErrUnavailable
		}
		d := res.Decision()
		if res.OK() && d.ResetAfter <= 0 {
			// Only FailOpen books with nothing to come back from (a
			// booking on Redis or in the local limiter leaves the key
			// short of full): Redis is down, and the policy answers.
			return nil, nil, errOpen
		}
		if !res.OK() {
			if size > n {
				// Fewer than asked: take what Redis holds if that is at
				// least n, or learn when n will be there.
				size, short = max(int64(d.Remaining), n), true
				continue
			}
			if d.RetryAfter <= 0 {
				return nil, nil, nil
			}
			return nil, &denial{at: sent, until: sent + int64(d.RetryAfter), st: st, d: d}, nil
		}
		g := &grant{k: size, limit: d.Limit, start: sent, res: res, short: short}
		g.left.Store(size)
		reset := int64(d.ResetAfter)
		switch s.kind {
		case leaseTB:
			tb := p.alg.(*tbAlgo)
			g.iv = tb.iv
			g.tat = sent + reset - 1
			g.free = g.tat - tb.iv.Add(exact.Time{}, size).CeilNs()
			g.end = sent + int64(leaseTTL)
			if now := s.now(); g.tat < now || g.iv.Count(exact.Time{Ns: g.tat - now}) == 0 {
				// Taken from a full bucket: every unit's θ passed
				// within the round trip, and the lease would lapse
				// whole (a bucket of capacity 1 would then admit
				// nothing). Give it all back and let Redis decide.
				_, _ = res.Settle(0)
				return nil, nil, errDirect
			}
		case leaseFW:
			g.end = min(sent+reset, sent+int64(leaseTTL))
			g.free = g.end
		case leaseSWC:
			g.end = min(sent+reset-p.alg.period(), sent+int64(leaseTTL))
			g.free = g.end
		}
		s.emit(ratelimit.EventLeaseTaken, key, size)
		if !s.lim.current(key, st) {
			// A rate change or Reset overlapped the take: its units may
			// be under other parameters than the ones read.
			s.finish(key, g, sent)
			return nil, nil, nil
		}
		return g, nil, nil
	}
}

// watch ends g at its end if nothing else has by then.
func (s *leaser) watch(gk *grantKey, key string, g *grant) {
	if s.inline {
		return // tests end leases through sweep
	}
	d := time.Duration(g.end - s.now())
	go func() {
		t := s.clock.NewTimer(d)
		<-t.C()
		s.expire(gk, key, g, s.now())
	}()
}

// expire ends g if it is still key's, and forgets key if it is then idle.
func (s *leaser) expire(gk *grantKey, key string, g *grant, now int64) {
	gk.mu.Lock()
	switch {
	case gk.cur.Load() == g:
		gk.cur.Store(nil)
		if nx := gk.next; nx != nil {
			gk.next = nil
			gk.cur.Store(nx)
		}
	case gk.next == g:
		gk.next = nil
	}
	gk.mu.Unlock()
	s.finish(key, g, now)
	s.drop(gk, key)
}

// drop forgets key if it holds no lease and waits for none (a denial it
// holds is forgotten too: the next call asks Redis).
func (s *leaser) drop(gk *grantKey, key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	gk.mu.Lock()
	if sh.m[key] == gk && gk.cur.Load() == nil && gk.next == nil && gk.wait == nil {
		delete(sh.m, key)
		gk.gone = true
		s.keys.Add(-1)
	}
	gk.mu.Unlock()
	sh.mu.Unlock()
}

// sweep ends every lease whose end has passed at now (tests).
func (s *leaser) sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		type kg struct {
			key string
			gk  *grantKey
		}
		var ks []kg
		for k, gk := range sh.m {
			ks = append(ks, kg{k, gk})
		}
		sh.mu.RUnlock()
		for _, x := range ks {
			x.gk.mu.Lock()
			var gs []*grant
			if g := x.gk.cur.Load(); g != nil && now >= g.end {
				gs = append(gs, g)
			}
			if g := x.gk.next; g != nil && now >= g.end {
				gs = append(gs, g)
			}
			x.gk.mu.Unlock()
			for _, g := range gs {
				s.expire(x.gk, x.key, g, now)
			}
		}
	}
}

// forget ends key's leases in this instance without giving anything back
// (Reset: the state they were taken from is gone).
func (s *leaser) forget(key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	gk := sh.m[key]
	if gk != nil {
		delete(sh.m, key)
		s.keys.Add(-1)
	}
	sh.mu.Unlock()
	if gk == nil {
		return
	}
	gk.mu.Lock()
	gk.gone = true
	gs := []*grant{gk.cur.Swap(nil), gk.next}
	gk.next = nil
	gk.deny.Store(nil)
	gk.mu.Unlock()
	for _, g := range gs {
		if g != nil && g.ended.CompareAndSwap(false, true) {
			left := g.left.Swap(0)
			s.emit(ratelimit.EventLeaseSpent, key, g.k-left-g.lapsed.Load())
			s.emit(ratelimit.EventLeaseLapsed, key, left+g.lapsed.Load())
		}
	}
}

// finish ends g at now: what is left is settled back to Redis (the units
// after the last spent; for the windows only before the window's end),
// and key's next lease size follows what g's was used for.
func (s *leaser) finish(key string, g *grant, now int64) {
	if !g.ended.CompareAndSwap(false, true) {
		return
	}
	left := g.left.Swap(0)
	lapsed := g.lapsed.Load()
	if s.kind != leaseTB && now >= g.end && g.end < g.start+int64(leaseTTL) {
		lapsed, left = lapsed+left, 0 // the window is over: nothing to give back
	}
	spent := g.k - left - lapsed
	s.emit(ratelimit.EventLeaseSpent, key, spent)
	s.emit(ratelimit.EventLeaseLapsed, key, lapsed)
	if gk := s.peek(key); gk != nil {
		gk.mu.Lock()
		switch {
		case left == 0 && lapsed > spent:
			// Used up, mostly by lapsing: a token bucket taken from
			// full loses the units due within the round trip, about
			// r·RTT of each lease, which must grow past that.
			gk.size = min(4*max(gk.size, g.k), 1<<40)
		case left == 0:
			gk.size = min(2*max(gk.size, g.k), 1<<40)
		case 2*left > g.k:
			gk.size = max(gk.size/2, 1)
		}
		gk.mu.Unlock()
	}
	if left == 0 {
		return
	}
	s.emit(ratelimit.EventLeaseReturned, key, left)
	settle := func() { _, _ = g.res.Settle(int(g.k - left)) }
	if s.inline {
		settle()
		return
	}
	go settle()
}

// peek returns key's leases if they are set up.
func (s *leaser) peek(key string) *grantKey {
	sh := s.shard(key)
	sh.mu.RLock()
	gk := sh.m[key]
	sh.mu.RUnlock()
	return gk
}

func (s *leaser) emit(kind ratelimit.EventKind, key string, n int64) {
	if s.obs == nil || n == 0 {
		return
	}
	s.obs.Observe(ratelimit.Event{Kind: kind, Limiter: s.name, Key: key, N: int(n), Allowed: true})
}
