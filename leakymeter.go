package ratelimit

import "time"

// LeakyMeter is a leaky bucket per key, used as a meter: each key has a
// bucket of capacity C whose level rises by n for n events admitted and
// leaks continuously at rate r; n events are admitted now iff the level
// plus n is at most C, and what does not fit is refused, never queued. A
// key seen for the first time has an empty bucket, so it may burst C
// events at once, then r per period on average. LeakyBucket is the other
// reading of the leaky bucket, the shaper, whose output never bursts.
//
// The meter is exactly TokenBucket under another name: a bucket at level
// L is a token bucket holding C − L tokens, the leak is the refill, and
// both keep per key the instant at which the bucket is back to rest (for
// the meter, empty; for the token bucket, full), the GCRA's theoretical
// arrival time. A LeakyMeter and a TokenBucket of the same rate and
// capacity give the same answer to every call of a trace, Allow, AllowN,
// Reserve, Wait, Take, Cancel, Settle, SetRate, SetOverride and Reset
// alike; a property test holds them to it. (After the clock goes back, a
// key set up again starts no earlier than the last drop in its part of the
// store, for any limiter: there two limiters of one type may differ too.)
// In a Decision, Limit is C,
// Remaining is C − L (the room left in the bucket, floored to whole
// events), RetryAfter is how long until n events fit, ResetAfter how long
// until the bucket is empty. The bound is the token bucket's: at most
// C + ⌊r·D⌋ events in any interval of length D (C + ⌈r·(D+1ns)⌉ − 1 when
// 1/r is not a whole number of nanoseconds), whatever the order of calls.
//
// Reserve books ahead (the level may rise above C by the events booked for
// later, which act as the level leaks back to C), Wait blocks for a
// booking, and Cancel, Take/Settle, SetRate, SetOverride and Reset do what
// they do for TokenBucket (see there), reading "tokens held" as "room left
// in the bucket". A key is at rest, and may be dropped, when its bucket is
// empty. State per key: 24 bytes.
//
// It is a type of its own rather than an option of NewLeakyBucket, since
// the shaper and the meter answer the same calls differently;
// docs/algorithms.md says more.
//
// Build it with NewLeakyMeter. It is safe for concurrent use. Most callers
// want Allow.
type LeakyMeter struct {
	k keyed[tbState, tbParams, *tbParams]
}

// NewLeakyMeter returns a leaky bucket per key used as a meter: a bucket
// of capacity events leaking at rate. It returns an error matching
// ErrInvalidRate if the rate's count or period is not positive, and
// ErrInvalidCapacity if capacity is not positive or capacity/rate (the
// time a full bucket takes to leak empty) exceeds about 36.5 years
// (2⁶⁰ ns): NewTokenBucket's checks and errors.
func NewLeakyMeter(rate Rate, capacity int, opts ...Option) (*LeakyMeter, error) {
	p, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, err
	}
	l := new(LeakyMeter)
	if err := l.k.setup(p, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// Allow reports whether one event for key fits in its bucket now, and
// records it if so. It does not allocate for a key already in the store.
func (lm *LeakyMeter) Allow(key string) bool {
	if lm.k.obs != nil {
		return lm.k.allowObserved(key)
	}
	now := lm.k.nc.now()
	h, _ := lm.k.st.Take(key, now, true)
	p := lm.k.ps.p.Load()
	if h.Flagged() { // an override: the key's own parameters
		p = lm.k.overrideOf(key, p)
	}
	_, ok := p.admit(h.State(), now, 1, 0)
	h.Release()
	return ok
}

// SetRate changes the leak rate and capacity of every key, from each key's
// next decision on, atomically, as TokenBucket.SetRate does: each key
// keeps the room it had left at the change, capped at the new capacity,
// and leaks at the new rate from then on. It validates as NewLeakyMeter
// does and returns the same errors, leaving the limiter unchanged on
// error. Keys with an override (SetOverride) keep theirs.
func (lm *LeakyMeter) SetRate(rate Rate, capacity int) error {
	return lm.k.swap(func(old *tbParams, now int64) (*tbParams, error) {
		p, err := newTBParams(rate, capacity)
		if err != nil {
			return nil, err
		}
		p.succeed(old, now)
		return p, nil
	})
}

// SetOverride gives key a leak rate and capacity of its own, in place of
// the limiter's, from the key's next decision on, with the rules of
// TokenBucket.SetOverride (the key keeps the room it had left, capped at
// the new capacity). It validates as NewLeakyMeter does and returns the
// same errors, leaving everything unchanged on error.
func (lm *LeakyMeter) SetOverride(key string, rate Rate, capacity int) error {
	p, err := newTBParams(rate, capacity)
	if err != nil {
		return err
	}
	lm.k.setOverride(key, p, rate, capacity)
	return nil
}

// Override returns key's override, if it has one.
func (lm *LeakyMeter) Override(key string) (rate Rate, capacity int, ok bool) {
	return lm.k.override(key)
}

// Window returns capacity/rate, rounded up to the nanosecond: how long a
// full bucket takes to leak empty.
func (lm *LeakyMeter) Window() time.Duration { return ceilNs(lm.k.ps.p.Load().tau) }

var (
	_ Limiter = (*LeakyMeter)(nil)
	_ Taker   = (*LeakyMeter)(nil)
)
