package ratelimit

import (
	"math/bits"
	"time"
)

// SlidingWindowCounter is a sliding window counter per key: it approximates
// "at most L events in the last W", for a rate of L per W, with two counts
// per key instead of a log of timestamps. Windows of length W are aligned to
// the Unix epoch, as for FixedWindow. At an instant t that lies e
// nanoseconds into its window, the previous window's count is weighted by
// the share of it still inside the sliding window (t−W, t], (W−e)/W, as if
// its events had been spread evenly, and n events are allowed iff
//
//	prev·(W−e) + (cur+n)·W <= L·W
//
// where cur counts the current window. The comparison is exact: integer
// products in 128 bits, no floating point.
//
// The approximation lets through more than L events in some intervals of
// length W when the previous window's events were bunched at its end, and
// fewer when they were bunched at its start. In any interval of length W
// it never lets through more than 2L − ⌈2L/W⌉ events (W counted in
// nanoseconds; just under 2L for any practical W, and exactly L when W is
// 1ns). The bound is reached when a window whose predecessor was empty
// takes all L events in its last nanosecond, and the next window takes
// L − ⌈2L/W⌉ more by the time 2ns before it ends: the interval (t−W, t]
// ending there holds both bursts. A window that fills up early, on the
// other hand, can keep the next one partly closed although the sliding
// window holds fewer than L events.
//
// Reserve books the events at the earliest instant from now at which they
// conform, counting everything booked before them, so bookings are served
// in order, with one exception: after a Cancel has given back events of
// the window before the key's window, the lighter weight can let a new
// booking act before earlier ones still pending (the limit still holds).
// A booking in a later window closes the windows before it:
// until that window opens, Allow fails. Cancel, before the booked time,
// subtracts the n events from the count of the window they were booked in,
// if the state still keeps it (the key's window or the one before it);
// windows closed by a booking stay closed after it is cancelled. A booking
// more than 36 years ahead is refused (the Reservation is not OK).
//
// The state per key is a window start, two counts and the key's generation
// (see Reset), 32 bytes. A clock that moves backwards never frees capacity:
// within a window an earlier instant gives the previous window more weight,
// and before the key's window everything conforms no earlier than its
// start. A key is at rest, and may be dropped by the store without changing
// any decision at or after that instant, once neither window it counts has
// weight left: its window has begun and counts nothing (nor does the one
// before it), its window has passed and counts nothing, or both windows
// have passed.
//
// Take decides like AllowN and hands back the booking; Reservation.Settle
// settles it at its actual cost. A surplus comes back, at any time, from
// the count of the booking's window while the state keeps it (the key's
// window or the one before). An excess is counted as for FixedWindow, in
// the key's window at the settlement, carrying beyond L into the windows
// after, the window before the key's then counting L.
//
// SetRate changes the rate at run time; SetOverride gives a key its own
// (tiers); Reset makes a key start afresh.
//
// Build it with NewSlidingWindowCounter. It is safe for concurrent use.
// Most callers want Allow.
type SlidingWindowCounter struct {
	k keyed[swcState, swcParams, *swcParams]
}

// swcState is a key's window and the counts of it and of the window before.
type swcState struct {
	start int64  // start of the key's window, a multiple of W
	prev  int64  // events counted in the window before it
	cur   int64  // events counted in it, booked ones included
	kgen  uint32 // the key's generation (its resets), wrapping at 2³²
}

// swcParams is a sliding window counter's parameters, immutable once
// built: L per W.
type swcParams struct {
	limit  int64
	window int64
}

// NewSlidingWindowCounter returns a sliding window counter of rate.N
// events per sliding window of rate.Period, per key. It returns an error
// matching ErrInvalidRate if the rate's count or period is not positive, if
// the count does not fit in an int, or if the period exceeds about 36.5 years (2⁶⁰ ns).
func NewSlidingWindowCounter(rate Rate, opts ...Option) (*SlidingWindowCounter, error) {
	limit, window, err := windowParams(rate)
	if err != nil {
		return nil, err
	}
	alg := &swcParams{limit: limit, window: window}
	l := new(SlidingWindowCounter)
	if err := l.k.setup(alg, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store.
func (sc *SlidingWindowCounter) Allow(key string) bool {
	if sc.k.obs != nil {
		return sc.k.allowObserved(key)
	}
	now := sc.k.nc.now()
	h, _ := sc.k.st.Take(key, now, true)
	p := sc.k.ps.p.Load()
	if h.Flagged() { // an override: the key's own parameters
		p = sc.k.overrideOf(key, p)
	}
	_, ok := p.admit(h.State(), now, 1, 0)
	h.Release()
	return ok
}

// SetRate changes the limit and the window's length of every key, from
// each key's next decision on, atomically: a decision uses either the old
// parameters or the new ones, never a mix. It validates as
// NewSlidingWindowCounter does and returns the same errors, leaving the
// limiter unchanged on error.
//
// Each key keeps its window's start and both counts, weighed against the
// new limit and length: its windows follow one another at the new length
// from the key's window's start until the key is at rest, then align to
// the epoch again. Bookings made before the change keep their instant; a
// Cancel of one after the change gives nothing back. Keys with an override
// (SetOverride) keep theirs.
func (sc *SlidingWindowCounter) SetRate(rate Rate) error {
	return sc.k.swap(func(_ *swcParams, _ int64) (*swcParams, error) {
		limit, window, err := windowParams(rate)
		if err != nil {
			return nil, err
		}
		return &swcParams{limit: limit, window: window}, nil
	})
}

func (p *swcParams) max() int64 { return p.limit }

func (p *swcParams) init(s *swcState, now int64) { *s = swcState{start: windowStart(now, p.window)} }

func (p *swcParams) keyGen(s *swcState) uint32 { return s.kgen }

func (p *swcParams) reset(s *swcState, now int64, gen uint32) {
	p.init(s, now)
	s.kgen = gen
}

func (p *swcParams) atRest(s *swcState, now int64) bool {
	e := now - s.start
	return e >= 2*p.window || (e >= p.window && s.cur == 0) || (e >= 0 && s.cur == 0 && s.prev == 0)
}

// current returns the key's window and counts as seen at now: when the
// window has passed, the next one takes its count as the previous one, and
// when that has passed too, both count nothing. A window later than now (a
// booking ahead, or a clock that went back) is kept.
func (p *swcParams) current(s *swcState, now int64) (start, prev, cur int64) {
	switch e := now - s.start; {
	case e < p.window:
		return s.start, s.prev, s.cur
	case e < 2*p.window:
		return s.start + p.window, s.cur, 0
	default:
		return windowStart(now, p.window), 0, 0
	}
}

// earliest returns the least e >= e0 such that prev·(W−e) + count·W <= L·W,
// for count <= L; W if there is none below W.
func (p *swcParams) earliest(prev, count, e0 int64) int64 {
	if prev == 0 {
		return e0
	}
	// prev·(W−e) <= (L−count)·W  ⟺  W−e <= ⌊(L−count)·W / prev⌋ = k.
	hi, lo := bits.Mul64(uint64(p.limit-count), uint64(p.window))
	if hi >= uint64(prev) {
		return e0 // k >= 2⁶⁴ > W
	}
	k, _ := bits.Div64(hi, lo, uint64(prev))
	if k >= uint64(p.window) {
		return e0
	}
	return max(e0, p.window-int64(k))
}

// admit: n events are counted at the earliest instant the weighted count
// admits them: in the key's window, else in the next, else at the start of
// the one after. A peek (n == 0) conforms at now and changes nothing.
func (p *swcParams) admit(s *swcState, now, n, maxWait int64) (b booked, ok bool) {
	if n == 0 {
		return booked{act: now}, true
	}
	start, prev, cur := p.current(s, now)
	e0 := max(now-start, 0)
	var next swcState // the state once booked
	var act int64
	found := false
	if n <= p.limit-cur {
		if e := p.earliest(prev, cur+n, e0); e < p.window {
			next, act, found = swcState{start: start, prev: prev, cur: cur + n}, start+e, true
		}
	}
	if !found {
		if e := p.earliest(cur, n, 0); e < p.window {
			next, act = swcState{start: start + p.window, prev: cur, cur: n}, start+p.window+e
		} else {
			next, act = swcState{start: start + 2*p.window, cur: n}, start+2*p.window
		}
	}
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return booked{act: act}, false
	}
	s.start, s.prev, s.cur = next.start, next.prev, next.cur
	return booked{act: act}, true
}

// describe reads the key's current window and the one before: what the
// weighted count leaves (nothing while a booking waits) and when both
// are forgotten.
func (p *swcParams) describe(s *swcState, now int64, b booked, ok bool) (d Decision) {
	start, prev, cur := p.current(s, now)
	d.Limit = int(p.limit)
	d.Allowed = ok && b.act == now
	if !ok || d.Allowed {
		d.Remaining = p.remaining(start, prev, cur, now)
	}
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = p.resetAfter(start, prev, cur, now)
	return d
}

// remaining is the most m such that m more events fit at now: the largest
// m with prev·(W−e) + (cur+m)·W <= L·W, that is L − cur − ⌈prev·(W−e)/W⌉;
// none before the window opens.
func (p *swcParams) remaining(start, prev, cur, now int64) int {
	e := now - start
	if e < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(prev), uint64(p.window-e))
	q, r := bits.Div64(hi, lo, uint64(p.window)) // hi < W as prev <= L < 2⁶⁴
	if r > 0 {
		q++
	}
	return int(max(p.limit-cur-int64(q), 0))
}

// resetAfter is how long until a key with this window and counts is at
// rest: until its window has passed if it counts anything, else until the
// previous window's weight is gone, else until its window begins.
func (p *swcParams) resetAfter(start, prev, cur, now int64) time.Duration {
	switch {
	case cur > 0:
		return durationNs(start - now + 2*p.window)
	case prev > 0:
		return durationNs(start - now + p.window)
	default:
		return durationNs(start - now)
	}
}

// unstep gives back n events booked to conform at act from the count of
// their window, if the state still keeps it.
func (p *swcParams) unstep(s *swcState, n int64, b booked, at int64) {
	if at > b.act {
		return // due: the events were spent
	}
	switch windowStart(b.act, p.window) {
	case s.start:
		s.cur -= min(n, s.cur)
	case s.start - p.window:
		s.prev -= min(n, s.prev)
	}
}

// settle: a surplus of k = n − actual events comes back, at any time, from
// the count of the window the booking was counted in, if the state still
// keeps it (the key's window or the one before it), as Cancel's. Otherwise
// it does not come back.
//
// An excess of e = actual − n events is counted, with no admission check,
// in the key's window as it stands at the settlement (the booking's window
// if it is still current, a later window booked ahead, or else the window
// of now), as for FixedWindow. A count that then exceeds L carries: the
// window is full, L events, and the rest goes into the windows after it,
// L to each, the key's window becoming the last of them with what is left
// and the one before it counting L. So a debt never vanishes at a window
// boundary, and the weighted count keeps later requests waiting for all of
// it. The carry stops at now + 2⁶⁰ ns (about 36.5 years).
func (p *swcParams) settle(s *swcState, n, actual int64, b booked, now int64, same bool) {
	switch {
	case actual < n:
		if same {
			p.unstep(s, n-actual, b, b.act)
		}
	case actual > n:
		start, prev, cur := p.current(s, now)
		var carried bool
		start, cur, carried = carryWindow(start, cur, actual-n, p.limit, p.window, now)
		if carried {
			prev = p.limit
		}
		s.start, s.prev, s.cur = start, prev, cur
	}
}

var _ Limiter = (*SlidingWindowCounter)(nil)
