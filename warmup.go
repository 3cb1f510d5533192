package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

// WarmUp configures the slow start of a WarmingBucket.
type WarmUp struct {
	// Period is how long the rate takes to ramp from the cold rate to the
	// full rate. It must be positive.
	Period time.Duration
	// ColdFactor is how many times slower than the full rate a cold key
	// starts: the cold rate is rate/ColdFactor. Zero means 3 (Guava's
	// coldFactor); otherwise it must be between 1 and 1000 (1: no warm-up).
	ColdFactor int
	// IdleAfter is how long a key's bucket must have stayed full before
	// the key counts as idle and goes cold again. Zero means Period. It
	// must not be negative.
	IdleAfter time.Duration
}

// WarmingBucket is a token bucket per key whose rate ramps up after the
// key has been idle (slow start, as Guava's SmoothWarmingUp): a cold
// service, or a client back after a pause, first gets rate/ColdFactor and
// then, linearly over WarmUp.Period, the full rate. The key "" gives one
// global bucket that warms as a whole.
//
// It is GCRA, as TokenBucket, with an emission interval that depends on how
// long the key has been warming. With I the full rate's interval (exact,
// with its fraction of a nanosecond), C the capacity, k the cold factor, W
// the warm-up period and I_c = ⌈k·I⌉ ns the cold interval:
//
//   - A key is idle at t when its bucket has been full for at least
//     IdleAfter: t >= TAT + IdleAfter (TAT, the theoretical arrival time,
//     is when the bucket is full again, rounded up to a whole nanosecond).
//     A key never seen is idle. The first request (n > 0, allowed or not)
//     decided on an idle key starts a ramp at its decision instant s.
//     A key that is not idle keeps its ramp, whatever its demand: a steady
//     trickle below the full rate, with gaps shorter than IdleAfter plus
//     the time the bucket takes to refill, is not idle, and its ramp ends W
//     after it started.
//   - An event decided at t, x = t − s into its ramp, costs the interval
//     d(x) = ⌈I_c·W / (W + (k−1)·x)⌉ ns while x < W, and I exactly from
//     x >= W. So the rate 1/d ramps linearly in x from r/k (rounded down
//     to a whole-nanosecond interval) to r, never above r·(1 + (k−1)x/W)/k,
//     and d(x) >= I always.
//   - n events decided at t conform iff max(TAT, t) + (n−1)·d ≤ t + (C−1)·I;
//     they move TAT to max(TAT, t) + n·d. A booking (Reserve, Wait) that does
//     not conform now is timed at the instant it would, rounded up to a
//     whole nanosecond, and costs the interval of its decision instant.
//
// Bounds. For the events e₁ … e_m (in decision order, each counted once per
// event of its call) decided in any interval [a, b] that act at once (Allow,
// AllowN):
//
//   - d(e₁) + … + d(e_{m−1}) ≤ (b − a) + (C−1)·I: the intervals charged,
//     each taken in the ramp position of its own decision, fill at most
//     the interval's length plus the burst;
//   - hence, as d(x) >= I, at most C + ⌊(b − a)/I⌋ events: never more than a
//     TokenBucket of the full rate and capacity C;
//   - and within one ramp, as d falls with x, at most 1 + ⌊((b − a) +
//     (C−1)·I) / d(b − s)⌋: just after idle, at most 1 + ⌊(C−1)/k⌋ events
//     at once, then about the cold rate.
//
// Reset makes a key idle (cold). Cancel gives back only the latest booking
// on a key (TAT moves back to where that booking found it), and only before
// its time to act; an earlier booking is not given back. A key is at rest
// when it is idle; the store may then drop it without changing any
// decision, since a key set up afresh is idle too.
//
// Build it with NewWarmingBucket. It is safe for concurrent use. Allow does
// not allocate for a key already in the store. It has no SetRate or
// overrides.
type WarmingBucket struct {
	k keyed[wbState, wbParams, *wbParams]
}

// wbState is a key's TAT, the TAT before its latest booking (what Cancel
// restores), the start of its ramp and its generation (its resets).
type wbState struct {
	tat, prev ftime
	ramp      int64
	kgen      uint32
}

// wbParams is a warming bucket's parameters, immutable once built.
type wbParams struct {
	iv       interval
	capacity int64
	slack    ftime // (C−1)·I: the backlog at which an event still conforms
	cold     int64 // ⌈k·I⌉ ns
	factor   int64 // k
	warm     int64 // W ns
	idle     int64 // IdleAfter ns
}

// NewWarmingBucket returns a warming bucket per key of the given capacity,
// refilled at rate once warm. It returns an error matching ErrInvalidRate
// or ErrInvalidCapacity as NewTokenBucket does, and ErrInvalidOption if
// w.Period is not positive, w.ColdFactor is outside 0…1000, w.IdleAfter is
// negative, or the cold bucket (capacity·ColdFactor intervals) or the
// warm-up period times ColdFactor spans more than about 36.5 years.
func NewWarmingBucket(rate Rate, capacity int, w WarmUp, opts ...Option) (*WarmingBucket, error) {
	p, err := newWBParams(rate, capacity, w)
	if err != nil {
		return nil, err
	}
	l := new(WarmingBucket)
	if err := l.k.setup(p, opts); err != nil {
		return nil, err
	}
	return l, nil
}

func newWBParams(rate Rate, capacity int, w WarmUp) (*wbParams, error) {
	tp, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, err
	}
	k := int64(w.ColdFactor)
	if k == 0 {
		k = 3
	}
	switch {
	case w.Period <= 0:
		return nil, fmt.Errorf("%w: warm-up period must be positive, got %v", ErrInvalidOption, w.Period)
	case k < 1 || k > 1000:
		return nil, fmt.Errorf("%w: cold factor must be between 1 and 1000, got %d", ErrInvalidOption, w.ColdFactor)
	case w.IdleAfter < 0:
		return nil, fmt.Errorf("%w: idle time must not be negative, got %v", ErrInvalidOption, w.IdleAfter)
	case int64(w.Period) > maxSpan/k:
		return nil, fmt.Errorf("%w: a warm-up period of %v times a cold factor of %d exceeds %s",
			ErrInvalidOption, w.Period, k, maxSpanText)
	case !tp.iv.Within(tp.capacity*k, maxSpan): // capacity·k <= 2⁶⁰·1000: no overflow
		return nil, fmt.Errorf("%w: a capacity of %d at %v cold (factor %d) spans more than %s",
			ErrInvalidOption, capacity, rate, k, maxSpanText)
	}
	idle := int64(w.IdleAfter)
	if idle == 0 {
		idle = int64(w.Period)
	}
	return &wbParams{
		iv:       tp.iv,
		capacity: tp.capacity,
		slack:    tp.iv.Add(ftime{}, tp.capacity-1),
		cold:     tp.iv.Add(ftime{}, k).CeilNs(),
		factor:   k,
		warm:     int64(w.Period),
		idle:     idle,
	}, nil
}

// cost is the interval of an event decided x ns into its ramp, in whole
// nanoseconds, or 0 for the exact full-rate interval (x >= W):
// ⌈I_c·W / (W + (k−1)·x)⌉, in 128 bits. The quotient is at most I_c (the
// divisor is at least W), so it fits; the divisor is at most k·W <= 2⁶⁰.
func (p *wbParams) cost(x int64) int64 {
	if x >= p.warm {
		return 0
	}
	x = max(x, 0) // a clock that went back: still at the ramp's start
	den := uint64(p.warm + (p.factor-1)*x)
	hi, lo := bits.Mul64(uint64(p.cold), uint64(p.warm))
	q, r := bits.Div64(hi, lo, den)
	if r != 0 {
		q++
	}
	return int64(q)
}

// step returns t plus k intervals of cost d (0: the exact interval).
func (p *wbParams) step(t ftime, k, d int64) ftime {
	if d == 0 {
		return p.iv.Add(t, k)
	}
	t.Ns += k * d
	return t
}

// Allow reports whether one event for key may happen now, and records it
// if so. It does not allocate for a key already in the store.
func (wb *WarmingBucket) Allow(key string) bool {
	if wb.k.obs != nil {
		return wb.k.allowObserved(key)
	}
	now := wb.k.nc.now()
	h, _ := wb.k.st.Take(key, now, true)
	_, ok := wb.k.ps.p.Load().admit(h.State(), now, 1, 0)
	h.Release()
	return ok
}

func (p *wbParams) init(s *wbState, now int64) {
	*s = wbState{tat: ftime{Ns: now}, prev: ftime{Ns: now}, ramp: now}
}

func (p *wbParams) keyGen(s *wbState) uint32 { return s.kgen }

// reset makes the key idle at now: it starts a ramp at its next event.
func (p *wbParams) reset(s *wbState, now int64, gen uint32) {
	*s = wbState{tat: ftime{Ns: now - p.idle}, prev: ftime{Ns: now - p.idle}, ramp: now, kgen: gen}
}

// idleAt reports whether the key is idle at now: full for IdleAfter.
func (p *wbParams) idleAt(s *wbState, now int64) bool {
	return s.tat.CeilNs() <= now-p.idle
}

// atRest: the key is idle, so that one set up afresh decides the same.
func (p *wbParams) atRest(s *wbState, now int64) bool { return p.idleAt(s, now) }

func (p *wbParams) max() int64 { return p.capacity }

// ramp is the ramp start an event decided at now is charged from.
func (p *wbParams) rampOf(s *wbState, now int64) int64 {
	if p.idleAt(s, now) {
		return now
	}
	return s.ramp
}

// admit: see WarmingBucket. A peek (n == 0) changes nothing.
func (p *wbParams) admit(s *wbState, now, n, maxWait int64) (b booked, ok bool) {
	ramp, tat := s.ramp, s.tat
	if p.idleAt(s, now) { // as a key set up afresh at now
		ramp, tat = now, ftime{Ns: now}
		if n > 0 { // a request starts the ramp, allowed or not
			s.tat, s.prev, s.ramp = tat, tat, ramp
		}
	}
	d := p.cost(now - ramp)
	base := tat
	if base.Ns < now {
		base = ftime{Ns: now}
	}
	act := now
	if n > 0 {
		last := p.step(base, n-1, d) // where the last of the n events finds TAT
		if lim := (ftime{Ns: now + p.slack.Ns, Fr: p.slack.Fr}); !last.NotAfter(lim) {
			act += p.iv.Diff(last, lim).CeilNs()
		}
	}
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return booked{act: act}, false
	}
	if n == 0 {
		return booked{act: act}, true
	}
	next := p.step(base, n, d)
	s.prev, s.tat, s.ramp = tat, next, ramp
	return booked{act: act, end: next}, true
}

// describe: Remaining is how many more events would conform now at the
// current interval; ResetAfter is when the bucket is full again (it may
// still be warming then).
func (p *wbParams) describe(s *wbState, now int64, b booked, ok bool) (d Decision) {
	base := s.tat
	if base.Ns < now {
		base = ftime{Ns: now}
	}
	d.Limit = int(p.capacity)
	d.Allowed = ok && b.act == now
	if lim := (ftime{Ns: now + p.slack.Ns, Fr: p.slack.Fr}); (!ok || d.Allowed) && base.NotAfter(lim) {
		gap := p.iv.Diff(lim, base)
		var more int64
		if c := p.cost(now - p.rampOf(s, now)); c == 0 {
			more = p.iv.Count(gap)
		} else {
			more = gap.Ns / c
		}
		d.Remaining = int(min(more+1, p.capacity))
	}
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = durationNs(base.CeilNs() - now)
	return d
}

// unstep gives back the latest booking, before its time to act: TAT moves
// back to where the booking found it. The ramp it may have started stays.
func (p *wbParams) unstep(s *wbState, n int64, b booked, at int64) {
	if at > b.act || s.tat != b.end {
		return
	}
	s.tat = s.prev
}

// settle (used by no method of WarmingBucket, which has no Take): a
// surplus gives nothing back; an excess moves TAT on at the interval of
// now, from now at the earliest.
func (p *wbParams) settle(s *wbState, n, actual int64, b booked, now int64, same bool) {
	if actual <= n {
		return
	}
	ramp := p.rampOf(s, now)
	if s.tat.NotAfter(ftime{Ns: now}) {
		s.tat = ftime{Ns: now}
	}
	s.prev, s.ramp = s.tat, ramp
	s.tat = p.step(s.tat, min(actual-n, p.capacity), p.cost(now-ramp))
}

// AllowN reports whether n events for key may happen now, all or nothing,
// and records them if so. n == 0 peeks. It ignores ctx and fails only on
// invalid n.
func (wb *WarmingBucket) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return wb.k.AllowN(ctx, key, n)
}

// Reserve books n events for key at the earliest time they conform. See
// Limiter and WarmingBucket for what Cancel gives back.
func (wb *WarmingBucket) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	return wb.k.Reserve(ctx, key, n)
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (wb *WarmingBucket) Wait(ctx context.Context, key string) error {
	return wb.k.WaitN(ctx, key, 1)
}

// WaitN blocks until n events for key may happen and records them.
func (wb *WarmingBucket) WaitN(ctx context.Context, key string, n int) error {
	return wb.k.WaitN(ctx, key, n)
}

// Stats describes the keyed store.
func (wb *WarmingBucket) Stats() Stats { return wb.k.Stats() }

// Sweep drops every key at rest (idle) now.
func (wb *WarmingBucket) Sweep() { wb.k.Sweep() }

// Close stops the sweeper goroutine started by WithSweepInterval, if any.
func (wb *WarmingBucket) Close() error { return wb.k.Close() }

// Limit returns the capacity.
func (wb *WarmingBucket) Limit() int { return wb.k.Limit() }

// Reset makes key idle: its next event starts a ramp from the cold rate.
func (wb *WarmingBucket) Reset(key string) { wb.k.Reset(key) }

var _ Limiter = (*WarmingBucket)(nil)
