package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/deferred"
)

// Errors of Settle. Test for them with errors.Is; the text is part of the
// API and will not change.
var (
	// ErrSettled means the reservation cannot be settled: it is not OK
	// (it booked nothing), or it was settled or cancelled already.
	ErrSettled = errors.New("ratelimit: reservation already settled or cancelled")
	// ErrCannotSettle means the limiter that made the reservation does
	// not settle bookings (a Multi, a Shadow, or a Limiter outside this
	// package that gave its reservations no SettleFunc).
	ErrCannotSettle = errors.New("ratelimit: this limiter cannot settle a booking")
)

// SettleFunc is how a Limiter implementation outside this package settles
// a booking of n events at actual, at the clock's time at. It is called at
// most once per reservation, by Settle, with actual >= 0; it must not
// block beyond the round trip it needs, and must give back no more of a
// surplus than Cancel's contract allows, and book an excess as debt.
type SettleFunc func(at time.Time, actual int) (Decision, error)

// Taker is implemented by limiters that can decide like AllowN and hand
// back the booking, so that its cost can be settled later: a language
// model call charged an estimate of its tokens, settled at the tokens it
// used.
//
// Take(ctx, key, n): the Reservation is OK (and its Decision().Allowed
// true) iff the n events were allowed now and booked; otherwise it booked
// nothing and its Decision is what AllowN would have said (RetryAfter).
// n == 0 is a peek: not OK, with AllowN's Decision for a peek (Allowed
// true, nothing consumed), so its Settle is ErrSettled. A Reserve of 0
// events is OK (due now, Delay 0, as Wait of 0 returns at once) but books
// nothing either: its Cancel does nothing and its Settle is ErrSettled,
// never a debt. Errors as AllowN.
//
// The five in-memory limiters implement it, and so do the Redis ones.
// Multi, AllowAll, Shadow and the Rules do not: settling a composite
// booking would have to settle every member on its own rule and clock,
// and could not be done as one exact step; take the cost from each
// limiter in turn, or settle a Multi's members yourself.
type Taker interface {
	Take(ctx context.Context, key string, n int) (*Reservation, error)
}

// Settle settles the booking at its actual cost, once the work is done.
// A surplus (actual < n) is given back as far as the algorithm's give-back
// rule allows; an excess (actual > n) is booked as debt on the key: later
// requests wait for it. It returns the key's Decision after the settlement
// (Allowed true, Remaining/ResetAfter as they now stand, Limit).
//
// Errors: actual < 0 -> ErrNegativeN, and the reservation is left as it
// was; a reservation that is not OK, one of 0 events (Take or Reserve of
// 0: nothing was booked), or one already settled or cancelled ->
// ErrSettled; a reservation whose limiter cannot settle ->
// ErrCannotSettle. Cancel after Settle does nothing, and of Settle and
// Cancel racing on one reservation exactly one takes effect.
//
// For the in-memory limiters, unlike Cancel, a surplus may be given back
// after the time to act: the events that acted are the actual ones, and
// the surplus never acted. What comes back, and where a debt is booked,
// is each algorithm's rule, written in its doc; in short, the buckets give
// a surplus back while the booking is the latest on its key, and the
// windows while the booking's window (or its logged instants) still
// count. On the buckets, an excess is charged from now at the earliest: a
// bucket full again (a queue empty again) since takes the whole debt on
// its full allowance, as a key dropped at rest and set up again does, so
// that what a late Settle costs never depends on whether the store kept
// the key. On the windows, the excess is counted at the booking's time to
// act, so a debt settled long after may already have been paid by the
// windows that passed since (see each algorithm).
// A booking made before a change of the limiter's rate, or before a change
// of its key's override or a Reset of its key, gives no surplus back (a
// change of another key's override does not void it); an excess is charged all the same, in
// the parameters now in force.
//
// The bound a limiter keeps, with settlements: count each booking at its
// settled cost at its time to act; then over any interval (for the fixed
// windows, any run of consecutive windows) the cost is at most the bound
// without settlements plus the excess of those bookings in it that were
// settled after the last booking in it was made. An excess settled before
// a booking is made is paid in full before that booking acts: it is the
// work done without asking, after the last request that could wait for
// it, that no limiter can undo.
func (r *Reservation) Settle(actual int) (Decision, error) {
	if actual < 0 {
		return Decision{}, ErrNegativeN
	}
	if !r.ok {
		return Decision{}, ErrSettled
	}
	if r.settle == nil {
		if r.done.Load() {
			return Decision{}, ErrSettled
		}
		return Decision{}, ErrCannotSettle
	}
	if !r.done.CompareAndSwap(false, true) {
		return Decision{}, ErrSettled
	}
	return r.settle(r.clock.Now(), actual)
}

// SetSettle makes Settle call f; for Limiter implementations outside this
// package (the Redis backend), before the reservation is handed out. It is
// not safe to call concurrently with Settle. If f returns an error the
// reservation is spent all the same (the backend may have applied it):
// Settle and Cancel then do nothing. It returns r.
func (r *Reservation) SetSettle(f SettleFunc) *Reservation {
	r.settle = f
	return r
}

// Take decides n events for key like AllowN and hands back the booking, so
// that its cost can be settled later (see Taker). It fails only on invalid
// n.
func (k *keyed[S, P, A]) Take(ctx context.Context, key string, n int) (*Reservation, error) {
	if err := k.validN(key, n); err != nil {
		return nil, err
	}
	now := k.nc.now()
	d, bk, ok, err := k.book(key, n, now, 0)
	if err != nil {
		return nil, err
	}
	if k.obs != nil {
		if s := deferred.From[Decision](ctx); s != nil { // the caller reports the outcome once (internal/charge)
			s.Hold(k.obs, key)
		} else if n > 0 {
			k.obs.report(key, n, d, 0)
		}
	}
	return k.reservation(key, n, d, bk, ok && n > 0), nil
}

// reservation is the Reservation of a booking of n events as bk, OK if ok.
func (k *keyed[S, P, A]) reservation(key string, n int, d Decision, bk booked, ok bool) *Reservation {
	r := &Reservation{ok: ok, decision: d, act: k.nc.timeOf(bk.act), clock: k.nc.clock, line: &k.nc, actNs: bk.act}
	if ok {
		if n > 0 {
			r.cancel = func(at time.Time) { k.unbook(key, n, bk, k.nc.nanosOf(at)) }
		}
		r.settle = settleNothing // a booking of 0 events holds nothing to settle
		if n > 0 {
			r.settle = func(at time.Time, actual int) (Decision, error) {
				return k.settle(key, n, actual, bk, k.nc.nanosOf(at)), nil
			}
		}
	}
	return r
}

// settleNothing is the Settle of a booking of 0 events (a Reserve of 0):
// it holds nothing, so, as for a Take of 0 (not OK), Settle is ErrSettled
// and the key is left as it was.
func settleNothing(time.Time, int) (Decision, error) { return Decision{}, ErrSettled }

// settle settles n events booked as bk at actual, at now, and returns the
// key's Decision after it. A surplus can come back only if neither the
// parameters nor the key have changed since the booking (a change of rate
// or of an override, a Reset, or the key dropped and set up again): the
// state then still holds what the booking took, in the same units. The key
// settles under the parameters it decides under now, its override's if it
// has one. An excess is charged
// whatever happened since, in the parameters now in force; on a key the
// store has dropped, it is charged from now (the key set up afresh): on
// the buckets exactly what it would have cost had the key been kept (they
// charge a refilled bucket from now), on the windows no less.
func (k *keyed[S, P, A]) settle(key string, n, actual int, bk booked, now int64) Decision {
	var pl slPlan // a sliding log's ring, allocated with the key let go
	created := false
	var d Decision
	for {
		h, fresh := k.take(key, now, actual > n)
		created = created || fresh // set up by a try before: not the booking's key
		a := A(k.paramsOf(&h, key, k.ps.p.Load()))
		s := h.State()
		same := !created && bk.epoch&1 == 0 && k.ps.epoch.Load() == bk.epoch && a.keyGen(s) == bk.kgen
		if size := slSettle(&pl, a, s, int64(n), int64(actual), bk, now, same); size > 0 {
			h.Release()
			pl.alloc(size)
			continue
		}
		a.admit(s, now, 0, 0) // a peek: brings the state to p's parameters, books nothing
		d = a.describe(s, now, booked{act: now}, true)
		h.Release()
		break
	}
	k.reportOperator(EventSettle, key, actual, d.Remaining)
	return d
}

// debtTo returns t advanced by e intervals of iv, an excess booked as debt,
// but never beyond now + maxSpan: a debt that would reach further is
// capped there (the excess beyond it is forgiven). A t already beyond is
// left as it is.
func debtTo(iv interval, t ftime, e, now int64) ftime {
	limit := now + maxSpan
	if t.Ns >= limit {
		return t
	}
	if span := limit - t.Ns - 1; e <= 0 || iv.Within(e, span) {
		return iv.Add(t, max(e, 0))
	}
	return ftime{Ns: limit}
}

// carryWindow books an excess e on a window algorithm's count: the key's
// window start holds count events (booked ones included) of a limit L per
// window W. A total up to L stays in the window; beyond it, the window is
// full and the rest carries into the windows after it, L to each, so that
// the key's window becomes the last of them, holding what is left (1 to L
// events), and the windows before it are closed. The carry stops at now +
// maxSpan: a debt reaching further is forgiven beyond it.
func carryWindow(start, count, e, limit, window, now int64) (newStart, newCount int64, carried bool) {
	total := count + e
	if total < count { // overflow
		total = 1<<63 - 1
	}
	if total <= limit {
		return start, total, false
	}
	k := (total - 1) / limit // whole windows filled before the last: total - k·L in (0, L]
	maxK := max((now+maxSpan-start)/window, 0)
	if k > maxK {
		k, total = maxK, (maxK+1)*limit // the debt beyond is forgiven
	}
	if k == 0 {
		return start, limit, false
	}
	return start + k*window, total - k*limit, true
}
