// Package ratelimit limits how often events may happen, per key.
//
// Five algorithms implement one Limiter interface: TokenBucket,
// LeakyBucket, FixedWindow, SlidingLog and SlidingWindowCounter; LeakyMeter
// is the leaky bucket read as a meter, the token bucket's function under
// the name of a level that leaks. Each keeps
// a small state per key (an IP, a user id, "POST /posts", or "" for one
// global bucket) in a sharded in-memory store that drops keys at rest and
// can be capped. Time comes from a Clock, kept in integer nanoseconds.
//
// Most callers want Allow(key) on every request:
//
//	lim, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20)
//	...
//	if !lim.Allow(clientIP) {
//		http.Error(w, "too many requests", http.StatusTooManyRequests)
//		return
//	}
//
// Bulkhead, a separate type, limits calls in flight rather than calls per
// period.
package ratelimit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Limiter is the contract every algorithm implements, in memory and on
// Redis. Keys are opaque strings; "" is a valid key (one global bucket).
//
// n counts events. n < 0 returns ErrNegativeN. An n that the limiter could
// never allow at once (more than its capacity or per-window limit) returns
// ErrExceedsLimit at once, never a hang. The in-memory limiters never fail
// on valid input; a remote backend may also return its own errors.
type Limiter interface {
	// Allow reports whether one event for key may happen now, and records
	// it if so. It is the per-request call: it never blocks and, for the
	// in-memory limiters, never allocates for an existing key.
	Allow(key string) bool

	// AllowN reports whether n events for key may happen now, all or
	// nothing, and records them if so. The Decision says why and when to
	// retry. n == 0 is a peek: the key's Decision as it stands, with
	// Allowed true and nothing consumed.
	AllowN(ctx context.Context, key string, n int) (Decision, error)

	// Reserve books n events for key at the earliest time they conform
	// and returns the booking. The caller waits Reservation.Delay before
	// acting, or calls Cancel to give back what it can (see
	// Reservation.Cancel). ctx bounds the call
	// itself (a round trip to a backend), not the delay. A booking that
	// cannot be made (a full queue, or more than 36 years ahead) is returned
	// with OK false, having booked nothing. A composite of several limiters
	// (Multi) may refuse to book ahead: it books only events that conform
	// now, and otherwise returns OK false, having booked nothing, with a
	// Delay that says when to ask again.
	Reserve(ctx context.Context, key string, n int) (*Reservation, error)

	// Wait is shorthand for WaitN(ctx, key, 1).
	Wait(ctx context.Context, key string) error

	// WaitN blocks until n events for key may happen, and records them.
	// If ctx is already done it returns ctx.Err() and consumes nothing. If
	// the needed delay would pass ctx's deadline it fails at once, consuming
	// nothing, with an error matching both ErrLimited and
	// context.DeadlineExceeded. (A deadline is an instant of real time: the
	// time left before it is measured by the time package, whatever the
	// limiter's Clock.) If ctx ends during the wait the booking is
	// cancelled, giving back what Reservation.Cancel does, and ctx.Err()
	// returned.
	WaitN(ctx context.Context, key string, n int) error
}

// Decision is the outcome of AllowN, with what a caller needs to write the
// HTTP rate-limit headers.
//
// For example, a token bucket of capacity 4 refilled at 2 per second, asked
// for 1 event when it holds 0.5 tokens, answers
// {Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 250ms, ResetAfter: 1.75s}.
type Decision struct {
	// Allowed reports whether the events were allowed (and recorded).
	Allowed bool
	// Limit is the most events the key can ever have allowed at once: the
	// bucket's capacity or the window's limit.
	Limit int
	// Remaining is how many more events could be allowed right now, after
	// this decision. It is never negative.
	Remaining int
	// RetryAfter is how long until the same request could be allowed: zero
	// when allowed. Retrying at exactly that time succeeds if nothing else
	// consumed in between.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full allowance
	// (at rest) if nothing more is consumed.
	ResetAfter time.Duration
}

// Errors returned by limiters. Test for them with errors.Is; the text is
// part of the API and will not change.
var (
	// ErrLimited means the events were not allowed now (or not within the
	// wait the caller could afford).
	ErrLimited = errors.New("ratelimit: rate limited")
	// ErrExceedsLimit means n is more than the limiter can ever allow at once.
	ErrExceedsLimit = errors.New("ratelimit: n exceeds the limit")
	// ErrNegativeN means n < 0.
	ErrNegativeN = errors.New("ratelimit: n is negative")
	// ErrInvalidRate means a rate's count or period is not positive, a
	// rate string could not be parsed, or a rate does not fit the
	// algorithm (a window longer than about 36.5 years, a limit too large
	// for an int or for a sliding log).
	ErrInvalidRate = errors.New("ratelimit: invalid rate")
	// ErrInvalidCapacity means a capacity or limit is not positive, or is
	// too large to represent: a bucket that would take more than about
	// 36.5 years to refill at its rate.
	ErrInvalidCapacity = errors.New("ratelimit: invalid capacity")
	// ErrInvalidOption means an option's value is out of range.
	ErrInvalidOption = errors.New("ratelimit: invalid option")
)

// LimitError is the error of a wait refused at once because the events
// could not conform in time. It matches ErrLimited with errors.Is, and also
// context.DeadlineExceeded when the refusal was because of the context's
// deadline.
type LimitError struct {
	// RetryAfter is how long until the events could conform, from the time
	// of the refusal; zero if unknown.
	RetryAfter time.Duration
	// Deadline reports whether the context's deadline caused the refusal.
	Deadline bool
}

func (e *LimitError) Error() string {
	if e.Deadline {
		return "ratelimit: wait of " + readable(int64(e.RetryAfter)) + " would exceed the context deadline"
	}
	return "ratelimit: rate limited, retry after " + readable(int64(e.RetryAfter))
}

// Is makes errors.Is match ErrLimited, and context.DeadlineExceeded when
// the deadline caused the refusal.
func (e *LimitError) Is(target error) bool {
	return target == ErrLimited || (e.Deadline && target == context.DeadlineExceeded)
}

// Reservation is a booking of n events made by Reserve. The events may
// happen after Delay; Cancel gives back what it can of a booking not yet
// due.
//
// A Reservation whose OK is false booked nothing. Methods are safe for
// concurrent use; Cancel acts at most once.
type Reservation struct {
	ok       bool
	decision Decision
	act      time.Time // when the events conform
	clock    Clock
	line     *nanoClock // the in-memory limiter's time line; nil if from NewReservation
	actNs    int64      // act on line
	cancel   func(at time.Time)
	settle   SettleFunc  // nil if the limiter cannot settle
	done     atomic.Bool // Cancel or Settle has acted
}

// NewReservation builds a Reservation. It is for Limiter implementations
// outside this package (such as the Redis backend); callers of a limiter
// get theirs from Reserve.
//
// act is the time the booked events conform, read on clock. cancel, if not
// nil, is called at most once by Cancel with the clock's time, and must
// give back no more than Cancel's contract allows at that time; it must
// not block.
func NewReservation(clock Clock, ok bool, d Decision, act time.Time, cancel func(at time.Time)) *Reservation {
	if clock == nil {
		clock = systemClock{}
	}
	return &Reservation{ok: ok, decision: d, act: act, clock: clock, cancel: cancel}
}

// OK reports whether the events were booked. A reservation that is not OK
// (a full leaky-bucket queue, a wait longer than allowed) booked nothing.
func (r *Reservation) OK() bool { return r.ok }

// Decision returns the decision taken when the reservation was made.
// Allowed reports whether the events conformed at once (no delay), which
// is narrower than OK; RetryAfter is the delay booked or, if not OK, how
// long until a booking could be made.
func (r *Reservation) Decision() Decision { return r.decision }

// TimeToAct returns when the booked events conform, on the limiter's clock.
// The in-memory limiters see their clock within the years 1970 to 2116 (see
// Clock); a clock reading outside acts as the nearest end of that range, so
// for a clock before 1970 the time to act is 1970 or later.
func (r *Reservation) TimeToAct() time.Time { return r.act }

// Delay returns how long from now, on the limiter's clock, until the
// booked events conform; zero if that time has come. For a reservation
// that is not OK it returns the decision's RetryAfter. Right after Reserve
// it is the decision's RetryAfter, whatever the clock reads.
func (r *Reservation) Delay() time.Duration {
	return r.DelayFrom(r.clock.Now())
}

// DelayFrom is like Delay, measured from t. For the in-memory limiters t
// is read as the limiter reads its clock, clamped to the years 1970 to 2116.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.ok {
		return r.decision.RetryAfter
	}
	if r.line != nil {
		return durationNs(r.actNs - r.line.nanosOf(t))
	}
	if d := r.act.Sub(t); d > 0 {
		return d
	}
	return 0
}

// Cancel gives back what it can of the booking, so that later requests may
// use it, and never more than would let the limiter pass more events than
// its bound. Once the time to act has passed (on the limiter's clock) it
// gives back nothing: the events have acted. Before that, what comes back
// depends on the algorithm and on what was booked after this booking on
// the same key; each algorithm's doc says exactly. In short: the latest
// booking on a key is always given back whole, as if never made, so
// cancelling bookings latest first gives every one back. An earlier one,
// while a later one is held, is given back whole by FixedWindow,
// SlidingWindowCounter and SlidingLog (within the limits their docs state)
// and not at all by TokenBucket and LeakyBucket, whose later bookings are
// timed to follow it. Cancelling twice, cancelling a reservation that is
// not OK, or one already settled (see Settle), does nothing.
func (r *Reservation) Cancel() {
	r.cancelAt(r.clock.Now())
}

func (r *Reservation) cancelAt(t time.Time) {
	if !r.ok || !r.done.CompareAndSwap(false, true) {
		return // a Cancel spends the reservation even with nothing to give back
	}
	if r.cancel != nil {
		r.cancel(t)
	}
}

// validN checks n against a limit of max events at once.
func validN(n, max int) error {
	if n < 0 {
		return ErrNegativeN
	}
	if n > max {
		return ErrExceedsLimit
	}
	return nil
}
