package ratelimit

// LeakyBucket is a leaky bucket per key, used as a shaper: a queue of at
// most C events drained at a constant rate r, so that what passes never
// bursts. An event is given the slot after the last one booked (or, if the
// queue is empty, a slot starting at its arrival) and acts at the start of
// that slot, rounded up to a whole nanosecond; slots are exactly 1/r apart
// and no booking overtakes an earlier one. n events take n consecutive
// slots and act together at the first; n ranges over [0, C], more returns
// ErrExceedsLimit.
//
//   - Wait, WaitN and Reserve take places in the queue; the delay is the
//     time until the booking's slot starts. A queue with fewer than n free
//     places refuses at once: Reserve returns a Reservation that is not OK,
//     WaitN a *LimitError matching ErrLimited, consuming nothing. WaitN
//     with a deadline its slot would start after fails at once, consuming
//     nothing, with a *LimitError that also matches
//     context.DeadlineExceeded.
//   - Allow and AllowN never wait: they succeed only when the queue is
//     empty, so that the events depart now.
//
// In a Decision, Limit is C; Remaining is the free places in the queue
// after the decision (what Reserve could book now, not what Allow would
// accept); RetryAfter is the delay booked, or for a refusal the exact wait
// after which the same call succeeds if nothing else books (1 ns earlier
// it is refused); ResetAfter is the time until the queue is empty.
//
// Cancel, at or before the time to act, gives the booking's places back
// when it is the tail of the queue (every later booking given back
// already), so cancels in reverse order of booking give every one back;
// otherwise it gives nothing back and the slots stay in the queue, empty.
// A clock that moves backwards never frees places. A key is at rest, and
// may be dropped, when its queue is empty. State per key: 24 bytes.
// Take decides like AllowN and hands back the booking; Reservation.Settle
// settles it at its actual cost. A surplus comes back, at any time, while
// the booking is the tail of the queue: the queue's end moves back by it.
// An excess is booked as debt at the end of the queue, with no admission
// check, so the next booking starts after it; a queue drained empty since
// takes it from now, as a key dropped at rest and set up again would. A
// debt never takes the queue's end beyond 2⁶⁰ ns from now.
// SetRate changes the rate and capacity at run time; SetOverride gives a
// key its own (tiers); Reset makes a key start afresh.
// docs/algorithms.md explains the choices and how it relates to
// LeakyMeter, the leaky bucket used as a meter (the token bucket's
// function).
//
// Build it with NewLeakyBucket. It is safe for concurrent use. Most callers
// want Wait (to be shaped) or Allow (to drop what cannot go now).
type LeakyBucket struct {
	k keyed[lbState, lbParams, *lbParams]
}

// lbState is a key's queue: the end of its last booked slot. The queue is
// empty when end <= now.
type lbState struct {
	end  ftime
	gen  uint32 // the parameters end's fraction of a nanosecond is in
	kgen uint32 // the key's generation (its resets); both wrap at 2³²
}

// lbParams has the token bucket's parameters, built and checked by the same
// code: the slot length iv = 1/r, the queue size C and tau = C/r, the
// longest the queue can reach ahead of now.
type lbParams tbParams

// NewLeakyBucket returns a leaky bucket per key: a queue of capacity events
// drained at rate. It returns an error matching ErrInvalidRate if the
// rate's count or period is not positive, and ErrInvalidCapacity if
// capacity is not positive or capacity/rate (the time a full queue takes to
// drain) exceeds about 36.5 years (2⁶⁰ ns).
func NewLeakyBucket(rate Rate, capacity int, opts ...Option) (*LeakyBucket, error) {
	params, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, err
	}
	l := new(LeakyBucket)
	if err := l.k.setup((*lbParams)(params), opts); err != nil {
		return nil, err
	}
	return l, nil
}

// Allow reports whether one event for key may depart now, and records it
// if so: only when the queue is empty. It does not allocate for a key
// already in the store.
func (lb *LeakyBucket) Allow(key string) bool {
	if lb.k.obs != nil {
		return lb.k.allowObserved(key)
	}
	now := lb.k.nc.now()
	h, _ := lb.k.st.Take(key, now, true)
	p := lb.k.ps.p.Load()
	if h.Flagged() { // an override: the key's own parameters
		p = lb.k.overrideOf(key, p)
	}
	_, ok := p.admit(h.State(), now, 1, 0)
	h.Release()
	return ok
}

// SetRate changes the drain rate and the queue's capacity of every key,
// from each key's next decision on, atomically: a decision uses either the
// old parameters or the new ones, never a mix. It validates as
// NewLeakyBucket does and returns the same errors, leaving the limiter
// unchanged on error.
//
// Each key keeps its queue: the events booked keep their slots, and the
// next slot starts where the queue ends (rounded up to a whole
// nanosecond), spaced at the new rate. A queue longer than the new
// capacity allows takes nothing more until it has drained below it. A
// Cancel after the change gives nothing back (its slots stay, empty).
// Keys with an override (SetOverride) keep theirs.
func (lb *LeakyBucket) SetRate(rate Rate, capacity int) error {
	return lb.k.swap(func(old *lbParams, now int64) (*lbParams, error) {
		p, err := newTBParams(rate, capacity)
		if err != nil {
			return nil, err
		}
		p.gen = old.gen + 1 // the queue needs no history: see adopt
		return (*lbParams)(p), nil
	})
}

func (p *lbParams) max() int64 { return p.capacity }

// adopt re-expresses a queue end written under other parameters in p's:
// rounded up to a whole nanosecond, the fraction being in the old rate's
// units.
func (p *lbParams) adopt(s *lbState) { s.end, s.gen = ftime{Ns: s.end.CeilNs()}, p.gen }

func (p *lbParams) init(s *lbState, now int64) { *s = lbState{end: ftime{Ns: now}, gen: p.gen} }

func (p *lbParams) keyGen(s *lbState) uint32 { return s.kgen }

func (p *lbParams) reset(s *lbState, now int64, gen uint32) {
	p.init(s, now)
	s.kgen = gen
}

func (p *lbParams) atRest(s *lbState, now int64) bool { return s.end.NotAfter(ftime{Ns: now}) }

// free is how many events the queue has room for, its end at end and an
// empty queue's limit at full; none if it reaches beyond full (a capacity
// lowered since it was booked).
func (p *lbParams) free(full, end ftime) int {
	if !end.NotAfter(full) {
		return 0
	}
	return int(min(p.iv.Count(p.iv.Diff(full, end)), p.capacity))
}

// admit: n events take the next n slots of the queue, from its end (or
// now, if it is empty) and depart at the first; they are refused if the
// queue has no room for them, or if their first slot is later than
// maxWait. A peek (n == 0) always conforms, at now.
func (p *lbParams) admit(s *lbState, now, n, maxWait int64) (b booked, ok bool) {
	if s.gen != p.gen {
		p.adopt(s)
	}
	if n == 0 {
		return booked{act: now}, true
	}
	start := s.end // the booking's first slot: the queue's end, or now if empty
	if start.Ns < now {
		start = ftime{Ns: now}
	}
	full := ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr}
	delay := start.CeilNs() - now
	var end ftime
	if n == 1 { // Allow's case, inlined
		end = p.iv.Next(start)
	} else {
		end = p.iv.Add(start, n)
	}
	fits := end.NotAfter(full)
	if !fits || (maxWait >= 0 && delay > maxWait) {
		retry := delay // the slot is too late: report the wait it needs
		if !fits && (maxWait < 0 || delay <= maxWait) {
			retry = p.iv.Diff(end, p.tau).CeilNs() - now
		}
		return booked{act: now + retry}, false
	}
	s.end = end // at most C/r <= maxSpan ahead of now: fits saw to it; gen is p's
	return booked{act: now + delay, end: end}, true
}

// describe reads the queue from its end (or now, if it is empty): the room
// left in it, and when it empties.
func (p *lbParams) describe(s *lbState, now int64, b booked, ok bool) (d Decision) {
	end := s.end
	if end.Ns < now {
		end = ftime{Ns: now}
	}
	full := ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr}
	d.Limit = int(p.capacity)
	d.Allowed = ok && b.act == now
	d.Remaining = p.free(full, end)
	d.RetryAfter = durationNs(b.act - now)
	d.ResetAfter = durationNs(end.CeilNs() - now)
	return d
}

func (p *lbParams) unstep(s *lbState, n int64, b booked, at int64) {
	if at > b.act || s.end != b.end || s.gen != p.gen {
		return // started, or not the tail: its slots stay, empty
	}
	s.end = p.iv.Sub(s.end, n)
}

// settle: a surplus of k = n − actual places comes back by the tail rule
// of unstep, at any time: if the booking is still the tail of the queue
// (its end is still b.end, in the same generations), the queue's end moves
// back exactly k slots, as if the booking had taken actual places; its
// events keep their slot. Otherwise nothing comes back: the slots stay in
// the queue, empty.
//
// An excess of e = actual − n places is booked as debt at the end of the
// queue, with no admission check: the end moves on e slots from where it
// stands, so the next booking starts after them; a queue so pushed beyond
// its capacity takes nothing more until it has drained below it. A queue
// that has drained empty since (its end behind now) takes the debt from
// now, as the empty queue of a key dropped at rest and set up again does:
// dropping a key at rest changes no settlement. The debt is capped so that the queue's
// end never passes now + 2⁶⁰ ns (about 36.5 years).
func (p *lbParams) settle(s *lbState, n, actual int64, b booked, now int64, same bool) {
	switch {
	case actual < n:
		if same && s.end == b.end && s.gen == p.gen {
			s.end = p.iv.Sub(s.end, n-actual)
		}
	case actual > n:
		if s.gen != p.gen {
			p.adopt(s)
		}
		// From now at the earliest: an emptied queue is the empty queue of
		// a key dropped at rest and set up again (see tbParams.settle).
		if s.end.NotAfter(ftime{Ns: now}) {
			s.end = ftime{Ns: now}
		}
		s.end = debtTo(p.iv, s.end, actual-n, now)
	}
}

var _ Limiter = (*LeakyBucket)(nil)
