package ratelimit

import "sync/atomic"

// slLockedAllocs counts the rings fit allocated itself, with the key's
// slot lock held: none on any of the limiter's paths, which plan the
// ring first (see slPlan). The tests read it.
var slLockedAllocs atomic.Int64

// slPlan carries a ring from outside a key's slot lock into the step that
// needs it (keystore rule 2: no allocation under the lock). With the key
// held, the caller asks how many instants the step will hold (admitNeed,
// insertNeed, which change nothing) and what ring that wants (fitSize).
// If the plan's ring fits, it is handed to the step, which moves the log
// into it after its drops; if not, the caller releases the key, allocates
// the ring wanted, takes the key again and asks afresh, as the state may
// have changed meanwhile. The decision is the step's own either way: the
// ring changes where the instants are kept, never which.
//
// A grow is needed only when the step must log more than the ring has
// room for. The first slExactTries tries allocate the size the step wants
// (the usual doubling); a try after that allocates the limit's size,
// which only a limit raised since can outgrow, so the loop ends. A shrink
// is never needed: it is tried once and otherwise skipped, leaving the
// ring as it is until a later step halves it. A ring allocated but not
// used is left to the collector.
type slPlan struct {
	ring []int64
	try  int
}

// slExactTries is how many times a grow allocates the exact size wanted
// before it allocates the limit's size.
const slExactTries = 3

// ready says, with the key held, how a step that will hold need instants
// (0: it logs nothing) may run: with ring handed to it (nil: none
// needed, or a shrink skipped), or, if size > 0, not yet: the caller
// releases the key, allocates a ring of size instants and tries again.
func (pl *slPlan) ready(s *slState, need, limit int32) (ring []int64, size int) {
	if need == 0 {
		return nil, 0
	}
	want := s.fitSize(need, limit)
	if want == 0 {
		return nil, 0
	}
	if want > int32(len(s.ring)) { // a grow: the step needs room for need
		if int32(len(pl.ring)) >= need {
			return pl.ring, 0
		}
		if pl.try++; pl.try > slExactTries {
			return nil, int(max(limit, need))
		}
		return nil, int(want)
	}
	if int32(len(pl.ring)) == want { // a shrink, its ring at hand
		return pl.ring, 0
	}
	if pl.try++; pl.try > 1 {
		return nil, 0 // skipped: a later step shrinks the ring
	}
	return nil, int(want)
}

// alloc allocates a ring of size instants, outside any lock.
func (pl *slPlan) alloc(size int) { pl.ring = make([]int64, size) }

// admitNeed is how many instants admit(s, now, n, maxWait) will hold
// after it: 0 if it logs nothing (a peek, or refused). It changes
// nothing; it follows admit step by step.
func (p *slParams) admitNeed(s *slState, now, n, maxWait int64) int32 {
	if n == 0 {
		return 0
	}
	act := s.from(now)
	if j := int64(s.n) - (p.limit - n) - 1; j >= 0 {
		act = max(act, s.at(int32(j))+p.window)
	}
	if delay := act - now; (maxWait >= 0 && delay > maxWait) || delay > maxSpan {
		return 0
	}
	held := int64(s.n - s.after(now-p.window))
	if over := held + n - p.limit; over > 0 {
		held -= over
	}
	return int32(held + n)
}

// insertNeed is how many instants insert(s, t, e) will hold after it.
// It changes nothing; it follows insert step by step.
func (p *slParams) insertNeed(s *slState, t, e int64) int32 {
	m := int32(min(e, p.limit))
	held := s.n
	if over := s.n + m - int32(p.limit); over > 0 {
		d := min(over, s.after(t))
		held -= d
		if rest := over - d; rest > 0 {
			m -= min(rest, m)
		}
	}
	return held + m
}

// slAdmit is admit on a sliding log's key, for the generic paths
// (keyed.book): if the step needs a ring it has not got, it returns the
// size to allocate, deciding nothing; else it decides as decide does.
// For every other algorithm it is decide.
func slAdmit[S, P any, A algo[S, P]](pl *slPlan, a A, s *S, now, n, maxWait int64) (d Decision, b booked, ok bool, size int) {
	sp, isSL := any(a).(*slParams)
	if !isSL {
		d, b, ok = decide(a, s, now, n, maxWait)
		return d, b, ok, 0
	}
	ss := any(s).(*slState)
	ring, size := pl.ready(ss, sp.admitNeed(ss, now, n, maxWait), int32(sp.limit))
	if size > 0 {
		return Decision{}, booked{}, false, size
	}
	b, ok = sp.admitRing(ss, now, n, maxWait, ring)
	b.kgen = ss.kgen
	return sp.describe(ss, now, b, ok), b, ok, 0
}

// slSettle is settle on a sliding log's key (keyed.settle), as slAdmit
// is admit: only an excess logs instants, and may need a ring.
func slSettle[S, P any, A algo[S, P]](pl *slPlan, a A, s *S, n, actual int64, b booked, now int64, same bool) (size int) {
	sp, isSL := any(a).(*slParams)
	if !isSL {
		a.settle(s, n, actual, b, now, same)
		return 0
	}
	ss := any(s).(*slState)
	var ring []int64
	if actual > n {
		if ring, size = pl.ready(ss, sp.insertNeed(ss, b.act, actual-n), int32(sp.limit)); size > 0 {
			return size
		}
	}
	sp.settleRing(ss, n, actual, b, same, ring)
	return 0
}
