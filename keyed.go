package ratelimit

import (
	"context"
	"time"
)

// algo is an algorithm as the keyed store runs it: a pure step over a small
// state S per key. None of its methods reads a clock; now is given.
type algo[S any] interface {
	// init sets up a key's state on first sight: at rest at now, with its
	// full allowance from now on (not before, should the clock go back).
	init(s *S, now int64)
	// step decides n events at now. They are booked if they conform by
	// now+maxWait (maxWait < 0: no bound; 0: now or never). n == 0 is a
	// peek and changes nothing. b.act is when the booked events conform
	// (if not ok, when they could).
	step(s *S, now, n, maxWait int64) (d Decision, b booked, ok bool)
	// unstep gives back what it may of n events booked as b, if at <=
	// b.act; never more than b took, and never anything a later booking
	// has claimed.
	unstep(s *S, n int64, b booked, at int64)
	// atRest reports whether the state was back to a full allowance with
	// nothing booked at now: dropping it changes no later decision. The
	// store may ask with a now in the past (now minus a grace period): a
	// state touched after that instant must not be at rest then.
	atRest(s *S, now int64) bool
}

// booked is what a step booked, as unstep needs it to give the booking
// back: act, when the events conform, and end, where the booking left the
// key's state (the token bucket's TAT, the leaky bucket's queue end);
// algorithms that keep no such mark leave end zero.
type booked struct {
	act int64
	end ftime
}

// keyed runs an algorithm per key on the shared store and implements the
// parts of Limiter that every algorithm shares. Each algorithm type embeds
// it and adds its own Allow, the hot path, written out so the compiler can
// inline the step.
type keyed[S any, A algo[S]] struct {
	alg   A
	nc    nanoClock
	st    *store[S]
	limit int
	obs   *observed // nil unless WithObserver: the hot path's one check
}

func newKeyed[S any, A algo[S]](alg A, limit int, opts []Option) (keyed[S, A], error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return keyed[S, A]{}, err
	}
	k := keyed[S, A]{alg: alg, nc: newNanoClock(cfg.clock), limit: limit, obs: newObserved(&cfg)}
	k.st = newStore(cfg, alg.init, alg.atRest)
	if cfg.sweepInterval > 0 {
		k.st.startSweeper(cfg.sweepInterval, &k.nc)
	}
	return k, nil
}

// AllowN reports whether n events for key may happen now, all or nothing,
// and records them if so. n == 0 peeks: the Decision as it stands, with
// nothing recorded and no key created. The in-memory limiters ignore ctx
// (they never block) and fail only on invalid n.
func (k *keyed[S, A]) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := validN(n, k.limit); err != nil {
		return Decision{}, err
	}
	d, _, _ := k.book(key, n, k.nc.now(), 0)
	if k.obs != nil && n > 0 {
		k.obs.report(key, n, d, 0)
	}
	return d, nil
}

// allowObserved is Allow when an observer is set: the full decision, so
// that the event can say what remains and when to retry.
func (k *keyed[S, A]) allowObserved(key string) bool {
	d, _, _ := k.book(key, 1, k.nc.now(), 0)
	k.obs.report(key, 1, d, 0)
	return d.Allowed
}

// Reserve books n events for key at the earliest time they conform. See
// Limiter. The in-memory limiters fail only on invalid n.
func (k *keyed[S, A]) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	r, err := reserve(k, &k.nc, key, n, k.limit, noMaxWait)
	if k.obs != nil && err == nil && n > 0 {
		d := r.decision
		d.Allowed = r.ok
		k.obs.report(key, n, d, d.RetryAfter)
	}
	return r, err
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (k *keyed[S, A]) Wait(ctx context.Context, key string) error {
	return k.WaitN(ctx, key, 1)
}

// WaitN blocks until n events for key may happen and records them. See
// Limiter for what it leaves behind when it fails.
func (k *keyed[S, A]) WaitN(ctx context.Context, key string, n int) error {
	if k.obs == nil || ctx.Err() != nil { // a context already done decides nothing
		return waitN(ctx, k, &k.nc, key, n, k.limit)
	}
	start := k.nc.now()
	err := waitN(ctx, k, &k.nc, key, n, k.limit)
	if n > 0 && !errorsIsInvalid(err) {
		var d Decision
		d.Allowed = err == nil
		if le, ok := err.(*LimitError); ok {
			d.RetryAfter = le.RetryAfter
		}
		k.obs.report(key, n, d, durationNs(k.nc.now()-start))
	}
	return err
}

// errorsIsInvalid reports whether err is a refusal of the arguments, not a
// decision.
func errorsIsInvalid(err error) bool {
	return err == ErrNegativeN || err == ErrExceedsLimit
}

// Stats describes the keyed store.
func (k *keyed[S, A]) Stats() Stats { return k.st.stats() }

// Sweep drops every key at rest now and shrinks tables left mostly empty,
// so memory comes back after a flood of keys. Decisions are unchanged.
func (k *keyed[S, A]) Sweep() { k.st.sweep(k.nc.now()) }

// Close stops the sweeper goroutine started by WithSweepInterval, if any,
// and waits for it to return. The limiter remains usable; keys are then
// dropped lazily only. Close is safe to call more than once.
func (k *keyed[S, A]) Close() error {
	k.st.close()
	return nil
}

// Limit returns the most events the limiter allows a key at once.
func (k *keyed[S, A]) Limit() int { return k.limit }

// book implements booker; n has been validated. A peek (n == 0) creates
// no key: it steps a scratch state of the shard's.
func (k *keyed[S, A]) book(key string, n int, now, maxWait int64) (Decision, booked, bool) {
	h, s, _ := k.st.lock(key, now, n > 0)
	d, b, ok := k.alg.step(s, now, int64(n), maxWait)
	h.unlock()
	return d, b, ok
}

// unbook implements booker.
func (k *keyed[S, A]) unbook(key string, n int, b booked, at int64) {
	h, s, fresh := k.st.lock(key, at, false)
	if !fresh { // an evicted key has nothing booked to give back
		k.alg.unstep(s, int64(n), b, at)
	}
	h.unlock()
}

// durationNs converts nanoseconds to a Duration, never negative.
func durationNs(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
