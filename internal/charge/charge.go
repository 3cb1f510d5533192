// Package charge books a request's cost under the limits that apply to
// it, as reservations its handler can settle at the actual cost once the
// work is done: the part of the httplimit and grpclimit middleware that
// WithCost and Settle share.
//
// Its rules, which Take and Charge keep:
//
//  1. All or nothing: a request is allowed only if every enforced limit
//     allowed its n events; then every limit holds one booking of n, and
//     the request's Charge holds them all.
//  2. A denied request keeps no booking: what was booked before the
//     denial is undone, latest first, by settling it at 0, so each is
//     given back as a key's latest booking is, even once its time to act
//     has passed (nothing acted). With more than
//     one enforced limit, each is peeked at before anything is booked, so
//     that a limit short of room denies before the others book: only a
//     race lost between the peek and the booking leaves bookings to
//     undo, and a concurrent booking on the same key can then keep a
//     bucket's give-back from being whole (the bound still holds: the
//     limiter counts more, never less).
//  3. Shadow limits (ratelimit.Shadow) are charged last, with AllowN,
//     only once every enforced limit allowed, as ratelimit.AllowAll asks
//     them. A Shadow cannot settle: its charge stays as made.
//  4. A booking is settled at most once: Charge.Settle settles every
//     booking of the request at the one actual cost, and a second Settle
//     gets the reservations' ratelimit.ErrSettled. A request never
//     settled keeps its charge.
//  5. The headers are the middleware's: Charge calls its show function,
//     under the Charge's lock, only before Done, so that nothing writes
//     them once the handler has returned.
//  6. One event per limit and request, as ratelimit.AllowAll reports: the
//     peeks, probes and give-backs that Take makes on an in-memory
//     limiter report nothing; once the request is decided, each enforced
//     limit reports its own final decision of n (Allowed saying whether
//     that limit allowed, whatever the others said), through its own
//     observer, once. A failed Take reports nothing. A shadow reports its
//     own charge, made only on an allowed request. A limiter that is not
//     one of ratelimit's in-memory limiters (the Redis backend, or a
//     user's own) reports what its own calls report.
package charge

import (
	"context"
	"errors"
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/deferred"
)

// Limit is one limit a request is charged under: a limiter that can
// book, or a shadow, and the request's key on it.
type Limit struct {
	Taker ratelimit.Taker
	// Shadow, if not nil instead of Taker, is a ratelimit.Shadow: it never
	// restricts and cannot settle, so it is charged with AllowN, last, and
	// its charge is not settled.
	Shadow ratelimit.Limiter
	Key    string
}

func (l *Limit) shadow() bool { return l.Shadow != nil }

// Take books n > 0 events under every limit, all or nothing, and reports
// them (rules 1 to 3 and 6). ds and res have len(limits): ds[i] is limit i's decision (as
// booked if allowed; as the limit stands, or its denial, if not), and, if
// allowed, res[i] its booking (nil for a shadow). On a denial or an error
// every res[i] is nil; an error is the first a limiter returned, after the
// give-back.
func Take(ctx context.Context, n int, limits []Limit, ds []ratelimit.Decision, res []*ratelimit.Reservation) (allowed bool, err error) {
	slots := make([]deferred.Slot[ratelimit.Decision], len(limits))
	ctxs := make([]context.Context, len(limits))
	enforced := 0
	for i := range limits {
		ctxs[i] = ctx
		if !limits[i].shadow() {
			enforced++
			ctxs[i] = deferred.With(ctx, &slots[i])
		}
	}
	defer func() {
		if err == nil {
			for i := range slots {
				slots[i].Report(n, ds[i])
			}
		}
	}()
	if enforced > 1 {
		if denied, err := probe(ctxs, n, limits, ds, -1); err != nil || denied {
			return false, err
		}
	}
	for _, shadows := range [2]bool{false, true} {
		for i := range limits {
			l := &limits[i]
			if l.shadow() != shadows {
				continue
			}
			if shadows {
				d, err := l.Shadow.AllowN(ctx, l.Key, n)
				if err != nil {
					cancelAll(limits, res)
					return false, err
				}
				ds[i] = d
				continue
			}
			r, err := l.Taker.Take(ctxs[i], l.Key, n)
			if err != nil {
				cancelAll(limits, res)
				return false, err
			}
			ds[i] = r.Decision()
			if !r.OK() {
				cancelAll(limits, res)
				if _, err := probe(ctxs, n, limits, ds, i); err != nil {
					return false, err
				}
				return false, nil
			}
			res[i] = r
		}
	}
	return true, nil
}

// probe fills ds with what each limit but skip says about n events,
// booking nothing it keeps: a peek, and, for an enforced limit whose peek
// shows less than n, a booking of n, to learn its RetryAfter if it
// denies, cancelled at once if it allows (the state moved since the
// peek). It reports whether an enforced limit denied. Limit i is asked
// with ctxs[i].
func probe(ctxs []context.Context, n int, limits []Limit, ds []ratelimit.Decision, skip int) (denied bool, err error) {
	for i := range limits {
		if i == skip {
			continue
		}
		l := &limits[i]
		ctx := ctxs[i]
		d, err := peek(ctx, l)
		if err != nil {
			return false, err
		}
		ds[i] = d
		if l.shadow() || d.Remaining >= n {
			continue
		}
		r, err := l.Taker.Take(ctx, l.Key, n)
		if err != nil {
			return false, err
		}
		if !r.OK() {
			ds[i] = r.Decision()
			denied = true
			continue
		}
		giveBack(r) // the latest booking on the key: given back whole
		if ds[i], err = peek(ctx, l); err != nil {
			return false, err
		}
	}
	return denied, nil
}

func peek(ctx context.Context, l *Limit) (ratelimit.Decision, error) {
	if l.shadow() {
		return l.Shadow.AllowN(ctx, l.Key, 0)
	}
	r, err := l.Taker.Take(ctx, l.Key, 0)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return r.Decision(), nil
}

// cancelAll cancels every booking in res, latest first, and clears res.
func cancelAll(limits []Limit, res []*ratelimit.Reservation) {
	for i := len(limits) - 1; i >= 0; i-- {
		if res[i] != nil {
			giveBack(res[i])
			res[i] = nil
		}
	}
}

// giveBack undoes a booking whose events never acted. It settles it at 0
// rather than cancelling it: Cancel gives nothing back once the time to
// act has passed, and on a real clock it has by the time the booking is
// undone, though nothing acted. A reservation that cannot settle is
// cancelled.
func giveBack(r *ratelimit.Reservation) {
	if _, err := r.Settle(0); errors.Is(err, ratelimit.ErrCannotSettle) {
		r.Cancel()
	}
}

// Combine returns the decision a request's limits make together, as
// ratelimit.MultiDecision's Decision: the strictest one's Limit and
// Remaining, Allowed only if all allowed, the largest RetryAfter and
// ResetAfter. With no decisions it is {Allowed: true}.
func Combine(ds []ratelimit.Decision) ratelimit.Decision {
	i := ratelimit.Strictest(ds)
	if i < 0 {
		return ratelimit.Decision{Allowed: true}
	}
	c := ds[i]
	for _, d := range ds {
		c.Allowed = c.Allowed && d.Allowed
		c.RetryAfter = max(c.RetryAfter, d.RetryAfter)
		c.ResetAfter = max(c.ResetAfter, d.ResetAfter)
	}
	return c
}

// Charge is one request's bookings, kept in its context for the handler
// to settle. It is safe for concurrent use.
type Charge struct {
	mu   sync.Mutex
	res  []*ratelimit.Reservation // res[i]: limit i's booking
	ds   []ratelimit.Decision     // ds[i]: limit i's decision, as last booked or settled
	show func(ds []ratelimit.Decision)
	why  string // not "": nothing to settle, and why
	done bool
}

// New returns the Charge of bookings res, whose decisions are ds; show,
// if not nil, writes the headers for decisions, before Done. New keeps
// res and ds.
func New(res []*ratelimit.Reservation, ds []ratelimit.Decision, show func(ds []ratelimit.Decision)) *Charge {
	return &Charge{res: res, ds: ds, show: show}
}

// Unsettled returns the Charge of a request that has nothing to settle:
// Settle returns an error that matches ratelimit.ErrCannotSettle with
// the text why.
func Unsettled(why string) *Charge { return &Charge{why: why} }

// CannotSettle is the error of a Settle that has nothing to settle, with
// the text it was made with; it matches ratelimit.ErrCannotSettle.
type CannotSettle string

func (e CannotSettle) Error() string { return string(e) }

// Is matches ratelimit.ErrCannotSettle.
func (e CannotSettle) Is(target error) bool { return target == ratelimit.ErrCannotSettle }

// Settle settles every booking at actual (rule 4) and, before Done, shows
// the decisions the settlements return. It returns the first error: a
// Charge with nothing to settle, actual < 0 (ratelimit.ErrNegativeN,
// nothing settled), or a reservation's (ratelimit.ErrSettled the second
// time); the bookings that could be settled are, and shown.
func (c *Charge) Settle(actual int) error {
	if c.why != "" {
		return CannotSettle(c.why)
	}
	if actual < 0 {
		return ratelimit.ErrNegativeN
	}
	type result struct {
		d  ratelimit.Decision
		ok bool
	}
	var buf [8]result
	got := buf[:0]
	if len(c.res) > len(buf) {
		got = make([]result, 0, len(c.res))
	}
	var first error
	settled := 0
	for _, r := range c.res {
		if r == nil { // a shadow's charge: not settled
			got = append(got, result{})
			continue
		}
		d, err := r.Settle(actual)
		if err != nil {
			if first == nil {
				first = err
			}
			got = append(got, result{})
			continue
		}
		got = append(got, result{d, true})
		settled++
	}
	if settled == 0 {
		return first
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, g := range got {
		if g.ok {
			c.ds[i] = g.d
		}
	}
	if !c.done && c.show != nil {
		c.show(c.ds)
	}
	return first
}

// Done ends the Charge's hold on the headers: the handler has returned.
// Settle still settles.
func (c *Charge) Done() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}
