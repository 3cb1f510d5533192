package ratelimit

import (
	"hash/maphash"
	"strings"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// Per-key overrides: a few keys (the tiers of paying customers) decide
// under parameters of their own instead of the limiter's.
//
// A key with an override carries a flag in its slot header (keystore rule
// 12), set and cleared under the key's lock. A decision reads the flag
// from the handle Take returned, at no cost; only a flagged key looks its
// parameters up, in a table of copy-on-write shards behind atomic
// pointers. A key without an override pays one bit test and a branch.
//
// The invariant: the state of a key is always expressed in the parameters
// its decisions use now. setOverride keeps it by doing three things under
// the key's lock, in one critical section: it re-expresses the key's
// state from the parameters it was written under to the new ones, sets or
// clears the flag, and publishes the table shard that holds the key's new
// entry (built beforehand: nothing is allocated under the lock). So:
//
//   - A decision racing SetOverride on the same key holds the key's lock
//     before or after that critical section: before, it sees the old flag,
//     the old entry and a state written under them; after, the new ones.
//     It never reads a token bucket's TAT under a rate it was not written
//     under.
//   - A key absent at the change is held as a peek (keystore rule 6), with
//     its shard's mutex, while the shard of the table is published; the
//     key's creation takes that mutex and sets the key up (init) from the
//     table, so a key created after SetOverride gets it, and a key created
//     before is found by SetOverride and re-expressed.
//   - A key dropped at rest loses its flag with its state; when seen again
//     init looks it up afresh: the table, not the state, is the truth. A
//     sweep or an eviction judges a flagged key at rest under its own
//     parameters (atRest is told the flag and the key).
//   - Changes (SetOverride, RemoveOverride, SetRate) are serialised by the
//     params mutex, so two in a row on one key, or RemoveOverride racing
//     SetRate, each see the state the other left: RemoveOverride
//     re-expresses the key in the limiter's parameters as they stand under
//     the mutex, and SetRate changes only keys without a flag.
//   - A change of override moves the key's generation on with the key
//     held, as a Reset does (see keyed.resets), so a Cancel (or a Settle's
//     surplus) of a booking made on that key before it gives nothing back;
//     bookings on other keys are untouched. A change of rate moves the
//     limiter's epoch on instead, voiding every key's.
//   - The table is keyed as the store knows keys: a key longer than the
//     store tells apart (keystore rule 10) by its prefix. So every
//     spelling of a key that reaches a flagged slot finds the entry the
//     slot's state was written under, and one created or seen again after
//     a drop is set up under it.

// ovShards is how many copy-on-write shards an override table has: a
// change copies one shard, about 1/4096 of the table. The array of shards
// (32 KiB) is made at a limiter's first override.
const ovShards = 1 << 12

// overrides is a keyed limiter's table of per-key parameters.
type overrides[P any] struct {
	t atomic.Pointer[ovTable[P]] // nil until the first override
	// gen is the generation the last override was given; under params.mu.
	// Overrides take theirs from ovGen0 up, apart from those the limiter's
	// own parameters count through, so that a state's generation always
	// names the one set of parameters it was written under. Generations
	// are 32 bits, so that a bucket's state stays 24 bytes with the key's
	// generation beside them: each range holds 2³¹ changes, more than a
	// run makes.
	gen uint32
	n   int // overrides held; under params.mu
}

// ovGen0 is the first generation of an override's parameters.
const ovGen0 = 1 << 31

// ovTable is the overrides, each shard an immutable map replaced whole.
type ovTable[P any] struct {
	seed  maphash.Seed
	shard [ovShards]atomic.Pointer[map[string]*ovEntry[P]]
}

// ovEntry is one key's override: its parameters, and what they were built
// from, for Override to report.
type ovEntry[P any] struct {
	p        P
	rate     Rate
	capacity int
}

// lookup returns key's override, or nil.
func (o *overrides[P]) lookup(key string) *ovEntry[P] {
	t := o.t.Load()
	if t == nil {
		return nil
	}
	m := t.shard[maphash.String(t.seed, key)%ovShards].Load()
	if m == nil {
		return nil
	}
	return (*m)[key]
}

// lookupBytes is lookup for a key's bytes, without a copy.
func (o *overrides[P]) lookupBytes(key []byte) *ovEntry[P] {
	t := o.t.Load()
	if t == nil {
		return nil
	}
	m := t.shard[maphash.Bytes(t.seed, key)%ovShards].Load()
	if m == nil {
		return nil
	}
	return (*m)[string(key)]
}

// rebaser is what an algorithm needs for overrides: a way to re-express a
// key's state from one set of parameters in another, at now, by the rule
// its SetRate follows.
type rebaser[S, P any] interface {
	// rebaseFrom re-expresses s, written under from (or, if from is the
	// limiter's parameters, under any of their earlier generations), in
	// the receiver's parameters, as of now.
	rebaseFrom(s *S, from *P, now int64)
	// withGen returns a copy of the parameters with generation gen, for
	// an override (a no-op for parameters that carry none).
	withGen(gen uint32) *P
	// setKeyGen moves the key to generation gen (see override_keygen.go).
	setKeyGen(s *S, gen uint32)
}

var (
	_ rebaser[tbState, tbParams]   = (*tbParams)(nil)
	_ rebaser[lbState, lbParams]   = (*lbParams)(nil)
	_ rebaser[fwState, fwParams]   = (*fwParams)(nil)
	_ rebaser[slState, slParams]   = (*slParams)(nil)
	_ rebaser[swcState, swcParams] = (*swcParams)(nil)
)

// rebaserOf returns p as a rebaser: every algorithm is one (see above).
func rebaserOf[S, P any](p *P) rebaser[S, P] { return any(p).(rebaser[S, P]) }

// paramsOf returns the parameters the key held by h decides under: its
// override if it is flagged, else the limiter's p.
func (k *keyed[S, P, A]) paramsOf(h *keystore.Handle[S], key string, p *P) *P {
	if h.Flagged() {
		return k.overrideOf(key, p)
	}
	return p
}

// overrideOf returns key's override, or p if it has none (which a flagged
// key always has: see the invariant above). It is kept out of line so
// that the hot path of a key without override stays as small as it was.
//
//go:noinline
func (k *keyed[S, P, A]) overrideOf(key string, p *P) *P {
	if e := k.ov.lookup(k.storeKey(key)); e != nil {
		return &e.p
	}
	return p
}

// storeKey is key as the store keeps it: a long key in its bounded form
// (keystore rule 10). The overrides are keyed the same way, so that a
// flagged key always finds the entry its state was written under, and an
// override of a long key costs its bounded form, not the key. The store
// gives init and atRest the kept form already.
func (k *keyed[S, P, A]) storeKey(key string) string { return k.st.Kept(key) }

// initKey sets up key's state at now, under its override if it has one,
// and returns the key's flag: the store's init.
func (k *keyed[S, P, A]) initKey(s *S, key string, now int64) bool {
	if e := k.ov.lookup(key); e != nil {
		A(&e.p).reset(s, now, k.resets.Load())
		return true
	}
	A(k.ps.p.Load()).reset(s, now, k.resets.Load())
	return false
}

// keyAtRest judges a key at rest under the parameters it decides under:
// the store's atRest.
func (k *keyed[S, P, A]) keyAtRest(s *S, flagged bool, key []byte, now int64) bool {
	p := k.ps.p.Load()
	if flagged {
		if e := k.ov.lookupBytes(key); e != nil {
			p = &e.p
		}
	}
	return A(p).atRest(s, now)
}

// validN checks n against the most key may ask for at once. For n up to
// the limiter's limit it costs what it always did; only above it does it
// look for key's override, which may allow more. book checks n again
// under the parameters the decision uses (an override may allow less).
func (k *keyed[S, P, A]) validN(key string, n int) error {
	err := validN(n, k.Limit())
	if err != ErrExceedsLimit {
		return err
	}
	if e := k.ov.lookup(k.storeKey(key)); e != nil && int64(n) <= A(&e.p).max() {
		return nil
	}
	return err
}

// multiValidN is validN for AllowAll, which refuses before it books
// anything: n is checked against key's own limit, so that an override
// allowing less than the limiter refuses n above it with ErrExceedsLimit
// as AllowN does, not with a denial no retry could turn into an
// allowance. It costs a lookup only while the limiter has overrides.
func (k *keyed[S, P, A]) multiValidN(key string, n int) error {
	if err := k.validN(key, n); err != nil {
		return err
	}
	if e := k.ov.lookup(k.storeKey(key)); e != nil && int64(n) > A(&e.p).max() {
		return ErrExceedsLimit
	}
	return nil
}

// setOverride gives key the parameters p, built from rate and capacity,
// or, with p nil, takes its override away; see the invariant above. p is
// given its generation here.
func (k *keyed[S, P, A]) setOverride(key string, p *P, rate Rate, capacity int) {
	if !k.changeOverride(key, p, rate, capacity) || k.obs == nil {
		return
	}
	if p == nil {
		k.obs.operator(EventRemoveOverride, key, 0, 0)
	} else {
		k.obs.operator(EventSetOverride, key, int(A(p).max()), 0)
	}
}

// changeOverride is setOverride's change, reporting whether it made one
// (not a removal of no override); the event is reported after it, outside
// the params mutex.
func (k *keyed[S, P, A]) changeOverride(given string, p *P, rate Rate, capacity int) bool {
	key := k.storeKey(given) // the store is given the key as given: it keeps it itself
	k.ps.mu.Lock()
	defer k.ps.mu.Unlock()
	t := k.ov.t.Load()
	if t == nil {
		if p == nil {
			return false // no overrides: nothing to remove
		}
		t = &ovTable[P]{seed: maphash.MakeSeed()}
		k.ov.t.Store(t) // empty: it changes no decision
	}
	i := maphash.String(t.seed, key) % ovShards
	var old map[string]*ovEntry[P]
	if m := t.shard[i].Load(); m != nil {
		old = *m
	}
	prev := old[key]
	if p == nil && prev == nil {
		return false
	}
	// Everything is allocated before the key is taken.
	next := make(map[string]*ovEntry[P], len(old)+1)
	for kk, e := range old {
		next[kk] = e
	}
	var to *P
	if p != nil {
		k.ov.gen++
		e := &ovEntry[P]{p: *rebaserOf[S](p).withGen(ovGen0 + k.ov.gen), rate: rate, capacity: capacity}
		next[strings.Clone(key)] = e
		to = &e.p
	} else {
		delete(next, key)
		to = k.ps.p.Load()
	}

	now := k.nc.now()
	h, fresh := k.take(given, now, false)
	if !fresh { // a key held: re-express its state; an absent one starts afresh
		from := k.ps.p.Load()
		if h.Flagged() && prev != nil {
			from = &prev.p
		}
		rebaserOf[S](to).rebaseFrom(h.State(), from, now)
		h.SetFlag(p != nil)
	}
	// With the key held, the key alone moves to a new generation: a
	// booking on it is before or after, and one made before gives nothing
	// back. An absent key, set up again, reads the counter moved on.
	if gen := k.resets.Add(1); !fresh {
		rebaserOf[S](to).setKeyGen(h.State(), gen)
	}
	t.shard[i].Store(&next)
	h.Release()
	switch {
	case p != nil && prev == nil:
		k.ov.n++
	case p == nil:
		k.ov.n--
	}
	return true
}

// override returns key's override: its rate and capacity.
func (k *keyed[S, P, A]) override(key string) (Rate, int, bool) {
	if e := k.ov.lookup(k.storeKey(key)); e != nil {
		return e.rate, e.capacity, true
	}
	return Rate{}, 0, false
}

// RemoveOverride etc. are generated (keyed_methods.go); SetOverride and
// Override differ by type, as SetRate does.

// SetOverride gives key a rate and capacity of its own, in place of the
// limiter's, from the key's next decision on, atomically: a decision on the
// key uses either its old parameters or the new ones, never a mix. It
// validates as NewTokenBucket does and returns the same errors, leaving
// everything unchanged on error. Other keys decide as before and keep what
// their bookings can give back; a Cancel or Settle of a booking made on key
// before the change gives nothing back, as after a Reset of key.
//
// The key keeps the tokens it held at the change, capped at the new
// capacity, and refills at the new rate from then on, as SetRate does for
// every key: bookings made before keep their instant, a key with bookings
// ahead is empty until the latest of them acts, and a Cancel of a booking
// made before the change gives nothing back. A later SetRate leaves the
// key alone; Reset starts it afresh, full, under its override; a key not
// held, or dropped at rest and seen again, starts under its override. Its
// Decisions carry its own Limit; Limit() stays the limiter's. AllowN,
// Reserve and WaitN accept n up to the key's own capacity.
//
// The overrides are meant for a modest number of keys (tiers of paying
// customers): each takes up to about 200 bytes with a short key, and a
// call copies about 1/4096 of the table.
func (tb *TokenBucket) SetOverride(key string, rate Rate, capacity int) error {
	p, err := newTBParams(rate, capacity)
	if err != nil {
		return err
	}
	tb.k.setOverride(key, p, rate, capacity)
	return nil
}

// Override returns key's override, if it has one.
func (tb *TokenBucket) Override(key string) (rate Rate, capacity int, ok bool) {
	return tb.k.override(key)
}

// SetOverride gives key a drain rate and queue capacity of its own, in place
// of the limiter's, from the key's next decision on, atomically: a decision
// on the key uses either its old parameters or the new ones, never a mix. It
// validates as NewLeakyBucket does and returns the same errors, leaving
// everything unchanged on error. Other keys decide as before and keep what
// their bookings can give back; a Cancel or Settle of a booking made on key
// before the change gives nothing back, as after a Reset of key.
//
// The key keeps its queue, as SetRate keeps every key's: the events booked
// keep their slots, the next slot starts where the queue ends, spaced at
// the new rate, a queue longer than the new capacity takes nothing more
// until it has drained below it, and a Cancel of a booking made before the
// change gives nothing back. A later SetRate leaves the key alone; Reset
// starts it afresh under its override; a key not held, or dropped at rest
// and seen again, starts under its override. Its Decisions carry its own
// Limit; Limit() stays the limiter's. AllowN, Reserve and WaitN accept n up
// to the key's own capacity.
//
// The overrides are meant for a modest number of keys (tiers of paying
// customers): each takes up to about 200 bytes with a short key, and a
// call copies about 1/4096 of the table.
func (lb *LeakyBucket) SetOverride(key string, rate Rate, capacity int) error {
	p, err := newTBParams(rate, capacity)
	if err != nil {
		return err
	}
	lb.k.setOverride(key, (*lbParams)(p), rate, capacity)
	return nil
}

// Override returns key's override, if it has one.
func (lb *LeakyBucket) Override(key string) (rate Rate, capacity int, ok bool) {
	return lb.k.override(key)
}

// SetOverride gives key a limit and window length of its own, in place of
// the limiter's, from the key's next decision on, atomically: a decision on
// the key uses either its old parameters or the new ones, never a mix. It
// validates as NewFixedWindow does and returns the same errors, leaving
// everything unchanged on error. Other keys decide as before and keep what
// their bookings can give back; a Cancel or Settle of a booking made on key
// before the change gives nothing back, as after a Reset of key.
//
// The key keeps its window's start and count, as SetRate keeps every
// key's: the count is held against the new limit, the window closes the
// new length after its start, and a Cancel of a booking made before the
// change gives nothing back. A later SetRate leaves the key alone; Reset
// starts it afresh under its override; a key not held, or dropped at rest
// and seen again, starts under its override. Its Decisions carry its own
// Limit; Limit() stays the limiter's. AllowN, Reserve and WaitN accept n
// up to the key's own limit.
//
// The overrides are meant for a modest number of keys (tiers of paying
// customers): each takes up to about 200 bytes with a short key, and a
// call copies about 1/4096 of the table.
func (fw *FixedWindow) SetOverride(key string, rate Rate) error {
	limit, window, err := windowParams(rate)
	if err != nil {
		return err
	}
	fw.k.setOverride(key, &fwParams{limit: limit, window: window}, rate, int(limit))
	return nil
}

// Override returns key's override, if it has one.
func (fw *FixedWindow) Override(key string) (rate Rate, ok bool) {
	rate, _, ok = fw.k.override(key)
	return rate, ok
}

// SetOverride gives key a limit and window length of its own, in place of
// the limiter's, from the key's next decision on, atomically: a decision on
// the key uses either its old parameters or the new ones, never a mix. It
// validates as NewSlidingLog does and returns the same errors, leaving
// everything unchanged on error. Other keys decide as before and keep what
// their bookings can give back; a Cancel or Settle of a booking made on key
// before the change gives nothing back, as after a Reset of key.
//
// The key keeps the instants it has logged, counted against the new limit
// over the new window, as SetRate keeps every key's: its log grows to a
// larger limit at its next event (one allocation, under its lock), and a
// Cancel of a booking made before the change gives nothing back. A later
// SetRate leaves the key alone; Reset starts it afresh under its override;
// a key not held, or dropped at rest and seen again, starts under its
// override. Its Decisions carry its own Limit; Limit() stays the
// limiter's. AllowN, Reserve and WaitN accept n up to the key's own limit.
//
// The overrides are meant for a modest number of keys (tiers of paying
// customers): each takes up to about 200 bytes with a short key, besides
// its log, and a call copies about 1/4096 of the table.
func (sl *SlidingLog) SetOverride(key string, rate Rate) error {
	p, err := newSLParams(rate)
	if err != nil {
		return err
	}
	sl.k.setOverride(key, p, rate, int(p.limit))
	return nil
}

// Override returns key's override, if it has one.
func (sl *SlidingLog) Override(key string) (rate Rate, ok bool) {
	rate, _, ok = sl.k.override(key)
	return rate, ok
}

// SetOverride gives key a limit and window length of its own, in place of
// the limiter's, from the key's next decision on, atomically: a decision on
// the key uses either its old parameters or the new ones, never a mix. It
// validates as NewSlidingWindowCounter does and returns the same errors,
// leaving everything unchanged on error. Other keys decide as before and
// keep what their bookings can give back; a Cancel or Settle of a booking
// made on key before the change gives nothing back, as after a Reset of key.
//
// The key keeps its window's start and both counts, weighed against the
// new limit and length, as SetRate keeps every key's, and a Cancel of a
// booking made before the change gives nothing back. A later SetRate
// leaves the key alone; Reset starts it afresh under its override; a key
// not held, or dropped at rest and seen again, starts under its override.
// Its Decisions carry its own Limit; Limit() stays the limiter's. AllowN,
// Reserve and WaitN accept n up to the key's own limit.
//
// The overrides are meant for a modest number of keys (tiers of paying
// customers): each takes up to about 200 bytes with a short key, and a
// call copies about 1/4096 of the table.
func (sc *SlidingWindowCounter) SetOverride(key string, rate Rate) error {
	limit, window, err := windowParams(rate)
	if err != nil {
		return err
	}
	sc.k.setOverride(key, &swcParams{limit: limit, window: window}, rate, int(limit))
	return nil
}

// Override returns key's override, if it has one.
func (sc *SlidingWindowCounter) Override(key string) (rate Rate, ok bool) {
	rate, _, ok = sc.k.override(key)
	return rate, ok
}

// How each algorithm re-expresses a key's state for an override: by the
// rule of its SetRate.

// rebaseFrom: the tokens the bucket held at now under from, capped at p's
// capacity (rebase, at now).
func (p *tbParams) rebaseFrom(s *tbState, from *tbParams, now int64) {
	if s.gen != from.gen {
		from.adopt(s, now) // the limiter's, written under earlier parameters
	}
	p.rebaseAt(from, s, now)
}

func (p *tbParams) withGen(gen uint32) *tbParams {
	q := *p
	q.gen = gen
	return &q
}

// rebaseFrom: the queue is kept (adopt).
func (p *lbParams) rebaseFrom(s *lbState, _ *lbParams, _ int64) { p.adopt(s) }

func (p *lbParams) withGen(gen uint32) *lbParams {
	q := *p
	q.gen = gen
	return &q
}

// The windows' states read under any parameters: nothing to do.

func (p *fwParams) rebaseFrom(*fwState, *fwParams, int64) {}
func (p *fwParams) withGen(uint32) *fwParams              { return p }

func (p *slParams) rebaseFrom(*slState, *slParams, int64) {}
func (p *slParams) withGen(uint32) *slParams              { return p }

func (p *swcParams) rebaseFrom(*swcState, *swcParams, int64) {}
func (p *swcParams) withGen(uint32) *swcParams               { return p }
