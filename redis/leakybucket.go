package redis

import (
	"time"

	"github.com/ratelimitkit/ratelimit"

	"github.com/ratelimitkit/ratelimit/internal/exact"
)

// LeakyBucket is ratelimit.LeakyBucket on Redis: per key, a queue of at
// most C events drained at rate r, so that what passes never bursts, shared
// by every limiter instance that uses the same Redis, prefix and
// parameters. Its decisions, Reserve (a place in the queue) and Cancel are
// those of ratelimit.LeakyBucket (see there), to the nanosecond, on the
// Redis server's clock.
//
// The key holds the end of the queue's last booked slot as
// "<Unix ns> <numerator>" (an exact fraction of a nanosecond over the
// rate's count), with a TTL ending at most 2 ms after the queue is empty.
//
// Limits beyond the in-memory type's: capacity/rate at most 35 days and a
// rate's count at most 2^52. A full queue already bounds how far ahead a
// booking goes.
//
// Build it with NewLeakyBucket. It is safe for concurrent use. Most callers
// want Wait (to be shaped) or Allow (to drop what cannot go now).
type LeakyBucket struct {
	limiter
}

var (
	_ ratelimit.Limiter = (*LeakyBucket)(nil)
	_ ratelimit.Taker   = (*LeakyBucket)(nil)
)

// lbAlgo has the token bucket's parameters, checked by the same code.
type lbAlgo struct {
	tbAlgo
}

// NewLeakyBucket returns a leaky bucket per key on Redis: a queue of
// capacity events drained at rate. Its errors are NewTokenBucket's.
func NewLeakyBucket(client Client, rate ratelimit.Rate, capacity int, opts ...Option) (*LeakyBucket, error) {
	tb, err := newTBAlgo(rate, capacity)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	tb.name(newNonce(), 0)
	l, err := newLimiter(client, lbScript, []string{":lb"}, &lbAlgo{*tb}, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyBucket(rate, capacity, o...)
	})
	if err != nil {
		return nil, err
	}
	return &LeakyBucket{l}, nil
}

// SetRate changes the drain rate and the queue's capacity for every key,
// from each key's next decision on, as ratelimit.LeakyBucket.SetRate does
// (each key keeps its queue, its end rounded up to a whole nanosecond),
// and with the same errors as NewLeakyBucket, leaving the limiter
// unchanged on error. A call reads the parameters once: it decides under
// either the old ones or the new ones.
//
// The change is this limiter's, not Redis's: every instance sharing the
// keys must make it (see the package doc, Changing the rate). A queue
// written under other parameters, this limiter's earlier ones or another
// instance's, is read the same way: its end, rounded up, with the places
// it holds counted against this limiter's capacity. A Cancel of a booking
// made before the change gives nothing back. Under FailLocal the local
// limiter changes too.
func (lb *LeakyBucket) SetRate(rate ratelimit.Rate, capacity int) error {
	return lb.setRate(func(old algorithm, now time.Time) (algorithm, error) {
		a, err := newTBAlgo(rate, capacity)
		if err != nil {
			return nil, err
		}
		a.succeed(&old.(*lbAlgo).tbAlgo, now, 0)
		return &lbAlgo{*a}, nil
	}, func(l ratelimit.Limiter) error {
		return l.(interface {
			SetRate(ratelimit.Rate, int) error
		}).SetRate(rate, capacity)
	})
}

// decision reads {ok, allowed, freeNs, freeFr, ...}: free is the span of
// the free places (full - end of the queue), Remaining the whole slots in it.
func (a *lbAlgo) decision(r reply, _ int64) ratelimit.Decision {
	return ratelimit.Decision{
		Allowed:    r.allowed,
		Limit:      int(a.capacity),
		Remaining:  int(min(a.iv.Count(exact.Time{Ns: r.a, Fr: r.b}), a.capacity)),
		RetryAfter: time.Duration(r.retry),
		ResetAfter: time.Duration(r.reset),
	}
}

// lbScript mirrors the core's lbParams.admit and unstep. Instants are ns
// relative to now with a numerator over den (see luaPrelude). Its replies
// and cancel token are the token bucket's (the end of the queue for the
// TAT): Cancel gives back only the tail of the queue, not yet started.
var lbScript = script{name: "lb", fetch: 1, timeEach: true, defs: luaFraction, body: luaFractionBegin + `
-- The end of the queue; a missing key is an empty queue (end = now).
local corrupt, kind
tn, tf, corrupt, kind = get_instant()
-- A queue written under other parameters keeps its end, rounded up to a
-- whole nanosecond (its fraction is in another rate's units).
if kind then tn, tf = ceil(tn, tf), 0 end
local en, ef = tn, tf
local status = 0
if corrupt then status = 2 end

if op == 'u' then
  if corrupt then del(key); return 2 end
  -- Started (the events have acted), not the tail, or written under
  -- other parameters: its slots stay, empty.
  if not held or kind or not cancellable() then return 0 end
  put(sub(en, ef, nivn, nivf))
  return 1
end

-- A settlement (see tbScript): 'g' gives a surplus of n places back if
-- the booking is still the tail of the queue, at any time; 'd' books a
-- debt of n places at the end of the queue as it stands, or from now if
-- the queue has drained empty since.
-- Either then replies as a peek.
if op == 'g' and held and not corrupt and not kind and latest() then
  en, ef = sub(en, ef, nivn, nivf)
  put(en, ef)
elseif op == 'd' then
  -- From now at the earliest: a queue drained empty since is the empty
  -- queue of a key dropped at rest and set up again.
  if le(en, ef, 0, 0) then en, ef = 0, 0 end
  en, ef = debt(en, ef)
  put(en, ef)
  corrupt = false -- replaced
end
if op == 'g' or op == 'd' then n = 0 end

if en < 0 then en, ef = 0, 0 end -- the booking's first slot: max(end, now)
local delay = ceil(en, ef)
if n == 0 then
  if corrupt then del(key) end
  local fn, ff = sub(taun, tauf, en, ef)
  return reply(status + 1, 1, fn, ff, 0, delay)
end
local xn, xf = add(en, ef, nivn, nivf)
local fits = le(xn, xf, taun, tauf)
local maxwait = tonumber(ARGV[5])
if not fits or (maxwait >= 0 and delay > maxwait) then
  if corrupt then del(key) end
  local retry = delay -- the slot is too late: report the wait it needs
  if not fits and (maxwait < 0 or delay <= maxwait) then
    retry = ceil(sub(xn, xf, taun, tauf)) -- n places free then
  end
  local fn, ff = sub(taun, tauf, en, ef)
  return reply(status, 0, fn, ff, retry, delay)
end
put(xn, xf)
local fn, ff = sub(taun, tauf, xn, xf)
local allowed = 0
if delay == 0 then allowed = 1 end
if op == 'r' then
  return reply(status + 1, allowed, fn, ff, delay, ceil(xn, xf), token(delay, xn, xf))
end
return reply(status + 1, allowed, fn, ff, delay, ceil(xn, xf))
`}
