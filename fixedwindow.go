package ratelimit

import "time"

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
// The state per key is a window start, a count and the key's generation
// (see Reset), 24 bytes. A clock that moves backwards never frees capacity:
// while now is before the start of the key's window, events count against
// that later window and conform no earlier than its start, so Allow fails
// until the clock catches up. A key is at rest, and may be dropped by the
// store without changing any decision at or after that instant, once its
// window has passed, or when its window has begun and counts nothing.
//
// Take decides like AllowN and hands back the booking; Reservation.Settle
// settles it at its actual cost. A surplus comes back, at any time, while
// the booking's window is still the key's. An excess is counted in the
// key's window as it stands at the settlement (the booking's, a later one
// booked ahead, or the window of now if those have passed), with no
// admission check; beyond L it carries into the windows after, L to each,
// closing them, so a debt never vanishes at a window boundary.
//
// SetRate changes the rate at run time; SetOverride gives a key its own
// (tiers); Reset makes a key start afresh.
//
// Build it with NewFixedWindow. It is safe for concurrent use. Most callers
// want Allow.
type FixedWindow struct {
	k keyed[fwState, fwParams, *fwParams]
}

// fwState is a key's window and what it has counted.
type fwState struct {
	start int64  // start of the key's window, a multiple of W
	count int64  // events counted in it, booked ones included
	kgen  uint32 // the key's generation (its resets), wrapping at 2³²
}

// fwParams is a fixed window's parameters, immutable once built: L per W.
type fwParams struct {
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
	alg := &fwParams{limit: limit, window: window}
	l := new(FixedWindow)
	if err := l.k.setup(alg, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store.
func (fw *FixedWindow) Allow(key string) bool {
	if fw.k.obs != nil {
		return fw.k.allowObserved(key)
	}
	now := fw.k.nc.now()
	h, _ := fw.k.st.Take(key, now, true)
	p := fw.k.ps.p.Load()
	if h.Flagged() { // an override: the key's own parameters
		p = fw.k.overrideOf(key, p)
	}
	_, ok := p.admit(h.State(), now, 1, 0)
	h.Release()
	return ok
}

// SetRate changes the limit and the window's length of every key, from
// each key's next decision on, atomically: a decision uses either the old
// parameters or the new ones, never a mix. It validates as NewFixedWindow
// does and returns the same errors, leaving the limiter unchanged on error.
//
// Each key keeps its window's start and count: the count is held against
// the new limit (a count above it takes nothing more in that window), and
// the window closes the new length after its start; windows are then
// aligned to the epoch at the new length again. Bookings made before the
// change keep their instant; a Cancel of one after the change gives
// nothing back. Keys with an override (SetOverride) keep theirs.
func (fw *FixedWindow) SetRate(rate Rate) error {
	return fw.k.swap(func(_ *fwParams, _ int64) (*fwParams, error) {
		limit, window, err := windowParams(rate)
		if err != nil {
			return nil, err
		}
		return &fwParams{limit: limit, window: window}, nil
	})
}

func (p *fwParams) max() int64 { return p.limit }

func (p *fwParams) init(s *fwState, now int64) { *s = fwState{start: windowStart(now, p.window)} }

func (p *fwParams) keyGen(s *fwState) uint32 { return s.kgen }

func (p *fwParams) reset(s *fwState, now int64, gen uint32) {
	p.init(s, now)
	s.kgen = gen
}

func (p *fwParams) atRest(s *fwState, now int64) bool {
	return now-s.start >= p.window || (s.count == 0 && s.start <= now)
}

// current returns the key's window and count as seen at now: a window that
// has passed counts nothing and gives way to the window of now. A window
// later than now (a booking ahead, or a clock that went back) is kept.
func (p *fwParams) current(s *fwState, now int64) (start, count int64) {
	if now-s.start >= p.window {
		return windowStart(now, p.window), 0
	}
	return s.start, s.count
}

// admit: n events are counted in the key's window if they fit in what is
// left of it, else in the next window, at its start. A peek (n == 0)
// conforms at now and changes nothing.
func (p *fwParams) admit(s *fwState, now, n, maxWait int64) (b booked, ok bool) {
	if n == 0 {
		return booked{act: now}, true
	}
	start, count := p.current(s, now)
	target, total := start, count+n
	if n > p.limit-count {
		target, total = start+p.window, n
	}
	act := max(now, target)
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return booked{act: act}, false
	}
	s.start, s.count = target, total
	return booked{act: act}, true
}

// describe reads the key's current window: what is left of it (nothing
// before it starts) and when it is forgotten.
func (p *fwParams) describe(s *fwState, now int64, b booked, ok bool) (d Decision) {
	start, count := p.current(s, now)
	d.Limit = int(p.limit)
	d.Allowed = ok && b.act == now
	d.Remaining = p.remaining(start, count, now)
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = p.resetAfter(start, count, now)
	return d
}

func (p *fwParams) remaining(start, count, now int64) int {
	if start > now {
		return 0
	}
	return int(max(p.limit-count, 0)) // a count above a limit lowered since: none
}

// resetAfter is how long until a key in window start holding count is at
// rest: when the window ends, or, if it counts nothing, when it begins.
func (p *fwParams) resetAfter(start, count, now int64) time.Duration {
	if count == 0 {
		return durationNs(start - now)
	}
	return durationNs(start - now + p.window)
}

// unstep gives back n events booked to conform at act, if the key's window
// is still the one they were booked in. The window of a booking made ahead
// stays the key's window (closed before its start) even when it counts
// nothing after the Cancel.
func (p *fwParams) unstep(s *fwState, n int64, b booked, at int64) {
	if at > b.act || windowStart(b.act, p.window) != s.start {
		return // due, or booked in a window whose count is forgotten
	}
	s.count -= min(n, s.count)
}

// settle: a surplus of k = n − actual events comes back, at any time, if
// the key's window is still the one the booking was counted in: its count
// drops by k. Otherwise it does not come back: that window's count is
// forgotten, or the key has moved on to a later window.
//
// An excess of e = actual − n events is counted, with no admission check,
// in the key's window as it stands at the settlement: the booking's window
// if it is still the key's and has not passed, a later window booked
// ahead, or else the window of now (the booking's window having passed,
// its count is forgotten, so the debt is charged to the current one rather
// than lost). A count that then exceeds L carries: the window is full and
// the rest goes into the windows after it, L to each, which are closed as
// a booking ahead closes them; the key's window becomes the last of them,
// holding what is left. So a debt never vanishes at a window boundary:
// later requests wait for all of it. The carry stops at now + 2⁶⁰ ns
// (about 36.5 years); a debt reaching further is forgiven beyond it.
func (p *fwParams) settle(s *fwState, n, actual int64, b booked, now int64, same bool) {
	switch {
	case actual < n:
		if same && windowStart(b.act, p.window) == s.start {
			s.count -= min(n-actual, s.count)
		}
	case actual > n:
		start, count := p.current(s, now)
		s.start, s.count, _ = carryWindow(start, count, actual-n, p.limit, p.window, now)
	}
}

var _ Limiter = (*FixedWindow)(nil)
