package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Shadow is a limit tried without being enforced, for rolling a new limit
// out: it decides every request as its limiter would and books what that
// limiter would book, so its numbers are the ones enforcement would
// produce, but it never denies, never blocks and never fails on valid
// input. What enforcement would have done goes to its observer (see
// WithObserver) as events with Shadow true; a would-deny has Allowed
// false. Counter counts would-denies apart from denials.
//
// A Shadow is a Limiter, so it goes wherever one does: alone, as a part of
// a Multi or as a rule's limiter (ParseRules's "shadow" keyword builds one).
// Its Decision never restricts: Allowed, with Limit and Remaining the
// largest int and no RetryAfter, so that it is never the strictest of a
// Multi and headers never quote it; the httplimit middlewares write no
// rate-limit headers for a Shadow alone. In a Multi or Rules it is asked
// only once the enforced limits have allowed (as a limiter from outside
// this package is, see AllowAll), so it books only what an enforced limit
// in its place would have kept.
//
// Give the observer to the Shadow: the limiter inside it reports its own
// decisions as enforced ones if it has an observer of its own.
//
// Build it with NewShadow. It is safe for concurrent use if its limiter
// is. Allow does not allocate beyond what its limiter's AllowN does.
type Shadow struct {
	lim  Limiter
	obs  Observer
	name string
}

// NewShadow returns lim in shadow mode. It reads two options, WithName and
// WithObserver; any other returns an error matching ErrInvalidOption, as
// does a nil lim (a shadow of nothing would silently observe nothing).
func NewShadow(lim Limiter, opts ...Option) (*Shadow, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: a shadow needs a limiter", ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.clock != SystemClock() || c.shards != defaultShards || c.maxKeys != 0 || c.sweepInterval != 0 {
		return nil, fmt.Errorf("%w: a shadow takes only WithName and WithObserver; give the other options to its limiter", ErrInvalidOption)
	}
	return &Shadow{lim: lim, obs: bind(c.observer, c.name), name: c.name}, nil
}

// Limiter returns the limiter the shadow runs.
func (s *Shadow) Limiter() Limiter { return s.lim }

// shadowDecision is what a Shadow answers: allowed, bounding nothing.
var shadowDecision = Decision{Allowed: true, Limit: maxInt, Remaining: maxInt}

func (s *Shadow) report(key string, n int, d Decision, waited time.Duration, fallback bool) {
	if s.obs == nil {
		return
	}
	s.obs.Observe(Event{
		Limiter: s.name, Key: key, N: n, Allowed: d.Allowed, Shadow: true,
		Remaining: d.Remaining, RetryAfter: d.RetryAfter, Waited: waited, Fallback: fallback,
	})
}

// decide runs n events through the limiter and reports what it decided.
// An n the limiter could never allow is a would-deny; any other error (a
// backend that failed) is reported as a fallback and let through.
func (s *Shadow) decide(ctx context.Context, key string, n int) error {
	d, err := s.lim.AllowN(ctx, key, n)
	switch {
	case err == nil:
	case errors.Is(err, ErrNegativeN):
		return err
	case errors.Is(err, ErrExceedsLimit):
		d = Decision{}
	default:
		d = Decision{Allowed: true}
		if n > 0 {
			s.report(key, n, d, 0, true)
		}
		return nil
	}
	if n > 0 {
		s.report(key, n, d, 0, false)
	}
	return nil
}

// Allow decides one event as the limiter would, records it as the limiter
// would, reports the decision and returns true.
func (s *Shadow) Allow(key string) bool {
	s.decide(context.Background(), key, 1)
	return true
}

// AllowN decides n events as the limiter would and reports the decision;
// it returns the shadow's Decision, which allows. n < 0 returns
// ErrNegativeN; n == 0 peeks at the limiter and reports nothing.
func (s *Shadow) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := s.decide(ctx, key, n); err != nil {
		return Decision{}, err
	}
	return shadowDecision, nil
}

// Reserve books n events on the limiter as its Reserve would and reports
// the booking (Waited is the delay it would have imposed), then returns a
// reservation due now. Cancelling it cancels the limiter's booking. n < 0
// returns ErrNegativeN.
func (s *Shadow) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	r, err := s.book(ctx, key, n)
	if err != nil {
		return nil, err
	}
	clock := clockOfPairs([]LimiterKey{{Limiter: s.lim}})
	var cancel func(time.Time)
	if r != nil {
		cancel = r.cancelAt
	}
	return NewReservation(clock, true, shadowDecision, clock.Now(), cancel), nil
}

// book reserves n events on the limiter and reports what enforcement would
// have done; r is nil when nothing was booked.
func (s *Shadow) book(ctx context.Context, key string, n int) (*Reservation, error) {
	if n < 0 {
		return nil, ErrNegativeN
	}
	r, err := s.lim.Reserve(ctx, key, n)
	switch {
	case err == nil:
	case errors.Is(err, ErrNegativeN):
		return nil, err
	case errors.Is(err, ErrExceedsLimit):
		s.report(key, n, Decision{}, 0, false)
		return nil, nil
	default:
		s.report(key, n, Decision{Allowed: true}, 0, true)
		return nil, nil
	}
	if n == 0 {
		return nil, nil
	}
	d := r.Decision()
	d.Allowed = r.OK()
	delay := time.Duration(0)
	if r.OK() {
		delay = d.RetryAfter
	}
	s.report(key, n, d, delay, false)
	if !r.OK() {
		return nil, nil
	}
	return r, nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (s *Shadow) Wait(ctx context.Context, key string) error { return s.WaitN(ctx, key, 1) }

// WaitN books n events on the limiter as its WaitN would, without
// waiting: it reports the wait enforcement would have imposed (Waited), or
// a would-deny if that wait would pass ctx's deadline (the booking is then
// given back, as WaitN would not have made it), and returns nil at once.
// n < 0 returns ErrNegativeN.
func (s *Shadow) WaitN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return ErrNegativeN
	}
	r, err := s.lim.Reserve(ctx, key, n)
	switch {
	case err == nil:
	case errors.Is(err, ErrNegativeN):
		return err
	case errors.Is(err, ErrExceedsLimit):
		s.report(key, n, Decision{}, 0, false)
		return nil
	default:
		s.report(key, n, Decision{Allowed: true}, 0, true)
		return nil
	}
	if n == 0 {
		return nil
	}
	d := r.Decision()
	delay := r.Delay()
	d.Allowed = r.OK()
	if dl, ok := ctx.Deadline(); ok && r.OK() && delay > time.Until(dl) {
		r.Cancel()
		d.Allowed = false
	}
	if d.Allowed {
		s.report(key, n, d, delay, false)
	} else {
		s.report(key, n, d, 0, false)
	}
	return nil
}

var _ Limiter = (*Shadow)(nil)
