package ratelimit

//go:generate go run gen_keyed.go

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// algo is an algorithm as keyed runs it: a pure decision over a small
// state S per key, given the algorithm's parameters P, an immutable value
// that the algorithm's methods take as their receiver. None of its methods
// reads a clock; now is given. A call reads the parameters once (one
// pointer) and passes them to every method it calls, so that parameters
// swapped between calls are never mixed within one.
type algo[S, P any] interface {
	*P
	// init sets up a key's state on first sight: at rest at now, with its
	// full allowance from now on (not before, should the clock go back).
	init(s *S, now int64)
	// admit decides n events at now and books them if they conform by
	// now+maxWait (maxWait < 0: no bound; 0: now or never). n == 0 is a
	// peek and changes nothing. b.act is when the booked events conform
	// (if not ok, when they could). This is the algorithm's one decision:
	// Allow is admit(s, now, 1, 0) (the token bucket's Allow calls
	// allowOne, a step of its own that TestAllowOneIsAdmit holds equal).
	admit(s *S, now, n, maxWait int64) (b booked, ok bool)
	// describe is the Decision for what admit just decided, from the
	// state admit left.
	describe(s *S, now int64, b booked, ok bool) Decision
	// unstep gives back what it may of n events booked as b, if at <=
	// b.act; never more than b took, and never anything a later booking
	// has claimed.
	unstep(s *S, n int64, b booked, at int64)
	// settle settles n events booked as b at actual, at now: a surplus
	// (actual < n) is given back by the algorithm's rule, at any time,
	// only if same (neither the parameters nor the key's generation have
	// changed since the booking); an excess (actual > n) is booked as
	// debt, with no admission check, in p's units, the state adopted
	// first if it was written under earlier parameters.
	settle(s *S, n, actual int64, b booked, now int64, same bool)
	// keyGen is the key's generation (see keyed.resets). A booking gives
	// nothing back to another generation.
	keyGen(s *S) uint32
	// reset sets the key up afresh at now, as init does, in generation
	// gen.
	reset(s *S, now int64, gen uint32)
	// atRest reports whether the state was back to a full allowance with
	// nothing booked at now: dropping it changes no later decision. The
	// store may ask with a now in the past (now minus a grace period): a
	// state touched after that instant must not be at rest then.
	atRest(s *S, now int64) bool
	// max is the most events one call may ask for: n above it is
	// ErrExceedsLimit.
	max() int64
}

// decide is an algorithm's decision and its description: admit, then
// describe. It is what AllowN, Reserve and Wait run; Allow runs admit alone.
func decide[S, P any, A algo[S, P]](a A, s *S, now, n, maxWait int64) (Decision, booked, bool) {
	b, ok := a.admit(s, now, n, maxWait)
	b.kgen = a.keyGen(s)
	return a.describe(s, now, b, ok), b, ok
}

// booked is what a decision booked, as unstep needs it to give the booking
// back: act, when the events conform, and end, where the booking left the
// key's state (the token bucket's TAT, the leaky bucket's queue end);
// algorithms that keep no such mark leave end zero. keyed adds the epoch
// the booking was made in (see unbook) and the key's generation then.
type booked struct {
	act   int64
	end   ftime
	epoch uint64
	kgen  uint32
}

// keyed runs an algorithm per key on a keyed store and implements the
// parts of Limiter that every algorithm shares. Each algorithm type holds
// one in a field named k, with thin methods generated in keyed_methods.go
// (go generate), and adds its own Allow, the hot path: the same admit,
// called on a concrete type so that the compiler can inline it.
type keyed[S, P any, A algo[S, P]] struct {
	ps  params[P]
	nc  nanoClock
	st  *keystore.Store[S]
	sw  *sweeper  // nil without WithSweepInterval
	obs *observed // nil without WithObserver: Allow's one check
	ov  overrides[P]

	// claim, if set, is called on the global key's state by take, with
	// the key held, before anything reads it (the token bucket's, which
	// may have lent it: see TokenBucket.allowGlobal).
	claim func(s *S)

	// resets counts the Resets of any key, wrapping at 2³². A key is set
	// up in the generation it reads (see algo.keyGen), and a Reset moves
	// it to a new one, so that a booking made on a key before its Reset
	// gives nothing back after it. A key that Reset leaves at rest may be
	// dropped while bookings made before are pending; set up again, it
	// reads the counter, which that Reset moved on, so it is in neither
	// the bookings' generation nor any generation before. (A key dropped
	// at rest with no Reset holds no booking that could give anything
	// back: each ended by the time it was at rest.) A key evicted at the
	// cap, not at rest, may hold bookings still pending: the eviction
	// moves the counter on too (evicted), so that the key, set up again,
	// is in a generation none of them was made in.
	resets atomic.Uint32
}

// take is the store's Take, then claim for the global key.
func (k *keyed[S, P, A]) take(key string, now int64, create bool) (keystore.Handle[S], bool) {
	h, fresh := k.st.Take(key, now, create)
	if len(key) == 0 && k.claim != nil {
		k.claim(h.State())
	}
	return h, fresh
}

// evicted is the store's Evicted: a key not at rest was dropped.
func (k *keyed[S, P, A]) evicted() { k.resets.Add(1) }

// params holds a limiter's parameters, swapped whole by a change at run
// time. A decision loads p once, with its key's slot lock held, so that
// the parameters a key's state was last written under are never newer
// than those of the next decision on it: a change reaches each key at its
// next decision, in order.
type params[P any] struct {
	p  atomic.Pointer[P]
	mu sync.Mutex // serialises changes
	// epoch counts the changes, twice each (odd while one is under way).
	// A Cancel gives back only a booking made in the current epoch: what a
	// booking took is measured in the parameters it was made under. A
	// Reset of a key moves that key to its next generation instead (see
	// algo.keyGen), so that it voids the bookings of that key alone.
	epoch atomic.Uint64
}

// setup builds k in place (it is not copied after: its parameters are
// read through it on the hot path, with no pointer to follow first).
func (k *keyed[S, P, A]) setup(p *P, opts []Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	k.nc, k.obs = newNanoClock(cfg.clock), newObserved(&cfg)
	k.ps.p.Store(p)
	k.st = keystore.New(keystore.Config{Shards: cfg.shards, MaxKeys: cfg.maxKeys, Evicted: k.evicted}, k.initKey, k.keyAtRest)
	if cfg.sweepInterval > 0 {
		st, nc := k.st, k.nc
		k.sw = startSweeper(cfg.sweepInterval, nc.clock, func() { st.Sweep(nc.now()) })
	}
	return nil
}

// AllowN reports whether n events for key may happen now, all or nothing,
// and records them if so. n == 0 peeks: the Decision as it stands, with
// nothing recorded and no key created. The in-memory limiters ignore ctx
// (they never block) and fail only on invalid n.
func (k *keyed[S, P, A]) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := k.validN(key, n); err != nil {
		return Decision{}, err
	}
	d, _, _, err := k.book(key, n, k.nc.now(), 0)
	if err != nil {
		return Decision{}, err
	}
	if k.obs != nil && n > 0 {
		k.obs.report(key, n, d, 0)
	}
	return d, nil
}

// allowObserved is Allow when an observer is set: the full decision
// (admit, then describe), so that the event says what remains and when to
// retry. Every Allow calls it after one check of k.obs.
func (k *keyed[S, P, A]) allowObserved(key string) bool {
	d, _, _, _ := k.book(key, 1, k.nc.now(), 0) // every limit is at least 1
	k.obs.report(key, 1, d, 0)
	return d.Allowed
}

// Reserve books n events for key at the earliest time they conform. See
// Limiter. The in-memory limiters fail only on invalid n.
func (k *keyed[S, P, A]) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	if err := k.validN(key, n); err != nil {
		return nil, err
	}
	r, err := k.reserve(key, n, noMaxWait)
	if err != nil {
		return nil, err
	}
	if k.obs != nil && n > 0 {
		d := r.decision
		d.Allowed = r.ok
		k.obs.report(key, n, d, d.RetryAfter) // Waited: the delay booked
	}
	return r, nil
}

// WaitN blocks until n events for key may happen and records them. See
// Limiter for what it leaves behind when it fails.
func (k *keyed[S, P, A]) WaitN(ctx context.Context, key string, n int) error {
	if k.obs == nil || n <= 0 || ctx.Err() != nil { // nothing to report
		return k.waitN(ctx, key, n)
	}
	start := k.nc.now()
	err := k.waitN(ctx, key, n)
	if err != ErrExceedsLimit {
		var d Decision
		d.Allowed = err == nil
		if le, ok := err.(*LimitError); ok {
			d.RetryAfter = le.RetryAfter
		}
		k.obs.report(key, n, d, durationNs(k.nc.now()-start))
	}
	return err
}

func (k *keyed[S, P, A]) waitN(ctx context.Context, key string, n int) error {
	if err := k.validN(key, n); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	maxWait := untilDeadline(ctx)
	r, err := k.reserve(key, n, maxWait)
	if err != nil {
		return err
	}
	if !r.ok {
		// The deadline caused the refusal only if the events could not
		// conform within it; a refusal for another reason (a full
		// leaky-bucket queue that frees in time) is not the deadline's.
		deadline := maxWait != noMaxWait && r.decision.RetryAfter > time.Duration(maxWait)
		return &LimitError{RetryAfter: r.decision.RetryAfter, Deadline: deadline}
	}
	if r.decision.RetryAfter == 0 {
		return nil // due at the instant of booking: no second clock read
	}
	return sleepReservation(ctx, r)
}

// Stats describes the keyed store.
func (k *keyed[S, P, A]) Stats() Stats { return statsOf(k.st.Stats()) }

// Sweep drops every key at rest now and shrinks tables left mostly empty,
// so memory comes back after a flood of keys. Decisions are unchanged.
func (k *keyed[S, P, A]) Sweep() { k.st.Sweep(k.nc.now()) }

// Close stops the sweeper goroutine started by WithSweepInterval, if any,
// and waits for it to return. The limiter remains usable; keys are then
// dropped lazily only. Close is safe to call more than once.
func (k *keyed[S, P, A]) Close() error {
	if k.sw != nil {
		k.sw.close()
	}
	return nil
}

// Limit returns the most events the limiter allows a key at once, under
// its parameters now.
func (k *keyed[S, P, A]) Limit() int { return int(A(k.ps.p.Load()).max()) }

// Reset makes key start afresh, at rest with its full allowance from now
// on, as if it had never been seen. Bookings made on key before it are not
// given back by a later Cancel or Settle; bookings on other keys are
// untouched.
func (k *keyed[S, P, A]) Reset(key string) {
	now := k.nc.now()
	h, fresh := k.take(key, now, false)
	if !fresh { // an absent key starts afresh already, and holds no booking
		A(k.paramsOf(&h, key, k.ps.p.Load())).reset(h.State(), now, k.resets.Add(1))
	}
	h.Release()
	k.reportOperator(EventReset, key, 0, 0)
}

// swap replaces the parameters by those next builds from the current
// ones, or leaves them if next fails. now is when the change happens.
// The epoch is odd while the swap is under way (see unbook).
func (k *keyed[S, P, A]) swap(next func(old *P, now int64) (*P, error)) error {
	k.ps.mu.Lock()
	p, err := next(k.ps.p.Load(), k.nc.now())
	if err != nil {
		k.ps.mu.Unlock()
		return err
	}
	k.ps.epoch.Add(1)
	k.ps.p.Store(p)
	k.ps.epoch.Add(1)
	k.ps.mu.Unlock()
	k.reportOperator(EventSetRate, "", int(A(p).max()), 0) // outside the lock
	return nil
}

// book decides n events for key at now and describes the decision; b
// records the epoch it was made in. n was validated against the
// parameters before the key was taken; should a change have lowered the
// limit below n since, or the key's override allow less (see validN),
// book fails with ErrExceedsLimit, deciding nothing.
// A peek (n == 0) creates no key: it steps a scratch state of the store's.
//
// A sliding log's step that needs a ring it has not got lets the key go,
// allocates it and decides afresh (see slPlan): nothing is allocated
// with the key held.
func (k *keyed[S, P, A]) book(key string, n int, now, maxWait int64) (Decision, booked, bool, error) {
	var pl slPlan
	for {
		h, _ := k.take(key, now, n > 0)
		epoch := k.ps.epoch.Load()
		a := A(k.paramsOf(&h, key, k.ps.p.Load()))
		if int64(n) > a.max() {
			h.Release()
			return Decision{}, booked{}, false, ErrExceedsLimit
		}
		d, b, ok, size := slAdmit(&pl, a, h.State(), now, int64(n), maxWait)
		h.Release()
		if size > 0 {
			pl.alloc(size)
			continue
		}
		b.epoch = epoch
		return d, b, ok, nil
	}
}

// unbook gives back n events booked as b, as of at, if neither a change of
// the parameters nor a reset of the key has happened since the booking:
// what the booking took is measured in the parameters and the state it was
// made under. The epoch is read after the parameters: if it is still the
// booking's, and even (no swap under way then), the parameters read are
// the booking's.
func (k *keyed[S, P, A]) unbook(key string, n int, b booked, at int64) {
	if b.epoch&1 != 0 || k.ps.epoch.Load() != b.epoch {
		return // changed or reset since: the booking stays taken
	}
	h, fresh := k.take(key, at, false)
	a := A(k.paramsOf(&h, key, k.ps.p.Load()))
	if s := h.State(); !fresh && k.ps.epoch.Load() == b.epoch && a.keyGen(s) == b.kgen { // an evicted key has nothing booked to give back
		a.unstep(s, int64(n), b, at)
	}
	h.Release()
}

// reserve books n events for key on one clock read; maxWait < 0 means no
// bound on the delay.
func (k *keyed[S, P, A]) reserve(key string, n int, maxWait int64) (*Reservation, error) {
	now := k.nc.now()
	d, bk, ok, err := k.book(key, n, now, maxWait)
	if err != nil {
		return nil, err
	}
	return k.reservation(key, n, d, bk, ok), nil
}

// The hooks AllowAll uses (see inMemory).

func (k *keyed[S, P, A]) multiClock() Clock { return k.nc.clock }

func (k *keyed[S, P, A]) multiBook(key string, n int) (Decision, booked, bool) {
	d, b, ok, _ := k.book(key, n, k.nc.now(), 0) // a limit lowered below n since it was checked: refused
	return d, b, ok
}

func (k *keyed[S, P, A]) multiUnbook(key string, n int, b booked, rollback bool) {
	at := b.act
	if !rollback {
		at = k.nc.now()
	}
	k.unbook(key, n, b, at)
}

func (k *keyed[S, P, A]) multiPeek(key string) Decision {
	d, _, _, _ := k.book(key, 0, k.nc.now(), 0)
	return d
}

func (k *keyed[S, P, A]) latestOnly() bool {
	switch any((*P)(nil)).(type) {
	case *tbParams, *lbParams:
		return true
	}
	return false
}

func (k *keyed[S, P, A]) multiCheck(key string, n int) (Decision, int64) {
	now := k.nc.now()
	h, _ := k.take(key, now, false)
	s := h.State()
	saved := *s // a plain value (see latestOnly): restoring it unbooks
	a := A(k.paramsOf(&h, key, k.ps.p.Load()))
	var d Decision
	if int64(n) <= a.max() { // else refused: a limit lowered below n since it was checked
		d, _, _ = decide(a, s, now, int64(n), 0)
	}
	*s = saved
	h.Release()
	return d, now
}

// multiBookAt saves the second clock read of a pair that was checked:
// the booking follows the check by the time the other pairs take.
func (k *keyed[S, P, A]) multiBookAt(key string, n int, now int64) (Decision, booked, bool) {
	d, b, ok, _ := k.book(key, n, now, 0)
	return d, b, ok
}

// sleepReservation waits until r is due on the limiter's time line; if ctx
// ends first it cancels r and returns ctx.Err(). While the clock reads
// before 1970 the limiter's time stands still, so the wait lasts until the
// clock itself reaches the time to act (the timer then waits the longer of
// the two measures); after 2116 it stands still too, and the wait lasts
// until the clock comes back or ctx ends.
func sleepReservation(ctx context.Context, r *Reservation) error {
	for {
		now := r.clock.Now()
		delay := r.DelayFrom(now)
		if delay <= 0 {
			return nil
		}
		t := r.clock.NewTimer(max(delay, r.act.Sub(now)))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			r.Cancel()
			return ctx.Err()
		}
	}
}
