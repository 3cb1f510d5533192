package ratelimit

import (
	"fmt"
	"sync/atomic"
	"time"
)

// TokenBucket is a token bucket per key: a bucket holds up to capacity C
// tokens, refilled continuously at rate r; an event takes one token, and is
// refused when the bucket is empty. A key seen for the first time starts
// full, so it may burst C events at once, then r per period on average.
//
// It is implemented as GCRA: the only state per key is the theoretical
// arrival time (TAT), the instant at which the bucket will be full again,
// kept in integer nanoseconds plus an exact fraction of a nanosecond, so
// that a rate of 3 per second allows exactly 3,000,000 events (plus the
// initial burst C) over 1,000,000 seconds of steady demand. n events at
// time t conform iff max(TAT, t) + n/r <= t + C/r; they then advance TAT by
// n/r. The bucket holds floor((t + C/r - max(TAT, t)) * r) tokens.
//
// Reserve books tokens ahead: the k-th token beyond those in the bucket is
// due k/r after the bucket runs dry, so successive reservations are spaced
// 1/r apart. Cancel, at or before the booked time, gives a booking back
// whole if it is the latest booking still held on its key: TAT moves back
// by n/r, exactly as if the booking had never been made. Otherwise it gives
// nothing back, and the booking's tokens stay taken, unused: bookings made
// after it are timed to follow it, and giving its tokens to a new booking
// would let that booking act together with them. So cancelling bookings
// latest first gives every one back, and a booking cancelled while a later
// one was held is not given back even once that later one is.
//
// Whatever the order of Allow, Reserve, Cancel and Wait, at most C + ⌊r·D⌋
// events conform in any interval of length D. Each acts at the instant it
// conforms rounded up to a whole nanosecond: when 1/r is a whole number of
// nanoseconds the bound holds as is for the instants at which events act;
// otherwise an interval of length D may hold one event more, at most
// C + ⌈r·(D+1ns)⌉ − 1. A clock that moves backwards never mints tokens: TAT
// is never moved back by time. With settlements (see Take below), counting
// each booking at its settled cost, the bound holds over any interval plus
// the excess of the bookings in it settled after the last of them was
// booked (see Reservation.Settle).
//
// A key is at rest when its bucket is full (TAT <= now); the store may drop
// it then without changing any decision. State per key: 24 bytes.
//
// The global key "" (one bucket for every caller) has a path of its own:
// while "" has no override and the limiter no observer, Allow on "" takes
// no lock, only a compare-and-swap on the key's TAT (a refusal not even
// that), with the same decisions. It needs 1/r and C/r counted exactly
// in a unit of 1/u ns, with u at most about 2·10⁷ and C/r at most 2⁶⁰
// units (u is 1 for an interval of whole nanoseconds, 3 for 3 per
// second); other limits take the key's lock.
//
// Take decides like AllowN and hands back the booking; Reservation.Settle
// settles it at its actual cost. A surplus comes back, at any time, while
// the booking is still the latest on its key: TAT moves back by it, as if
// the booking had been for the actual cost; otherwise nothing comes back.
// An excess is booked as debt with no admission check: TAT moves on by it
// from where it stands, so later requests wait for it; a bucket that has
// refilled to full since (TAT behind now) takes it from now, on the full
// bucket, as a key dropped at rest and set up again would: what a late
// excess costs never depends on whether the store kept the key. A debt never takes
// TAT beyond 2⁶⁰ ns (36.5 years) from now: the rest is forgiven.
//
// SetRate changes the rate and capacity at run time; SetOverride gives a
// key its own (tiers); Reset makes a key start afresh.
//
// A leaky bucket used as a meter (drop what overflows, no queue) is this
// same function, offered as LeakyMeter; LeakyBucket is the leaky bucket as
// a shaper.
//
// Build it with NewTokenBucket. It is safe for concurrent use. Most callers
// want Allow.
type TokenBucket struct {
	k keyed[tbState, tbParams, *tbParams]
}

// tbState is a key's TAT, the generation of the parameters it is
// expressed in (TAT means a number of tokens only with the rate and
// capacity it was written under), and the key's generation (its resets).
// Both generations are 32 bits, so that the state stays 24 bytes; they
// wrap after 2³² changes or resets, which no realistic run reaches while a
// key stays idle or a booking stays held.
type tbState struct {
	tat  ftime
	gen  uint32
	kgen uint32
}

// tbParams is a token bucket's parameters, immutable once built.
type tbParams struct {
	iv       interval
	capacity int64
	tau      ftime // C intervals: the burst tolerance

	// gen counts the changes made before these parameters; since is when
	// they took over (unused for gen 0), and hist holds up to maxHist of
	// the parameters before them, oldest first, each with hist nil, so
	// that a state written under any of them can be re-expressed.
	gen   uint32
	since int64
	hist  []tbParams

	// hot holds the word the global key's TAT is lent to while Allow on
	// "" may step it by one compare-and-swap (see allowGlobal), if lends
	// says it may. The copies in a later hist share it, unused. The lent
	// TAT is counted in units of 1/unit ns (unit divides iv.Den, and
	// every multiple of iv and tau is a whole number of units) from the
	// word's anchor: ivU and tauU are iv and tau in units, and span is
	// how far now may be past the anchor for now, TAT and a step to fit
	// in the word.
	hot             *atomic.Pointer[tbHot]
	lends           bool
	unit, ivU, tauU int64
	span, fracPerU  int64
}

// tbHot is a word the TAT of the global key "" is lent to (see
// allowGlobal), and its anchor: w is lentBit|x while lent, the TAT being
// anchor + x/unit ns, 0 while not, and hotClosed once replaced (by a word
// of another anchor, or with the parameters), never to be lent again; the
// anchor never changes. It has a cache line of its own: Allow on ""
// writes it, every call reads the parameters beside it.
type tbHot struct {
	w      atomic.Uint64
	anchor int64
	_      [48]byte
}

// retired is the word of parameters that have been replaced: closed, and
// never replaced in turn.
var retired = func() *tbHot {
	h := new(tbHot)
	h.w.Store(hotClosed)
	return h
}()

const (
	lentBit   = 1 << 63
	hotClosed = 1
	// lentNs is the TAT the slot of "" holds while it has lent the real
	// one: after any instant the clock can read, so that a state read by
	// mistake while lent refuses, and far enough below the largest int64
	// that no step on it overflows.
	lentNs = 3 << 61
	// maxUnits bounds the numbers a lent TAT's step handles: now and TAT
	// past the anchor, and the burst tolerance, in units.
	maxUnits = 1 << 60
)

// maxHist is how many earlier parameters a token bucket keeps to
// re-express the TAT of a key that has not decided since: a key idle
// through more changes is re-expressed from the oldest kept (see adopt).
const maxHist = 8

// NewTokenBucket returns a token bucket per key of the given capacity,
// refilled at rate. It returns an error matching ErrInvalidRate if the
// rate's count or period is not positive, and ErrInvalidCapacity if
// capacity is not positive or capacity/rate (the time the bucket takes to
// refill from empty) exceeds about 36.5 years (2⁶⁰ ns).
func NewTokenBucket(rate Rate, capacity int, opts ...Option) (*TokenBucket, error) {
	alg, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, err
	}
	l := new(TokenBucket)
	if err := l.k.setup(alg, opts); err != nil {
		return nil, err
	}
	l.k.claim = func(s *tbState) { l.k.ps.p.Load().reclaim(s) }
	return l, nil
}

func newTBParams(rate Rate, capacity int) (*tbParams, error) {
	if err := rate.validate(); err != nil {
		return nil, err
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: capacity must be positive, got %d", ErrInvalidCapacity, capacity)
	}
	iv := rate.interval()
	if !iv.Within(int64(capacity), maxSpan) {
		span := float64(capacity) * float64(rate.Period) / float64(rate.N)
		return nil, fmt.Errorf("%w: a capacity of %d at %v takes %s to refill, more than a bucket may span (%s)",
			ErrInvalidCapacity, capacity, rate, readableNs(span), maxSpanText)
	}
	p := &tbParams{iv: iv, capacity: int64(capacity), tau: iv.Add(ftime{}, int64(capacity)), hot: new(atomic.Pointer[tbHot])}
	p.setLending()
	return p, nil
}

// setLending works out whether p can lend the global key's TAT, and in
// what unit: 1/unit ns, where unit is iv.Den over the greatest common
// divisor of iv.Den, iv's fraction and tau's, so that iv, tau and every
// TAT they make from whole instants are whole numbers of units. It lends
// if tau in units is at most maxUnits and now may run at least a minute
// past an anchor (span) before the word must be anchored afresh.
func (p *tbParams) setLending() {
	den := p.iv.Den
	if den <= 0 {
		return
	}
	g := gcd(gcd(den, p.iv.R), p.tau.Fr)
	u := den / g
	if p.iv.Q > maxUnits/u || p.tau.Ns > maxUnits/u {
		return
	}
	p.unit, p.fracPerU = u, g
	p.ivU = p.iv.Q*u + p.iv.R/g
	p.tauU = p.tau.Ns*u + p.tau.Fr/g
	p.span = maxUnits / u
	p.lends = p.tauU <= maxUnits && p.span >= int64(time.Minute)
}

// gcd is the greatest common divisor of a and b, not both zero.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// SetRate changes the rate and capacity of every key, from each key's next
// decision on, atomically: a decision uses either the old parameters or
// the new ones, never a mix. It validates as NewTokenBucket does and
// returns the same errors, leaving the limiter unchanged on error.
//
// Each key keeps the tokens it held at the change, capped at the new
// capacity, and refills at the new rate from then on. Bookings made before
// the change (by Reserve or Wait) keep the instant they were given; a key
// with bookings ahead is empty until the latest of them acts, and then
// refills at the new rate. A Cancel of a booking made before the change
// gives nothing back (its tokens stay taken). A key idle through more than
// eight changes is taken, at the oldest change remembered, as full with
// that change's capacity if it was full, and as empty until it would have
// been full otherwise. Over any interval in which it stays in the store, a
// key lets through no more than the larger of the two configurations
// allows; a key dropped at rest (full) and seen again after a change
// starts afresh under the new parameters, as a key never seen does. Keys
// with an override (SetOverride) keep theirs.
func (tb *TokenBucket) SetRate(rate Rate, capacity int) error {
	return tb.k.swap(func(old *tbParams, now int64) (*tbParams, error) {
		p, err := newTBParams(rate, capacity)
		if err != nil {
			return nil, err
		}
		p.succeed(old, now)
		tb.closeHot(old, now)
		return p, nil
	})
}

// closeHot takes back the global key's TAT if old lent it, and closes
// old's hot word for good, before the new parameters are published: a
// TAT is lent only by the parameters in force, so that whoever holds the
// key of "" and finds its TAT lent knows where it is (see reclaim).
func (tb *TokenBucket) closeHot(old *tbParams, now int64) {
	h, _ := tb.k.take("", now, false)
	if w := old.hot.Swap(retired); w != nil {
		w.w.Store(hotClosed)
	}
	h.Release()
}

// succeed makes p the parameters after old, from now on.
func (p *tbParams) succeed(old *tbParams, now int64) {
	p.gen, p.since = old.gen+1, now
	h := old.hist
	if len(h) == maxHist {
		h = h[1:]
	}
	p.hist = append(append(make([]tbParams, 0, len(h)+1), h...), *old)
	p.hist[len(p.hist)-1].hist = nil
}

func (p *tbParams) max() int64 { return p.capacity }

// adopt re-expresses s, written under earlier parameters, in p's: it
// replays each change since at the instant it happened (or now, if that is
// earlier: a decision that read the clock before the change), with rebase.
// A state older than the history is taken, at the oldest change kept, as
// full with that change's capacity if its TAT had passed then, and as
// empty until its TAT otherwise (the parameters it was written under being
// gone): it never holds more tokens than the capacity in force from that
// change on, nor acts before a booking it holds.
func (p *tbParams) adopt(s *tbState, now int64) {
	h := p.hist
	i := len(h) - 1
	for i >= 0 && h[i].gen != s.gen {
		i--
	}
	if i < 0 {
		o := &h[0]
		if t := min(o.since, now); s.tat.NotAfter(ftime{Ns: t}) {
			s.tat = ftime{Ns: t} // full
		} else {
			s.tat = emptyAt(s.tat, o.tau)
		}
		s.gen, i = o.gen, 0
	}
	for j := i + 1; j < len(h); j++ {
		h[j].rebase(&h[j-1], s, now)
	}
	p.rebase(&h[len(h)-1], s, now)
}

// rebase re-expresses s from old's parameters in p's, at the change (or
// now, if earlier): the tokens the bucket held then under old, capped at
// p's capacity. A bucket in debt then (bookings ahead) keeps the instant
// at which it is empty, that of its latest booking: tokens come after it
// at p's rate. Keeping the debt in tokens instead would let a faster rate
// book new events beside the old ones, which keep their instants.
func (p *tbParams) rebase(old *tbParams, s *tbState, now int64) {
	p.rebaseAt(old, s, min(p.since, now))
}

// rebaseAt is rebase at the instant at: the change to p from old that an
// override (or its removal) makes for one key.
func (p *tbParams) rebaseAt(old *tbParams, s *tbState, at int64) {
	t := ftime{Ns: at}
	base := s.tat
	if base.NotAfter(t) {
		base = t
	}
	fullOld := ftime{Ns: t.Ns + old.tau.Ns, Fr: old.tau.Fr}
	fullNew := ftime{Ns: t.Ns + p.tau.Ns, Fr: p.tau.Fr}
	if base.NotAfter(fullOld) {
		tokens := min(old.iv.Count(old.iv.Diff(fullOld, base)), p.capacity)
		s.tat = p.iv.Sub(fullNew, tokens)
	} else {
		s.tat = emptyAt(old.iv.Diff(base, old.tau), p.tau)
	}
	s.gen = p.gen
}

// emptyAt is the TAT, under burst tolerance tau, of a bucket empty at e
// (in another rate's units, so rounded up to a whole nanosecond): the
// next token comes one interval after e.
func emptyAt(e, tau ftime) ftime { return ftime{Ns: e.CeilNs() + tau.Ns, Fr: tau.Fr} }

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store.
func (tb *TokenBucket) Allow(key string) bool {
	if tb.k.obs != nil {
		return tb.k.allowObserved(key)
	}
	// allowAt's body, written out: Allow is the hot path, and allowAt is
	// too large to inline.
	now := tb.k.nc.now()
	if len(key) == 0 {
		if p := tb.k.ps.p.Load(); p.lends {
			return tb.allowGlobal(p, now)
		}
	}
	h, _ := tb.k.st.Take(key, now, true)
	p := tb.k.ps.p.Load()
	if h.Flagged() { // an override: the key's own parameters
		p = tb.k.overrideOf(key, p)
	}
	ok := p.allowOne(h.State(), now)
	h.Release()
	return ok
}

// allowOne is admit(s, now, 1, 0), Allow's case, reduced to its answer:
// one token now, booked if it conforms.
func (p *tbParams) allowOne(s *tbState, now int64) bool {
	if s.gen != p.gen {
		p.adopt(s, now)
	}
	base := s.tat
	if base.Ns < now {
		base = ftime{Ns: now}
	}
	next := p.iv.Next(base)
	if !next.NotAfter(ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr}) {
		return false
	}
	s.tat = next
	return true
}

// nanoClock and allowAt make a TokenBucket an allowerAt: Fair reads the
// bucket's clock and hands the reading to allowAt, which is Allow at that
// instant (with an observer, Allow itself).
func (tb *TokenBucket) nanoClock() nanoClock { return tb.k.nc }

func (tb *TokenBucket) allowAt(key string, now int64) bool {
	if tb.k.obs != nil {
		return tb.k.allowObserved(key)
	}
	if len(key) == 0 {
		if p := tb.k.ps.p.Load(); p.lends {
			return tb.allowGlobal(p, now)
		}
	}
	h, _ := tb.k.st.Take(key, now, true)
	p := tb.k.ps.p.Load()
	if h.Flagged() {
		p = tb.k.overrideOf(key, p)
	}
	ok := p.allowOne(h.State(), now)
	h.Release()
	return ok
}

// allowGlobal is Allow on the global key "" at now under p, the
// parameters in force, if they lend (see setLending; under other
// parameters the key's TAT is never lent, and Allow takes its slot as any
// key's). While the key's slot has lent its TAT to p's word, a call steps
// it there by one compare-and-swap, without the slot: the step of admit
// for one event with no wait, exactly, in units of 1/p.unit ns from the
// word's anchor. A refusal writes nothing. Anything else (the TAT not
// lent, the parameters replaced, now too far from the anchor) takes the
// slot.
//
// A word, once read, can only move forward while lent (each step adds an
// interval to a TAT at least now), is lent again only under the same
// parameters and anchor, and once closed stays closed: a compare-and-swap
// that succeeds acted on the TAT as it stood, under the parameters and
// anchor it was lent with.
func (tb *TokenBucket) allowGlobal(p *tbParams, now int64) bool {
	if h := p.hot.Load(); h != nil {
		if d := now - h.anchor; d >= 0 && d <= p.span {
			nowU := d * p.unit
			for w := h.w.Load(); w&lentBit != 0; w = h.w.Load() {
				next := max(int64(w&^lentBit), nowU) + p.ivU
				if next-nowU > p.tauU {
					return false
				}
				if h.w.CompareAndSwap(w, lentBit|uint64(next)) {
					return true
				}
			}
		}
	}
	return tb.allowGlobalSlot(now)
}

// allowGlobalSlot is allowGlobal through the key's slot: it takes back a
// TAT lent, decides, and lends the TAT again if it may. A word anchored
// afresh is allocated with the slot let go, and lent at the next call.
func (tb *TokenBucket) allowGlobalSlot(now int64) bool {
	h, _ := tb.k.st.Take("", now, true)
	p := tb.k.ps.p.Load()
	s := h.State()
	if h.Flagged() { // an override: never lent
		ok := tb.k.overrideOf("", p).allowOne(s, now)
		h.Release()
		return ok
	}
	p.reclaim(s)
	ok := p.allowOne(s, now)
	anchor, fresh := p.lend(s, now)
	h.Release()
	if fresh {
		p.anchor(anchor)
	}
	return ok
}

// lend lends the TAT of s, the global key's state under p, the parameters
// in force, held by the caller with no override, to p's word, if p lends
// and the state was written under p with a TAT of whole units that the
// word's anchor can hold, now not too far past it. If the word cannot
// (none yet, or its anchor too far from now or the TAT), lend lends
// nothing and reports an anchor for a new word, now, if a word anchored
// there can hold the TAT.
func (p *tbParams) lend(s *tbState, now int64) (anchor int64, fresh bool) {
	if !p.lends || s.gen != p.gen || s.tat.Fr%p.fracPerU != 0 || s.tat.Ns < 0 || s.tat.Ns >= lentNs {
		return 0, false
	}
	h := p.hot.Load()
	if h == retired {
		return 0, false
	}
	if h != nil {
		d, dt := now-h.anchor, s.tat.Ns-h.anchor
		if d >= 0 && d <= p.span/2 && dt >= 0 && dt <= p.span {
			if h.w.CompareAndSwap(0, lentBit|uint64(dt*p.unit+s.tat.Fr/p.fracPerU)) {
				s.tat = ftime{Ns: lentNs}
			}
			return 0, false
		}
	}
	// A word anchored at now would hold the TAT (after a decision it is
	// at least now) unless a debt takes it further than span ahead.
	if dt := s.tat.Ns - now; dt < 0 || dt > p.span {
		return 0, false
	}
	return now, true
}

// anchor replaces p's word, if it is not lent and p's is not retired, by
// a new word anchored at a: it allocates, so is called with the key of ""
// let go, and the word is lent at the next call through the slot.
func (p *tbParams) anchor(a int64) {
	nh := &tbHot{anchor: a}
	for {
		h := p.hot.Load()
		if h == retired || (h != nil && !h.w.CompareAndSwap(0, hotClosed)) {
			return // retired, lent since, or closed by another's anchor
		}
		if p.hot.CompareAndSwap(h, nh) {
			return
		}
		// another's anchor came first: close it too, or leave it if lent
	}
}

// reclaim takes back the TAT that s, the global key's state, held by the
// caller, has lent, if it has: it is in the word of p, the parameters in
// force, which retire theirs for good before they are replaced
// (closeHot). Every holder of the key's slot reclaims before it reads the
// state: keyed.take, the store's atRest, allowGlobalSlot.
func (p *tbParams) reclaim(s *tbState) {
	if s.tat.Ns != lentNs {
		return
	}
	h := p.hot.Load()
	x := int64(h.w.Swap(0) &^ lentBit)
	s.tat = ftime{Ns: h.anchor + x/p.unit, Fr: x % p.unit * p.fracPerU}
}

func (p *tbParams) init(s *tbState, now int64) { *s = tbState{tat: ftime{Ns: now}, gen: p.gen} }

func (p *tbParams) keyGen(s *tbState) uint32 { return s.kgen }

func (p *tbParams) reset(s *tbState, now int64, gen uint32) {
	p.init(s, now)
	s.kgen = gen
}

// atRest: the bucket is full. Under a larger capacity than it was written
// under, a state full then may not be full now.
func (p *tbParams) atRest(s *tbState, now int64) bool {
	p.reclaim(s) // the global key's, if lent: under the key's lock, like every caller
	if s.gen != p.gen {
		c := *s
		p.adopt(&c, now)
		return c.tat.NotAfter(ftime{Ns: now})
	}
	return s.tat.NotAfter(ftime{Ns: now})
}

// admit: n tokens conform at the instant TAT+n/r-C/r (rounded up to a
// whole nanosecond), or now if that is earlier; booking them moves TAT on
// n intervals. A peek (n == 0) changes nothing, not even a TAT in the past.
func (p *tbParams) admit(s *tbState, now, n, maxWait int64) (b booked, ok bool) {
	if s.gen != p.gen {
		p.adopt(s, now)
	}
	base := s.tat
	if base.Ns < now {
		base = ftime{Ns: now}
	}
	var next ftime
	if n == 1 { // one token (AllowN, Reserve or Wait of one): Next, without Add's division
		next = p.iv.Next(base)
	} else {
		next = p.iv.Add(base, n)
	}
	full := ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr} // TAT of an empty bucket
	act := now
	if n > 0 && !next.NotAfter(full) { // a peek takes nothing: it conforms now, whatever is booked ahead
		act += p.iv.Diff(next, full).CeilNs() // next - tau, rounded up
	}
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return booked{act: act}, false
	}
	if n > 0 {
		s.tat = next
	}
	return booked{act: act, end: next}, true
}

// describe reads the bucket from TAT (or now, if later): the tokens it
// holds, and when it is full again. A booking that must wait leaves none.
func (p *tbParams) describe(s *tbState, now int64, b booked, ok bool) (d Decision) {
	base := s.tat
	if base.Ns < now {
		base = ftime{Ns: now}
	}
	d.Limit = int(p.capacity)
	d.Allowed = ok && b.act == now
	if !ok || d.Allowed {
		full := ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr}
		d.Remaining = int(min(p.iv.Count(p.iv.Diff(full, base)), p.capacity))
	}
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = durationNs(base.CeilNs() - now)
	return d
}

// unstep gives back a booking of n tokens that moved TAT to b.end, if at
// <= b.act and it is the latest booking still held: TAT is still b.end.
// TAT then moves back n intervals, to where the booking found it, exactly
// as if it had never been made. A booking with a later one still held gives
// nothing back: its slots stay booked, empty. Giving back any of them would
// let a new booking take slots that the later bookings, already timed, sit
// on, and the events of both would act closer together than the rate
// allows; what a partial give-back could safely return depends on when
// those bookings act, which TAT does not record.
//
// TAT is b.end only if every booking made after this one has been given
// back: each booking leaves TAT beyond where it found it, and a give-back
// returns it only to where the latest booking found it.
func (p *tbParams) unstep(s *tbState, n int64, b booked, at int64) {
	if at > b.act || s.tat != b.end || s.gen != p.gen {
		return // due (the tokens were spent), or not the latest
	}
	s.tat = p.iv.Sub(s.tat, n)
}

// settle: a surplus of k = n − actual tokens comes back by the tail rule of
// unstep, at any time, even after the time to act: if the booking is still
// the latest held on its key (TAT is still b.end, in the same generations),
// TAT moves back exactly k intervals, as if the booking had been made for
// actual tokens; otherwise nothing comes back and the k tokens stay taken.
// That the time to act has passed changes nothing: the events that acted
// are the actual ones, and TAT still lies where the booking of actual
// tokens would have left it, so the bucket holds what it would have held.
//
// An excess of e = actual − n tokens is booked as debt, whoever booked
// since and with no admission check (the work was done): TAT moves on e
// intervals, from where it stands, as if the booking had taken actual
// tokens and every later one had followed it. A bucket already full again
// (TAT behind now) takes the debt from now: it is charged on the full
// bucket, as on a key the store dropped at rest and set up afresh, so that
// dropping a key at rest changes no settlement. A debt is capped so that TAT
// never passes now + 2⁶⁰ ns (about 36.5 years): what lies beyond is
// forgiven.
func (p *tbParams) settle(s *tbState, n, actual int64, b booked, now int64, same bool) {
	switch {
	case actual < n:
		if same && s.tat == b.end && s.gen == p.gen {
			s.tat = p.iv.Sub(s.tat, n-actual)
		}
	case actual > n:
		if s.gen != p.gen {
			p.adopt(s, now)
		}
		// From now at the earliest: a bucket refilled since is full, as a
		// key dropped at rest and set up again is, so the cost of a late
		// excess does not depend on whether the store kept the key.
		if s.tat.NotAfter(ftime{Ns: now}) {
			s.tat = ftime{Ns: now}
		}
		s.tat = debtTo(p.iv, s.tat, actual-n, now)
	}
}

var _ Limiter = (*TokenBucket)(nil)
