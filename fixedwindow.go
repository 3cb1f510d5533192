package ratelimit

import (
	"fmt"
	"time"
)

// FixedWindow is a fixed-window counter per key: at most L events in each
// window of length W, for a rate of L per W. Windows are aligned to the
// Unix epoch: the window of an instant t (in Unix nanoseconds) is
// [k·W, (k+1)·W) with k = ⌊t/W⌋. Every key shares the same windows: a rate
// of 100 per minute resets at the top of each minute.
//
// n events at t are allowed iff the window of t has counted at most L−n
// events. When a window closes its count is forgotten, so a key may pass L
// events at the end of one window and L more at the start of the next: 2L
// events within two nanoseconds. If that boundary burst matters,
// use SlidingLog (exact) or SlidingWindowCounter (approximate, O(1)).
//
// Reserve books into the first window, from now on, with room for the n
// events: the booked events conform at the start of that window (or now, if
// it is the current one). A booking in a later window closes the windows
// before it: later requests are served after it, first come first served,
// so Allow fails until the booked window opens even if the current window
// had room for fewer events than the booking needed. Cancel, before the
// booked time, gives the n events back if they were booked in the latest
// booked window (the only window whose count the state keeps); events
// booked in an earlier window cannot be given back, and windows closed by
// a booking stay closed after it is cancelled. A booking more than 36
// years ahead is refused (the Reservation is not OK).
//
// The state per key is a window start and a count, 16 bytes. A clock that
// moves backwards never frees capacity: while now is before the start of
// the key's window, events count against that later window and conform no
// earlier than its start, so Allow fails until the clock catches up. A key
// is at rest, and may be dropped by the store without changing any decision
// at or after that instant, once its window has passed, or when its window
// has begun and counts nothing.
//
// Build it with NewFixedWindow. It is safe for concurrent use. Most callers
// want Allow.
type FixedWindow struct {
	keyed[fwState, *fwAlgo]
}

// fwState is a key's window and what it has counted.
type fwState struct {
	start int64 // start of the key's window, a multiple of W
	count int64 // events counted in it, booked ones included
}

type fwAlgo struct {
	limit  int64
	window int64
}

// NewFixedWindow returns a fixed-window limiter of rate.N events per
// window of rate.Period, per key. It returns an error matching
// ErrInvalidRate if the rate's count or period is not positive, if the
// count does not fit in an int, or if the period exceeds about 36.5 years (2⁶⁰ ns).
func NewFixedWindow(rate Rate, opts ...Option) (*FixedWindow, error) {
	limit, window, err := windowParams(rate)
	if err != nil {
		return nil, err
	}
	alg := &fwAlgo{limit: limit, window: window}
	k, err := newKeyed[fwState](alg, int(limit), opts)
	if err != nil {
		return nil, err
	}
	return &FixedWindow{k}, nil
}

// windowParams checks a rate for the window algorithms and returns its
// limit L and window W in nanoseconds.
func windowParams(rate Rate) (limit, window int64, err error) {
	if err := rate.validate(); err != nil {
		return 0, 0, err
	}
	if int64(int(rate.N)) != rate.N {
		return 0, 0, fmt.Errorf("%w: limit %d does not fit in an int", ErrInvalidRate, rate.N)
	}
	if int64(rate.Period) > maxSpan {
		return 0, 0, fmt.Errorf("%w: a window of %s is longer than a window may span (%s)", ErrInvalidRate, readable(int64(rate.Period)), maxSpanText)
	}
	return rate.N, int64(rate.Period), nil
}

// windowStart returns the start of the window of length w holding t:
// t rounded down to a multiple of w, also for negative t.
func windowStart(t, w int64) int64 {
	m := t % w
	if m < 0 {
		m += w
	}
	return t - m
}

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store.
func (fw *FixedWindow) Allow(key string) bool {
	if fw.obs != nil {
		return fw.allowObserved(key)
	}
	now := fw.nc.now()
	a := fw.alg
	ent, rel := fw.st.acquire(key, now)
	s := &ent.s
	if now-s.start >= a.window { // its window has passed
		s.start, s.count = windowStart(now, a.window), 0
	}
	ok := s.start <= now && s.count < a.limit
	if ok {
		s.count++
	}
	ent.unlock(rel)
	return ok
}

func (a *fwAlgo) init(s *fwState, now int64) { *s = fwState{start: windowStart(now, a.window)} }

func (a *fwAlgo) atRest(s *fwState, now int64) bool {
	return now-s.start >= a.window || (s.count == 0 && s.start <= now)
}

// current returns the key's window and count as seen at now: a window that
// has passed counts nothing and gives way to the window of now. A window
// later than now (a booking ahead, or a clock that went back) is kept.
func (a *fwAlgo) current(s *fwState, now int64) (start, count int64) {
	if now-s.start >= a.window {
		return windowStart(now, a.window), 0
	}
	return s.start, s.count
}

func (a *fwAlgo) step(s *fwState, now, n, maxWait int64) (d Decision, b booked, ok bool) {
	start, count := a.current(s, now)
	d.Limit = int(a.limit)
	if n == 0 {
		d.Allowed = true
		d.Remaining = a.remaining(start, count, now)
		d.ResetAfter = a.resetAfter(start, count, now)
		return d, booked{act: now}, true
	}
	// The first window from start with room: start itself, or the next one,
	// which is empty since nothing is ever booked beyond the key's window.
	target, total := start, count+n
	if n > a.limit-count {
		target, total = start+a.window, n
	}
	act := max(now, target)
	delay := act - now
	if (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		d.Remaining = a.remaining(start, count, now)
		d.RetryAfter = durationNs(delay)
		d.ResetAfter = a.resetAfter(start, count, now)
		return d, booked{act: act}, false
	}
	s.start, s.count = target, total
	d.Allowed = delay == 0
	if d.Allowed {
		d.Remaining = int(a.limit - total)
	}
	d.RetryAfter = durationNs(delay)
	d.ResetAfter = a.resetAfter(target, total, now)
	return d, booked{act: act}, true
}

// remaining is how many more events the window start, holding count, lets
// through at now: none before it opens.
func (a *fwAlgo) remaining(start, count, now int64) int {
	if start > now {
		return 0
	}
	return int(a.limit - count)
}

// resetAfter is how long until a key in window start holding count is at
// rest: when the window ends, or, if it counts nothing, when it begins.
func (a *fwAlgo) resetAfter(start, count, now int64) time.Duration {
	if count == 0 {
		return durationNs(start - now)
	}
	return durationNs(start - now + a.window)
}

// unstep gives back n events booked to conform at act, if the key's window
// is still the one they were booked in. The window of a booking made ahead
// stays the key's window (closed before its start) even when it counts
// nothing after the Cancel.
func (a *fwAlgo) unstep(s *fwState, n int64, b booked, at int64) {
	if at > b.act || windowStart(b.act, a.window) != s.start {
		return // due, or booked in a window whose count is forgotten
	}
	s.count -= min(n, s.count)
}

var _ Limiter = (*FixedWindow)(nil)
