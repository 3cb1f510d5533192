package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// LimiterKey is one limit on a request: a limiter and the key charged on
// it, such as {perUser, "alice"}, {perIP, "192.0.2.1"} or {global, ""}.
type LimiterKey struct {
	Limiter Limiter
	Key     string
}

// MultiDecision is the outcome of several limits decided as one, by
// AllowAll or RuleSet.Check: the combined Decision, and each limit's own in
// the order the limits were given.
//
// The combined Decision is that of the limit Strictest picks (its Limit and
// Remaining), with Allowed true only if every limit allowed, and RetryAfter
// and ResetAfter the largest of all the limits'. With no limits it is
// Decision{Allowed: true}.
//
// Each limit's own decision is as booked if the request was allowed, and as
// the limit stands after the give-back if it was denied. The zero value
// holds no limits. A MultiDecision is a value: copying it copies every
// decision, and holds up to 8 without allocating.
type MultiDecision struct {
	Decision
	n    int
	each [stackPairs]Decision
	more []Decision // every decision, when there are more than stackPairs
}

// Len returns how many limits were decided.
func (m *MultiDecision) Len() int { return m.n }

// At returns the decision of limit i, for 0 <= i < Len(). It panics if i
// is out of range.
func (m *MultiDecision) At(i int) Decision { return m.all()[i] }

// Strictest returns the index of the most restrictive limit's decision
// (see the function Strictest), the one whose Limit and Remaining the
// combined Decision reports, or -1 if there are no limits.
func (m *MultiDecision) Strictest() int { return Strictest(m.all()) }

func (m *MultiDecision) all() []Decision {
	if m.more != nil {
		return m.more
	}
	return m.each[:m.n]
}

// buffer returns room for the decisions of n limits: the array inside m
// for up to stackPairs, a new slice beyond.
func (m *MultiDecision) buffer(n int) []Decision {
	m.n = n
	if n > stackPairs {
		m.more = make([]Decision, n)
		return m.more
	}
	return m.each[:n]
}

// AllowAll reports whether n events may happen now under every limit, as
// one decision, all or nothing, and records them under every limit if so.
// If any limit denies, nothing is recorded anywhere: what the others
// booked is given back, so a denied request consumes nothing. n == 0
// peeks at every limit. It does not allocate for up to 8 limits of
// in-memory limiters.
//
// Every limit is asked, even after one has denied, so that the combined
// RetryAfter covers them all: retrying after it succeeds if nothing else
// consumed in between. The result holds the combined Decision and each
// limit's own (see MultiDecision).
//
// The limiters of this package are booked at their own clock's now, and
// nothing they booked survives a denial: the token and leaky buckets are
// checked first and booked only once every in-memory limit has allowed;
// the windows are booked and, on a denial, given back as of the instant
// they were booked. (A bucket that allowed on the check and then lost its
// key's last room to a concurrent call denies when booked; the buckets
// booked before it are given back as Cancel would.) A limiter from outside
// this package (the Redis backend, your own) can give back only what its
// Reservation's Cancel returns, so AllowAll asks such limiters last, and
// only once every in-memory limit has allowed; after a denial it only
// peeks at them. With at most one outside limiter among the limits, a
// denied request consumes nothing anywhere.
//
// Errors: n < 0 returns ErrNegativeN and n larger than an in-memory
// limiter's limit ErrExceedsLimit, both before anything is booked; a limit
// without a limiter returns an error matching ErrInvalidOption. An error
// from an outside limiter is returned as is, after the in-memory bookings
// are given back.
func AllowAll(ctx context.Context, n int, limits []LimiterKey) (MultiDecision, error) {
	var m MultiDecision
	var bbuf [stackPairs]booking
	bk := bbuf[:0]
	if len(limits) > stackPairs {
		bk = make([]booking, 0, len(limits))
	}
	d, err := allowAll(ctx, n, limits, m.buffer(len(limits)), bk[:len(limits)])
	if err != nil {
		return MultiDecision{}, err
	}
	m.Decision = d
	return m, nil
}

// WaitAll blocks until n events may happen under every limit at once,
// then records them under every limit; nothing is booked while it waits.
//
// It is a loop of AllowAll: when denied it sleeps for the Decision's
// RetryAfter on the clock of the first in-memory limiter among the limits
// (the system clock if there is none) and asks again. It is not FIFO: a
// caller of AllowAll may take the room first, and WaitAll then waits again.
//
// Failures leave nothing booked: invalid n or limits return AllowAll's
// errors; a ctx already done returns ctx.Err(); if the needed delay would
// pass ctx's deadline (time left measured in real time, as for WaitN) it
// fails at once with a *LimitError matching both ErrLimited and
// context.DeadlineExceeded; if ctx ends during a sleep it returns
// ctx.Err().
func WaitAll(ctx context.Context, n int, limits []LimiterKey) error {
	return waitAll(ctx, n, limits, clockOfPairs(limits))
}

// ReserveAll books n events under every limit if they may happen now, all
// or nothing, as AllowAll does, and returns the booking.
//
// It never books ahead, as the Limiter contract allows a composite limiter
// to do: a slot booked ahead on one limiter while another holds the
// request back would count the events at the wrong instant on the first (a
// token bucket that booked at t0 for events sent at t1 would see its
// bucket refilled by t1 and allow a second burst on top of them). So when
// the events do not conform now under every limit, nothing is booked, the
// Reservation is not OK, and its Delay is the combined RetryAfter: when to
// ask again. Cancel of an OK reservation gives back, at each in-memory
// limit, what Reservation.Cancel would on that limiter's clock (nothing
// once its clock has moved past the booking, and on a token or leaky
// bucket nothing if a later booking on the key is held); it cannot give
// back at outside limiters.
func ReserveAll(ctx context.Context, n int, limits []LimiterKey) (*Reservation, error) {
	ps := append([]LimiterKey(nil), limits...) // the cancel func outlives the caller's slice
	ds := make([]Decision, len(ps))
	bk := make([]booking, len(ps))
	d, err := allowAll(ctx, n, ps, ds, bk)
	if err != nil {
		return nil, err
	}
	clock := clockOfPairs(ps)
	r := &Reservation{ok: d.Allowed, decision: d, act: clock.Now(), clock: clock}
	if d.Allowed && n > 0 {
		r.cancel = func(time.Time) {
			for i := range ps {
				if bk[i].booked {
					bk[i].mem.multiUnbook(ps[i].Key, n, bk[i].bk, false)
				}
			}
		}
	}
	return r, nil
}

// Strictest returns the index of the most restrictive decision in ds: a
// denial before an allowance, then the smallest Remaining, then the largest
// RetryAfter, then the smallest Limit; the first of equals. It returns -1 if
// ds is empty. AllowAll reports that decision's Limit and Remaining.
func Strictest(ds []Decision) int {
	best := -1
	for i := range ds {
		if best < 0 || stricter(&ds[i], &ds[best]) {
			best = i
		}
	}
	return best
}

func stricter(a, b *Decision) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case a.Remaining != b.Remaining:
		return a.Remaining < b.Remaining
	case a.RetryAfter != b.RetryAfter:
		return a.RetryAfter > b.RetryAfter
	default:
		return a.Limit < b.Limit
	}
}

// Multi is several limits checked as one Limiter, all or nothing: per-key
// limits charge the caller's key, shared ones one key, "", for every
// caller. For example a Multi of a per-IP token bucket and a shared one
// allows a request only if both do, and a request denied by the shared
// bucket consumes nothing from the per-IP one. See AllowAll for the exact
// semantics, including those of limiters from outside this package.
//
// Reserve never books ahead, as the Limiter contract allows of a composite
// limiter: it books only what may happen now (see ReserveAll).
//
// Build it with NewMulti. It is safe for concurrent use if its limiters
// are. Most callers want Allow or AllowN.
type Multi struct {
	limits []MultiLimit
	clock  Clock // Wait's timers: the first in-memory limiter's clock
}

// MultiLimit is one limit of a Multi.
type MultiLimit struct {
	// Limiter enforces the limit.
	Limiter Limiter
	// Shared charges every caller's events to the one key "" on Limiter,
	// a limit shared by all; otherwise the caller's key is charged.
	Shared bool
}

// NewMulti returns limits checked as one, in the order given (in-memory
// limiters before outside ones; see AllowAll). It returns an error
// matching ErrInvalidOption if there are no limits or one has no limiter.
func NewMulti(limits ...MultiLimit) (*Multi, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: a Multi needs at least one limit", ErrInvalidOption)
	}
	ps := make([]LimiterKey, len(limits))
	for i, l := range limits {
		if l.Limiter == nil {
			return nil, fmt.Errorf("%w: limit %d of the Multi has no limiter", ErrInvalidOption, i)
		}
		ps[i].Limiter = l.Limiter
	}
	return &Multi{limits: append([]MultiLimit(nil), limits...), clock: clockOfPairs(ps)}, nil
}

// keys fills buf, or a new slice if there are too many limits, with the
// limits and the keys they charge for key.
func (m *Multi) keys(key string, buf *[stackPairs]LimiterKey) []LimiterKey {
	ps := buf[:0]
	if len(m.limits) > stackPairs {
		ps = make([]LimiterKey, 0, len(m.limits))
	}
	for _, l := range m.limits {
		k := key
		if l.Shared {
			k = ""
		}
		ps = append(ps, LimiterKey{Limiter: l.Limiter, Key: k})
	}
	return ps
}

// Allow reports whether one event for key may happen now under every
// limit, and records it under every limit if so. It does not allocate for
// up to 8 in-memory limits. An error from an outside limiter counts as a
// denial; call AllowN to see it.
func (m *Multi) Allow(key string) bool {
	d, err := m.AllowN(context.Background(), key, 1)
	return err == nil && d.Allowed
}

// AllowN is AllowAll over the limits for key: n events under every limit,
// all or nothing, and the combined Decision.
func (m *Multi) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	var buf [stackPairs]LimiterKey
	var dbuf [stackPairs]Decision
	var bbuf [stackPairs]booking
	ps := m.keys(key, &buf)
	ds, bk := dbuf[:0], bbuf[:0]
	if len(ps) > stackPairs {
		ds, bk = make([]Decision, 0, len(ps)), make([]booking, 0, len(ps))
	}
	return allowAll(ctx, n, ps, ds[:len(ps)], bk[:len(ps)])
}

// Reserve is ReserveAll over the limits for key: it books n events only if
// they may happen now under every limit, and otherwise books nothing and
// returns a Reservation that is not OK, whose Delay says when to ask
// again. It never books ahead (see ReserveAll for why).
func (m *Multi) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	var buf [stackPairs]LimiterKey
	return ReserveAll(ctx, n, m.keys(key, &buf))
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (m *Multi) Wait(ctx context.Context, key string) error {
	return m.WaitN(ctx, key, 1)
}

// WaitN is WaitAll over the limits for key: it blocks until n events may
// happen under every limit at once and records them. See WaitAll for what
// it leaves behind when it fails.
func (m *Multi) WaitN(ctx context.Context, key string, n int) error {
	var buf [stackPairs]LimiterKey
	return waitAll(ctx, n, m.keys(key, &buf), m.clock)
}

// stackPairs is how many limits AllowAll handles without allocating.
const stackPairs = 8

// inMemory is what AllowAll needs from the limiters of this package: a
// booking at the limiter's own now with no wait, and an exact give-back.
// Every algorithm built on keyed has it; limiters from other packages
// cannot, as its methods are unexported.
type inMemory interface {
	Limit() int
	multiClock() Clock
	multiBook(key string, n int) (d Decision, b booked, ok bool)
	// multiUnbook gives back n events booked as b, as Cancel does: if
	// rollback, as of the booking instant; otherwise only if the limiter's
	// clock has not passed b.act.
	multiUnbook(key string, n int, b booked, rollback bool)
	multiPeek(key string) Decision
	// multiValidN checks n against the most key may ask for at once, its
	// override's limit if it has one, else the limiter's.
	multiValidN(key string, n int) error
	// latestOnly reports whether the limiter gives a booking back only
	// while it is the latest on its key (the token and leaky buckets).
	// AllowAll checks such pairs before it books them: a booking that a
	// concurrent one on the same key has followed could not be given back
	// on a denial.
	latestOnly() bool
	// multiCheck is the Decision multiBook would take now, booking nothing,
	// and that now, for multiBookAt. Only for a limiter that is
	// latestOnly, whose state is a plain value.
	multiCheck(key string, n int) (d Decision, now int64)
	// multiBookAt is multiBook at now, an instant multiCheck read.
	multiBookAt(key string, n int, now int64) (d Decision, b booked, ok bool)
	// observer is the limiter's observer, nil if it has none.
	observer() *observed
}

// booking records what allowAll booked under one pair.
type booking struct {
	mem      inMemory // nil for an outside limiter
	bk       booked
	booked   bool  // an in-memory booking to give back on a denial
	deferred bool  // checked on the first pass, to be booked once all allow
	checked  int64 // when it was checked
}

// validatePairs checks n and pairs before anything is booked, and notes
// which limiters are in memory.
func validatePairs(n int, pairs []LimiterKey, bk []booking) error {
	if n < 0 {
		return ErrNegativeN
	}
	for i := range pairs {
		l := pairs[i].Limiter
		if l == nil {
			return fmt.Errorf("%w: limit %d has no limiter", ErrInvalidOption, i)
		}
		m, _ := l.(inMemory)
		bk[i] = booking{mem: m}
		if m != nil {
			if err := m.multiValidN(pairs[i].Key, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// allowAll implements AllowAll; ds and bk have len(pairs).
//
// In-memory pairs are asked first, in order. Those that give back only
// their latest booking (latestOnly) are checked, not booked, on that first
// pass, and booked on a second pass once every in-memory pair has allowed;
// the last of them, if no other in-memory pair follows it, is booked at
// once, since nothing after it can deny. So a denial by an in-memory pair
// leaves nothing booked on such a pair, and a concurrent booking on its key
// cannot keep the give-back from being exact. Only a pair that allowed on
// the check and denies on the booking, a lost race, has such pairs to give
// back.
func allowAll(ctx context.Context, n int, pairs []LimiterKey, ds []Decision, bk []booking) (Decision, error) {
	if err := validatePairs(n, pairs, bk); err != nil {
		return Decision{}, err
	}
	last := -1 // the last in-memory pair
	for i := range pairs {
		if bk[i].mem != nil {
			last = i
		}
	}
	allowed := true
	deferred := false
	for i := range pairs {
		b := &bk[i]
		if b.mem == nil {
			continue
		}
		if n > 0 && b.mem.latestOnly() && (i != last || !allowed) {
			ds[i], b.checked = b.mem.multiCheck(pairs[i].Key, n)
			b.deferred = true
			deferred = true
			allowed = allowed && ds[i].Allowed
			continue
		}
		d, bkd, ok := b.mem.multiBook(pairs[i].Key, n)
		ds[i] = d
		b.bk, b.booked = bkd, ok && n > 0
		allowed = allowed && d.Allowed
	}
	if allowed && deferred {
		for i := range pairs {
			b := &bk[i]
			if !b.deferred {
				continue
			}
			d, bkd, ok := b.mem.multiBookAt(pairs[i].Key, n, b.checked)
			ds[i] = d
			b.bk, b.booked, b.deferred = bkd, ok, false
			if !d.Allowed { // lost a race since the check
				allowed = false
				break
			}
		}
	}
	for i := range pairs {
		if bk[i].mem != nil {
			continue
		}
		l, key := pairs[i].Limiter, pairs[i].Key
		var d Decision
		var err error
		if allowed {
			d, err = l.AllowN(ctx, key, n)
		} else if d, err = l.AllowN(ctx, key, 0); err == nil && d.Remaining < n {
			d, err = l.AllowN(ctx, key, n) // expected to deny: learn RetryAfter
		}
		if err != nil {
			giveBack(n, pairs, ds, bk)
			return Decision{}, err
		}
		ds[i] = d
		allowed = allowed && d.Allowed
	}
	if !allowed {
		giveBack(n, pairs, ds, bk)
	}
	if n > 0 {
		reportPairs(n, pairs, ds, bk)
	}
	return combine(ds), nil
}

// reportPairs hands each in-memory pair's own decision to that limiter's
// observer, if it has one.
func reportPairs(n int, pairs []LimiterKey, ds []Decision, bk []booking) {
	for i := range pairs {
		if m := bk[i].mem; m != nil {
			if o := m.observer(); o != nil {
				o.report(pairs[i].Key, n, ds[i], 0)
			}
		}
	}
}

// giveBack rolls back every in-memory booking and reads those pairs again,
// and those checked but not booked that would have allowed.
func giveBack(n int, pairs []LimiterKey, ds []Decision, bk []booking) {
	for i := range pairs {
		b := &bk[i]
		switch {
		case b.booked:
			b.mem.multiUnbook(pairs[i].Key, n, b.bk, true)
			b.booked = false
			ds[i] = b.mem.multiPeek(pairs[i].Key)
		case b.deferred && ds[i].Allowed:
			ds[i] = b.mem.multiPeek(pairs[i].Key)
		}
		b.deferred = false
	}
}

// combine returns the strictest decision with Allowed, RetryAfter and
// ResetAfter taken over all of ds.
func combine(ds []Decision) Decision {
	i := Strictest(ds)
	if i < 0 {
		return Decision{Allowed: true}
	}
	c := ds[i]
	for j := range ds {
		c.Allowed = c.Allowed && ds[j].Allowed
		c.RetryAfter = max(c.RetryAfter, ds[j].RetryAfter)
		c.ResetAfter = max(c.ResetAfter, ds[j].ResetAfter)
	}
	return c
}

// clockOfPairs returns the clock of the first in-memory limiter of pairs,
// or the system clock.
func clockOfPairs(pairs []LimiterKey) Clock {
	for _, p := range pairs {
		if m, ok := p.Limiter.(inMemory); ok {
			return m.multiClock()
		}
	}
	return SystemClock()
}

func waitAll(ctx context.Context, n int, pairs []LimiterKey, clock Clock) error {
	var bbuf [stackPairs]booking
	bk := bbuf[:0]
	if len(pairs) > stackPairs {
		bk = make([]booking, 0, len(pairs))
	}
	if err := validatePairs(n, pairs, bk[:len(pairs)]); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	for {
		d, err := AllowAll(ctx, n, pairs)
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		delay := max(d.RetryAfter, time.Nanosecond) // a denial always waits
		// A deadline is an instant of real time, as for WaitN: what is
		// left of it is measured by the time package, whatever the clock.
		if dl, ok := ctx.Deadline(); ok && delay > time.Until(dl) {
			return &LimitError{RetryAfter: d.RetryAfter, Deadline: true}
		}
		t := clock.NewTimer(delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// Compile-time check that a Multi is a Limiter.
var _ Limiter = (*Multi)(nil)
