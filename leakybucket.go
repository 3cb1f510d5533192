package ratelimit

// LeakyBucket is a leaky bucket per key, used as a shaper: a queue of at
// most C events drained at a constant rate r, so that what passes never
// bursts. The output serves one slot every 1/r (exactly: 3 per second gives
// slots 333,333,333⅓ ns apart, kept as integer nanoseconds plus an exact
// fraction, so long runs do not drift). An event is given the slot after the
// last one booked or, if the queue is empty, a slot starting at its arrival,
// and may act at the start of that slot, rounded up to a whole nanosecond
// (FIFO: no booking overtakes an earlier one). It holds its place in the queue
// from its booking until the end of its slot, so the queue holds
// ceil((E - t) * r) events at time t, where E is the end of the last booked
// slot.
//
// Methods:
//   - Wait and Reserve take places in the queue: the delay is the time until
//     the booking's slot starts. While the queue is busy, successive
//     bookings of one event start exactly 1/r apart. If the queue has fewer than n free places the
//     booking is refused at once: Reserve returns a Reservation with OK false
//     and WaitN a *LimitError matching ErrLimited (see WaitN below).
//   - Allow and AllowN never wait: they succeed only if the events can
//     depart now, that is when the queue is empty. With a frozen clock,
//     exactly one Allow succeeds per key; the next succeeds 1/r later.
//   - n events take n consecutive slots and act together at the start of
//     the first one; the next booking starts n/r later. This is a packet of
//     n units on a link of r units per second: it starts at once on an idle
//     link and holds the link for n/r. (Had the delay been the last slot's,
//     AllowN of more than one event could never succeed and a WaitN of n
//     would wait (n-1)/r longer than the queue requires.) n ranges over
//     [0, C]; more returns ErrExceedsLimit.
//
// Decision fields, from AllowN (and Reservation.Decision):
//   - Limit is C, the size of the queue.
//   - Remaining is the number of free places in the queue after the
//     decision: how many more events Reserve or Wait could book now. It is
//     not how many Allow would accept: Allow needs an empty queue.
//   - RetryAfter is zero when the events may act at once. For a refused
//     AllowN it is the time until the queue is empty (the events could then
//     depart at once); for a refused Reserve, the time until n places are
//     free. Either way, the same call made exactly RetryAfter later succeeds
//     if nothing else books in between, and 1 ns earlier it is refused. For
//     a granted Reserve it is the delay booked.
//   - ResetAfter is the time until the queue is empty (at rest).
//
// WaitN with a context deadline fails at once, consuming nothing, if the
// booking's slot would start after the deadline (a *LimitError matching
// ErrLimited and context.DeadlineExceeded, RetryAfter the wait the slot
// needs), or if the queue lacks n free places (matching ErrLimited,
// RetryAfter the time until they free; the error also matches
// context.DeadlineExceeded, with RetryAfter the wait until the queue's end,
// when the queue's last slot ends after the deadline, since then no retry
// could succeed in time).
//
// Cancel, at or before the booking's time to act (the start of its first
// slot), gives its places back when the booking is the tail of the queue:
// every booking made after it has already been given back by its own
// Cancel. The queue then ends where the booking began, so the next booking
// takes its slots. Cancelling bookings in the reverse order of booking thus
// gives every one back. A booking with a later booking still in the queue
// cannot be given back without moving that booking off the slot it was
// promised, or keeping state per booking: its slots stay in the queue,
// empty (the output idles through them), and their places free as the
// queue drains past them. The tail is told exactly at any rate, also when
// slots are finer than the clock: the booking remembers where it left the
// queue's end. Cancel after the time to act gives nothing back: the events
// have acted.
//
// A clock that moves backwards never frees places: the queue is measured
// from the new time back to the same end, so it looks fuller, and its end
// moves only forwards, except by Cancel. A key is at rest when its queue is
// empty (E <= now); the store may drop it then without changing any
// decision. State per key: 16 bytes.
//
// A leaky bucket used as a meter (events that overflow the bucket are
// dropped, nothing is queued or delayed) is the same function as the token
// bucket: see TokenBucket. The two are related here too: without Cancel, a
// LeakyBucket admits into its queue exactly the events that a TokenBucket of
// the same rate and capacity allows (Reserve here succeeds when AllowN there
// would), and differs only in when they act: the token bucket lets them act
// at once, in bursts of up to C; the leaky bucket spaces them 1/r apart.
//
// Build it with NewLeakyBucket. It is safe for concurrent use. Most callers
// want Wait (to be shaped) or Allow (to drop what cannot go now).
type LeakyBucket struct {
	keyed[lbState, *lbAlgo]
}

// lbState is a key's queue: the end of its last booked slot. The queue is
// empty when end <= now.
type lbState struct {
	end ftime
}

// lbAlgo has the token bucket's parameters, built and checked by the same
// code: the slot length iv = 1/r, the queue size C and tau = C/r, the
// longest the queue can reach ahead of now.
type lbAlgo tbAlgo

// NewLeakyBucket returns a leaky bucket per key: a queue of capacity events
// drained at rate. It returns an error matching ErrInvalidRate if the
// rate's count or period is not positive, and ErrInvalidCapacity if
// capacity is not positive or capacity/rate (the time a full queue takes to
// drain) exceeds about 36.5 years (2⁶⁰ ns).
func NewLeakyBucket(rate Rate, capacity int, opts ...Option) (*LeakyBucket, error) {
	params, err := newTBAlgo(rate, capacity)
	if err != nil {
		return nil, err
	}
	k, err := newKeyed[lbState]((*lbAlgo)(params), capacity, opts)
	if err != nil {
		return nil, err
	}
	return &LeakyBucket{k}, nil
}

// Allow reports whether one event for key may depart now (its queue is
// empty), and books its slot if so. It does not allocate for a key already
// in the store.
func (lb *LeakyBucket) Allow(key string) bool {
	if lb.obs != nil {
		return lb.allowObserved(key)
	}
	now := lb.nc.now()
	ent, rel := lb.st.acquire(key, now)
	s := &ent.s
	ok := s.end.notAfter(ftime{ns: now})
	if ok {
		s.end = lb.alg.iv.add(ftime{ns: now}, 1)
	}
	ent.unlock(rel)
	return ok
}

func (a *lbAlgo) init(s *lbState, now int64) { s.end = ftime{ns: now} }

func (a *lbAlgo) atRest(s *lbState, now int64) bool { return s.end.notAfter(ftime{ns: now}) }

// free returns the free places of a queue ending at end, at now; full is
// now + tau, the end of a full queue.
func (a *lbAlgo) free(full, end ftime) int {
	return int(min(a.iv.count(a.iv.diff(full, end)), a.capacity))
}

func (a *lbAlgo) step(s *lbState, now, n, maxWait int64) (d Decision, b booked, ok bool) {
	start := s.end // the booking's first slot: the queue's end, or now if empty
	if start.ns < now {
		start = ftime{ns: now}
	}
	full := ftime{ns: now + a.tau.ns, fr: a.tau.fr}
	delay := start.ceilNs() - now
	d.Limit = int(a.capacity)
	if n == 0 {
		d.Allowed = true
		d.Remaining = a.free(full, start)
		d.ResetAfter = durationNs(delay)
		return d, booked{act: now}, true
	}
	end := a.iv.add(start, n)
	fits := end.notAfter(full)
	if !fits || (maxWait >= 0 && delay > maxWait) {
		retry := delay // the slot is too late: report the wait it needs
		if !fits && (maxWait < 0 || delay <= maxWait) {
			// Too few places: n free when end - tau <= now.
			retry = a.iv.diff(end, a.tau).ceilNs() - now
		}
		d.Remaining = a.free(full, start)
		d.RetryAfter = durationNs(retry)
		d.ResetAfter = durationNs(delay)
		return d, booked{act: now + retry}, false
	}
	s.end = end // at most C/r <= maxSpan ahead of now: fits saw to it
	d.Allowed = delay == 0
	d.Remaining = a.free(full, end)
	d.RetryAfter = durationNs(delay)
	d.ResetAfter = durationNs(end.ceilNs() - now)
	return d, booked{act: now + delay, end: end}, true
}

// unstep gives back a booking of n slots that ended the queue at b.end,
// if its first slot has not started (at <= b.act) and it is the tail of
// the queue: the queue still ends at b.end. That is exact at any rate: a
// booking ends the queue strictly later than the queue ended before it,
// and the queue's end comes back only to where a cancelled tail began, so
// while a booking is held no other ends where it does.
func (a *lbAlgo) unstep(s *lbState, n int64, b booked, at int64) {
	if at > b.act || s.end != b.end {
		return // started, or not the tail: its slots stay, empty
	}
	s.end = a.iv.sub(s.end, n)
}

var _ Limiter = (*LeakyBucket)(nil)
