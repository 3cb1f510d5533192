package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// Pair is one limit on a request: a limiter and the key charged on it, such
// as {perUser, "alice"}, {perIP, "192.0.2.1"} or {global, ""}.
type Pair struct {
	Limiter Limiter
	Key     string
}

// AllowAll reports whether n events may happen now under every pair, as one
// decision, all or nothing, and records them under every pair if so. If any
// pair denies, nothing is recorded anywhere: what the others booked is given
// back, so a denied request consumes nothing. n == 0 peeks at every pair.
//
// Every pair is asked, even after one has denied, so that the Decision's
// RetryAfter covers them all: retrying after it succeeds if nothing else
// consumed in between. The Decision is that of the pair chosen by
// Strictest (its Limit and Remaining), with Allowed true only if every pair
// allowed, RetryAfter the largest of the pairs' and ResetAfter the largest
// of the pairs'. With no pairs it is Decision{Allowed: true}.
//
// If ds is at least as long as pairs, ds[i] receives pair i's own decision:
// as booked if the request was allowed; as the pair stands after the
// give-back if it was denied. Otherwise ds is not touched. AllowAll does not
// allocate for up to 8 pairs of in-memory limiters.
//
// The limiters of this package are booked at their own clock's now, and
// nothing they booked survives a denial. TokenBucket and LeakyBucket, which
// can give a booking back only while it is the latest on its key, are
// first checked without booking and booked once every in-memory pair has
// allowed, so that a denial has nothing to give back there, whatever
// others book on the same keys meanwhile; the others are booked and, on a
// denial, given back exactly, as of the instant they were booked, even if
// their clock has moved on since. (A pair that allowed on the check and
// denies when booked, having lost a race for the key's last room, has the
// buckets booked before it given back as Cancel would: exactly unless a
// concurrent booking followed them on their key.) A limiter from outside this package
// (the Redis backend, your own) offers no such give-back: its Reservation's
// Cancel returns only what is not yet due, and an allowed event is due at
// once. So AllowAll asks such limiters last, with AllowN, and only once
// every in-memory pair has allowed; after a denial it only peeks at them
// (AllowN with n == 0), booking nothing unless the peek shows room (it then
// asks for n to learn the exact RetryAfter, which books only if the key
// gained room in between). What a denial cannot give back is therefore
// limited to outside limiters asked before the outside limiter that denied:
// with at most one outside limiter among the pairs, a denied request
// consumes nothing anywhere.
//
// Errors: n < 0 returns ErrNegativeN and n larger than an in-memory pair's
// limit ErrExceedsLimit, both before anything is booked; a pair without a
// limiter returns an error matching ErrInvalidOption. An error from an
// outside limiter is returned as is, after the in-memory bookings are given
// back.
func AllowAll(ctx context.Context, n int, pairs []Pair, ds []Decision) (Decision, error) {
	var dbuf [stackPairs]Decision
	var bbuf [stackPairs]booking
	if len(ds) < len(pairs) {
		ds = dbuf[:0]
		if len(pairs) > stackPairs {
			ds = make([]Decision, 0, len(pairs))
		}
	}
	bk := bbuf[:0]
	if len(pairs) > stackPairs {
		bk = make([]booking, 0, len(pairs))
	}
	return allowAll(ctx, n, pairs, ds[:len(pairs)], bk[:len(pairs)])
}

// WaitAll blocks until n events may happen under every pair at once, then
// records them under every pair; nothing is booked while it waits.
//
// It is a loop of AllowAll: when denied it sleeps for the Decision's
// RetryAfter on the clock of the first in-memory limiter among the pairs
// (the system clock if there is none) and asks again. It is not FIFO: a
// caller of AllowAll may take the room first, and WaitAll then waits again.
//
// Failures leave nothing booked: invalid n or pairs return AllowAll's
// errors; a ctx already done returns ctx.Err(); if the needed delay would
// pass ctx's deadline (time left measured in real time, as for WaitN) it
// fails at once with a *LimitError matching both ErrLimited and
// context.DeadlineExceeded; if ctx ends during a sleep it returns
// ctx.Err().
func WaitAll(ctx context.Context, n int, pairs []Pair) error {
	return waitAll(ctx, n, pairs, clockOfPairs(pairs))
}

// ReserveAll books n events under every pair if they may happen now, all
// or nothing, as AllowAll does, and returns the booking.
//
// Unlike a single limiter's Reserve, it never books ahead. A slot booked
// ahead on one limiter while another holds the request back would count
// the events at the wrong instant on the first: a token bucket that booked
// at t0 for events sent at t1 would see its bucket refilled by t1 and allow
// a second burst on top of them. So when the events do not conform now
// under every pair, nothing is booked, the Reservation is not OK, and its
// Delay is the RetryAfter of AllowAll: when to ask again. Cancel of an OK
// reservation gives back, at each in-memory pair, what Reservation.Cancel
// would on that limiter's clock (nothing once its clock has moved past the
// booking, and on a token or leaky bucket nothing if a later booking on the
// key is held); it cannot give back at outside limiters.
func ReserveAll(ctx context.Context, n int, pairs []Pair) (*Reservation, error) {
	ps := append([]Pair(nil), pairs...) // the cancel func outlives the caller's slice
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
// parts charge the caller's key, global parts one key shared by every
// caller. For example a Multi of a per-IP token bucket and a global one
// allows a request only if both do, and a request denied by the global
// bucket consumes nothing from the per-IP one. See AllowAll for the exact
// semantics, including those of limiters from outside this package, and
// ReserveAll for why Reserve never books ahead.
//
// Build it with NewMulti. It is safe for concurrent use if its limiters are.
// Most callers want Allow or AllowN.
type Multi struct {
	parts []Part
	clock Clock // Wait's timers: the first in-memory part's clock
}

// Part is one limit of a Multi.
type Part struct {
	// Limiter enforces the limit.
	Limiter Limiter
	// Global charges every caller's events to the one key "" on Limiter, a
	// limit shared by all; otherwise the caller's key is charged.
	Global bool
}

// NewMulti returns the limits of parts checked as one, in the order given
// (in-memory limiters before outside ones; see AllowAll). It returns an
// error matching ErrInvalidOption if there are no parts or a part has no
// limiter.
func NewMulti(parts ...Part) (*Multi, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: a Multi needs at least one part", ErrInvalidOption)
	}
	ps := make([]Pair, len(parts))
	for i, p := range parts {
		if p.Limiter == nil {
			return nil, fmt.Errorf("%w: part %d has no limiter", ErrInvalidOption, i)
		}
		ps[i].Limiter = p.Limiter
	}
	return &Multi{parts: append([]Part(nil), parts...), clock: clockOfPairs(ps)}, nil
}

// pairs fills buf, or a new slice if there are too many parts, with the
// pairs for key.
func (m *Multi) pairs(key string, buf *[stackPairs]Pair) []Pair {
	ps := buf[:0]
	if len(m.parts) > stackPairs {
		ps = make([]Pair, 0, len(m.parts))
	}
	for _, p := range m.parts {
		k := key
		if p.Global {
			k = ""
		}
		ps = append(ps, Pair{Limiter: p.Limiter, Key: k})
	}
	return ps
}

// Allow reports whether one event for key may happen now under every part,
// and records it under every part if so. It does not allocate for up to 8
// in-memory parts. An error from an outside limiter counts as a denial;
// call AllowN to see it.
func (m *Multi) Allow(key string) bool {
	d, err := m.AllowN(context.Background(), key, 1)
	return err == nil && d.Allowed
}

// AllowN is AllowAll over the parts' pairs for key: n events under every
// part, all or nothing, and the strictest Decision.
func (m *Multi) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	var buf [stackPairs]Pair
	return AllowAll(ctx, n, m.pairs(key, &buf), nil)
}

// Reserve is ReserveAll over the parts' pairs for key: it books n events
// only if they may happen now under every part, and never books ahead.
// This departs from Limiter's Reserve, which books at the earliest time the
// events conform; ReserveAll says why.
func (m *Multi) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	var buf [stackPairs]Pair
	return ReserveAll(ctx, n, m.pairs(key, &buf))
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (m *Multi) Wait(ctx context.Context, key string) error {
	return m.WaitN(ctx, key, 1)
}

// WaitN is WaitAll over the parts' pairs for key: it blocks until n events
// may happen under every part at once and records them. See WaitAll for
// what it leaves behind when it fails.
func (m *Multi) WaitN(ctx context.Context, key string, n int) error {
	var buf [stackPairs]Pair
	return waitAll(ctx, n, m.pairs(key, &buf), m.clock)
}

// stackPairs is how many pairs AllowAll handles without allocating.
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

func (k *keyed[S, A]) observer() *observed { return k.obs }

func (k *keyed[S, A]) multiClock() Clock { return k.nc.clock }

func (k *keyed[S, A]) multiBook(key string, n int) (Decision, booked, bool) {
	return k.book(key, n, k.nc.now(), 0)
}

func (k *keyed[S, A]) multiUnbook(key string, n int, b booked, rollback bool) {
	at := b.act
	if !rollback {
		at = k.nc.now()
	}
	k.unbook(key, n, b, at)
}

func (k *keyed[S, A]) multiPeek(key string) Decision {
	d, _, _ := k.book(key, 0, k.nc.now(), 0)
	return d
}

func (k *keyed[S, A]) latestOnly() bool {
	switch any(k.alg).(type) {
	case *tbAlgo, *lbAlgo:
		return true
	}
	return false
}

func (k *keyed[S, A]) multiCheck(key string, n int) (Decision, int64) {
	now := k.nc.now()
	h, s, _ := k.st.lock(key, now, false)
	saved := *s // a plain value (see latestOnly): restoring it unbooks
	d, _, _ := k.alg.step(s, now, int64(n), 0)
	*s = saved
	h.unlock()
	return d, now
}

// multiBookAt saves the second clock read of a pair that was checked:
// the booking follows the check by the time the other pairs take.
func (k *keyed[S, A]) multiBookAt(key string, n int, now int64) (Decision, booked, bool) {
	return k.book(key, n, now, 0)
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
func validatePairs(n int, pairs []Pair, bk []booking) error {
	if n < 0 {
		return ErrNegativeN
	}
	for i := range pairs {
		l := pairs[i].Limiter
		if l == nil {
			return fmt.Errorf("%w: pair %d has no limiter", ErrInvalidOption, i)
		}
		m, _ := l.(inMemory)
		bk[i] = booking{mem: m}
		if m != nil && n > m.Limit() {
			return ErrExceedsLimit
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
func allowAll(ctx context.Context, n int, pairs []Pair, ds []Decision, bk []booking) (Decision, error) {
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
func reportPairs(n int, pairs []Pair, ds []Decision, bk []booking) {
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
func giveBack(n int, pairs []Pair, ds []Decision, bk []booking) {
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
func clockOfPairs(pairs []Pair) Clock {
	for _, p := range pairs {
		if m, ok := p.Limiter.(inMemory); ok {
			return m.multiClock()
		}
	}
	return SystemClock()
}

func waitAll(ctx context.Context, n int, pairs []Pair, clock Clock) error {
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
		d, err := AllowAll(ctx, n, pairs, nil)
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
