package ratelimit

import (
	"fmt"
	"time"
)

// maxLogLimit is the largest limit a SlidingLog accepts: its log takes 8
// bytes per event of the limit for every key.
const maxLogLimit = 1 << 20

// SlidingLog is a sliding log per key: exact, it lets through at most L
// events in every interval of length W, for a rate of L per W, whatever the
// arrival pattern. Each key logs the instants of its recent events; n events
// at t are allowed iff at most L−n events were allowed in (t−W, t].
//
// Reserve books the events at the earliest instant from now at which the
// window has room for them, counting everything booked before them; the
// instants of a key's events never decrease, so bookings are served first
// come first served and, while one is pending, Allow fails. Cancel, before
// the booked time, removes the booked instants from the log. Making room
// for a booking may have dropped older instants from the log, those that
// would have left the window by the booked time; they do not come back, and
// until they would have left the window the key stays closed, so a Cancel
// never gives back more than was booked. A booking more than about 36.5 years
// ahead is refused (the Reservation is not OK).
//
// Memory follows the events a key holds, not L: the log is a ring of
// instants, 8 bytes each, that doubles as events arrive (from 4, up to L)
// and halves once at most a quarter of it is in use, plus a 48-byte
// header: a key holding k instants holds at most about 16·max(k, 4) bytes
// of ring. Resizing allocates (amortised O(1) per event), never with the
// key's slot lock held: a step that needs a new ring lets the key go,
// allocates it and decides afresh, so the decision is the one it would
// have been; a shrink that finds the key changed meanwhile waits for a
// later step. A key whose number of events in the window is steady
// allocates nothing. L may be at
// most 1,048,576 (8 MiB per key at most); for large limits
// SlidingWindowCounter needs O(1) memory. A clock that moves
// backwards never frees capacity: before the newest logged instant, or
// before an instant dropped from the log has left the window, nothing
// conforms. A key is at rest, and may be dropped by the store without
// changing any decision at or after that instant, once every logged
// instant has left the window (t−W, t] and nothing is booked ahead.
//
// Take decides like AllowN and hands back the booking; Reservation.Settle
// settles it at its actual cost. A surplus comes back, at any time, as
// Cancel's: the booking's instants still in the log are removed. An excess
// is logged as more instants at the booking's time to act, with no
// admission check, so the log is what it would be had the booking been for
// the actual cost: a debt of more than L closes the key until W after that
// instant, and a debt whose instants have left the window by the settlement
// is paid already.
//
// SetRate changes the rate at run time; SetOverride gives a key its own
// (tiers); Reset makes a key start afresh.
//
// Build it with NewSlidingLog. It is safe for concurrent use. Most callers
// want Allow.
type SlidingLog struct {
	k keyed[slState, slParams, *slParams]
}

// slState is a key's log: a ring of the instants of its events in
// non-decreasing order, oldest first.
type slState struct {
	ring  []int64 // room for what it holds, at most L (or n): see fit; nil before
	head  int32   // ring index of the oldest instant
	n     int32   // instants held
	floor int64   // nothing conforms before floor: the newest dropped instant plus W
	kgen  uint32  // the key's generation (its resets), wrapping at 2³²
}

// slParams is a sliding log's parameters, immutable once built: L per W.
type slParams struct {
	limit  int64
	window int64
}

// NewSlidingLog returns a sliding log of rate.N events per sliding window
// of rate.Period, per key. It returns an error matching ErrInvalidRate if
// the rate's count or period is not positive, if the count exceeds
// 1,048,576, or if the period exceeds about 36.5 years (2⁶⁰ ns).
func NewSlidingLog(rate Rate, opts ...Option) (*SlidingLog, error) {
	alg, err := newSLParams(rate)
	if err != nil {
		return nil, err
	}
	l := new(SlidingLog)
	if err := l.k.setup(alg, opts); err != nil {
		return nil, err
	}
	return l, nil
}

func newSLParams(rate Rate) (*slParams, error) {
	limit, window, err := windowParams(rate)
	if err != nil {
		return nil, err
	}
	if limit > maxLogLimit {
		return nil, fmt.Errorf("%w: a sliding log keeps 8 bytes an event for each key, and %d events are more than its limit of %d (use SlidingWindowCounter)",
			ErrInvalidRate, limit, maxLogLimit)
	}
	return &slParams{limit: limit, window: window}, nil
}

// SetRate changes the limit and the window's length of every key, from
// each key's next decision on, atomically: a decision uses either the old
// parameters or the new ones, never a mix. It validates as NewSlidingLog
// does and returns the same errors, leaving the limiter unchanged on error.
//
// Each key keeps the instants it has logged, counted against the new limit
// over the new window. A key's log grows and shrinks with the instants it
// holds under either. Bookings made before the
// change keep their instant; a Cancel of one after the change gives
// nothing back. Keys with an override (SetOverride) keep theirs.
func (sl *SlidingLog) SetRate(rate Rate) error {
	return sl.k.swap(func(_ *slParams, _ int64) (*slParams, error) { return newSLParams(rate) })
}

func (p *slParams) max() int64 { return p.limit }

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store, once the
// key has logged an event.
func (sl *SlidingLog) Allow(key string) bool {
	if sl.k.obs != nil {
		return sl.k.allowObserved(key)
	}
	now := sl.k.nc.now()
	var pl slPlan
	for {
		h, _ := sl.k.st.Take(key, now, true)
		p := sl.k.ps.p.Load()
		if h.Flagged() { // an override: the key's own parameters
			p = sl.k.overrideOf(key, p)
		}
		ok, size := p.allowOne(h.State(), now, &pl)
		h.Release()
		if size > 0 { // a ring to allocate, outside the lock
			pl.alloc(size)
			continue
		}
		return ok
	}
}

// allowOne is admitNeed, the plan and admitRing for one event that may not
// wait (Allow's step) in one pass, so that the window's edge is searched
// for once: it decides exactly as they do. With size > 0 it changed
// nothing: the caller allocates a ring of size instants and tries again.
func (p *slParams) allowOne(s *slState, now int64, pl *slPlan) (ok bool, size int) {
	act := s.from(now)
	if j := int64(s.n) - p.limit; j >= 0 {
		act = max(act, s.at(int32(j))+p.window)
	}
	if act > now {
		return false, 0
	}
	d := s.after(now - p.window)
	held := int64(s.n - d)
	over := held + 1 - p.limit
	if over > 0 {
		held -= over
	}
	ring, size := pl.ready(s, int32(held+1), int32(p.limit))
	if size > 0 {
		return false, size
	}
	p.drop(s, d)
	if over > 0 {
		p.drop(s, int32(over))
	}
	s.fit(s.n+1, int32(p.limit), ring)
	s.push(act, 1)
	return true, 0
}

func (p *slParams) init(s *slState, now int64) { *s = slState{floor: now} }

func (p *slParams) keyGen(s *slState) uint32 { return s.kgen }

func (p *slParams) reset(s *slState, now int64, gen uint32) {
	p.init(s, now)
	s.kgen = gen
}

func (p *slParams) atRest(s *slState, now int64) bool {
	return s.floor <= now && (s.n == 0 || s.at(s.n-1) <= now-p.window)
}

// at returns the i-th oldest instant of the log, 0 <= i < s.n.
func (s *slState) at(i int32) int64 {
	j := s.head + i
	if j >= int32(len(s.ring)) {
		j -= int32(len(s.ring))
	}
	return s.ring[j]
}

// from returns the earliest instant at which a new event may conform: not
// before now, the newest logged instant, or floor.
func (s *slState) from(now int64) int64 {
	t := max(now, s.floor)
	if s.n > 0 {
		t = max(t, s.at(s.n-1))
	}
	return t
}

// minRing is the smallest ring a log that holds an instant has.
const minRing = 4

// fitSize is the ring size a log that must hold need instants,
// need <= max(limit, s.n), switches to; 0 if it keeps its ring. The ring
// doubles as events arrive (to at most the larger of limit and need), and
// once at most a quarter of it is in use it halves, or more, to twice what
// is held (at least minRing), so a log's memory follows the instants it
// holds, O(held), not its limit, and resizing is amortised O(1) per event.
func (s *slState) fitSize(need, limit int32) int32 {
	switch size := int32(len(s.ring)); {
	case size < need:
		return min(max(need, 2*size, minRing), max(limit, need))
	case size > minRing && 4*need <= size:
		return max(2*need, minRing)
	}
	return 0
}

// fit makes the ring hold at least need instants, resizing it as
// fitSize says, into ring, the one the caller allocated before it took the
// key (see slPlan), so that no ring is allocated with a slot lock held
// (keystore rule 2). Without a ring it leaves the ring as it is if it has
// room (a shrink skipped, for a later step), and else allocates one here:
// only a step run without a plan does, as the tests run admit and insert
// directly, and slLockedAllocs counts those allocations.
func (s *slState) fit(need, limit int32, ring []int64) {
	want := s.fitSize(need, limit)
	switch {
	case want == 0:
	case int32(len(ring)) >= max(need, s.n):
		s.grow(ring)
	case int32(len(s.ring)) < need:
		slLockedAllocs.Add(1)
		s.grow(make([]int64, want))
	}
}

// grow moves the log into ring, len(ring) >= s.n, keeping what it holds.
func (s *slState) grow(ring []int64) {
	for i := range s.n {
		ring[i] = s.at(i)
	}
	s.ring, s.head = ring, 0
}

// push appends k copies of t, which is not before the newest instant; the
// ring has room for them.
func (s *slState) push(t int64, k int32) {
	size := int32(len(s.ring))
	j := s.head + s.n
	if j >= size {
		j -= size
	}
	for range k {
		s.ring[j] = t
		if j++; j == size {
			j = 0
		}
	}
	s.n += k
}

// drop removes the k oldest instants and raises floor to when the newest
// of them leaves the window.
func (p *slParams) drop(s *slState, k int32) {
	if k == 0 {
		return
	}
	s.floor = max(s.floor, s.at(k-1)+p.window)
	s.head += k
	if size := int32(len(s.ring)); s.head >= size {
		s.head -= size
	}
	s.n -= k
}

// after returns the index of the oldest instant later than t; s.n if none.
func (s *slState) after(t int64) int32 {
	lo, hi := int32(0), s.n
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		if s.at(mid) <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// admit: n events conform at the earliest instant, not before the key's
// latest logged instant nor its floor, at which the log holds at most L-n
// instants in the window before it; they are logged at that instant. A
// peek (n == 0) conforms at now and changes nothing.
func (p *slParams) admit(s *slState, now, n, maxWait int64) (b booked, ok bool) {
	return p.admitRing(s, now, n, maxWait, nil)
}

// admitRing is admit, resizing the log into ring if it must be resized
// (see fit).
func (p *slParams) admitRing(s *slState, now, n, maxWait int64, ring []int64) (b booked, ok bool) {
	if n == 0 {
		return booked{act: now}, true
	}
	act := s.from(now)
	if j := int64(s.n) - (p.limit - n) - 1; j >= 0 {
		act = max(act, s.at(int32(j))+p.window)
	}
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return booked{act: act}, false
	}
	p.drop(s, s.after(now-p.window))
	if over := int64(s.n) + n - p.limit; over > 0 {
		p.drop(s, int32(over))
	}
	s.fit(s.n+int32(n), int32(p.limit), ring)
	s.push(act, int32(n))
	return booked{act: act}, true
}

// describe reads the log: the room left in the window before now (none
// while a booking waits or before the floor) and when the last logged
// instant leaves the window.
func (p *slParams) describe(s *slState, now int64, b booked, ok bool) (d Decision) {
	d.Limit = int(p.limit)
	d.Allowed = ok && b.act == now
	if !ok || d.Allowed {
		d.Remaining = p.remaining(s, now, s.from(now))
	}
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = p.resetAfter(s, now)
	return d
}

// remaining is how many events the window (now−W, now] has room for;
// none if nothing conforms at now.
func (p *slParams) remaining(s *slState, now, from int64) int {
	if from > now {
		return 0
	}
	return int(max(p.limit-int64(s.n-s.after(now-p.window)), 0)) // none over a limit lowered since
}

// resetAfter is how long until every logged instant has left the window
// and floor has passed.
func (p *slParams) resetAfter(s *slState, now int64) time.Duration {
	t := s.floor
	if s.n > 0 {
		t = max(t, s.at(s.n-1)+p.window)
	}
	if t <= now {
		return 0
	}
	return durationNs(t - now)
}

// unstep removes n instants equal to act, the booking's, from the log, if
// it is not yet due. Instants dropped since to make room for a later
// booking are gone already.
func (p *slParams) unstep(s *slState, n int64, b booked, at int64) {
	if at > b.act {
		return
	}
	s.remove(b.act, n)
}

// remove removes up to n instants equal to act from the log, and says how
// many other instants it moved to close the gap.
func (s *slState) remove(act, n int64) (moved int32) {
	if s.n == 0 {
		return 0
	}
	// The instants equal to act are [i, j); remove m of them, closing the
	// gap from the shorter side: the i older instants move forward (the
	// head with them), or the later ones back. A booking settled while
	// others logged after it are still in the window (requests finishing
	// in the order they came) so moves the few instants before it rather
	// than all those after.
	i, j := s.after(act-1), s.after(act)
	m := min(int32(n), j-i)
	if m == 0 {
		return 0
	}
	size := int32(len(s.ring))
	if i < s.n-j {
		for k := i - 1; k >= 0; k-- {
			dst := s.head + k + m
			if dst >= size {
				dst -= size
			}
			s.ring[dst] = s.at(k)
		}
		if s.head += m; s.head >= size {
			s.head -= size
		}
		s.n -= m
		return i
	}
	for k := j; k < s.n; k++ {
		dst := s.head + k - m
		if dst >= size {
			dst -= size
		}
		s.ring[dst] = s.at(k)
	}
	moved = s.n - j
	s.n -= m
	return moved
}

// settle: a surplus of k = n − actual events comes back, at any time, as
// Cancel's does: k of the booking's instants are removed from the log, as
// far as they are still in it (instants dropped since to make room for a
// later booking are gone already, and the key stays closed until they
// would have left the window).
//
// An excess of e = actual − n events is logged, with no admission check,
// as e more instants at the booking's time to act, in order among the
// instants logged after it: the log is then exactly what it would be had
// the booking been for actual events. The ring holds the newest L
// instants; those that no longer fit, the oldest, are dropped as admit
// drops them, raising the floor to the newest dropped plus W, so the key
// stays closed while they would be in the window: a debt larger than L
// closes the key until W after the booking's time to act. A debt whose
// instants have left the window by the time it is settled is paid already.
// The work is O(L), as a Cancel's.
func (p *slParams) settle(s *slState, n, actual int64, b booked, now int64, same bool) {
	p.settleRing(s, n, actual, b, same, nil)
}

// settleRing is settle, resizing the log into ring if it must be resized
// (see fit).
func (p *slParams) settleRing(s *slState, n, actual int64, b booked, same bool, ring []int64) {
	switch {
	case actual < n:
		if same {
			s.remove(b.act, n-actual)
		}
	case actual > n:
		p.insertRing(s, b.act, actual-n, ring)
	}
}

// insert logs e instants at t among those logged, keeping the newest L:
// the oldest of the merged log are dropped, and copies of t beyond L are
// dropped at once, each raising the floor as drop does.
func (p *slParams) insert(s *slState, t, e int64) { p.insertRing(s, t, e, nil) }

// insertRing is insert, resizing the log into ring if it must be resized
// (see fit).
func (p *slParams) insertRing(s *slState, t, e int64, ring []int64) {
	m := int32(min(e, p.limit))
	if e > p.limit {
		s.floor = max(s.floor, t+p.window)
	}
	i := s.after(t) // the new instants go before the first later than t
	if over := s.n + m - int32(p.limit); over > 0 {
		d := min(over, i)
		p.drop(s, d)
		i -= d
		if rest := over - d; rest > 0 { // the oldest of the merged log are copies of t
			// A log longer than a limit lowered since may be full of
			// later instants alone: then every copy of t drops out.
			m -= min(rest, m)
			s.floor = max(s.floor, t+p.window)
		}
	}
	s.fit(s.n+m, int32(p.limit), ring)
	size := int32(len(s.ring))
	idx := func(k int32) int32 {
		if j := s.head + k; j < size {
			return j
		} else {
			return j - size
		}
	}
	for k := s.n - 1; k >= i; k-- {
		s.ring[idx(k+m)] = s.ring[idx(k)]
	}
	for k := i; k < i+m; k++ {
		s.ring[idx(k)] = t
	}
	s.n += m
}

var _ Limiter = (*SlidingLog)(nil)
