package redis

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ratelimitkit/ratelimit"

	"github.com/ratelimitkit/ratelimit/internal/exact"
)

// Bounds that keep every instant a script computes with exact in Lua's
// doubles (below 2^53 ns, about 104 days, from now): an algorithm's span
// (capacity/rate, a window) is at most maxSpan, and a booking is made at
// most horizon ahead. The in-memory limiters allow spans up to about 36.5 years.
const (
	maxSpan = 35 * 24 * time.Hour
	horizon = 30 * 24 * time.Hour
	// maxDen bounds a rate's count, the denominator of exact fractions of
	// a nanosecond, so that the sum of two numerators stays exact.
	maxDen = 1 << 52
)

// TokenBucket is ratelimit.TokenBucket on Redis: a bucket of capacity C per
// key, refilled at rate r, shared by every limiter instance (and service
// replica) that uses the same Redis, prefix and parameters. Its decisions
// are those of ratelimit.TokenBucket, to the nanosecond, on the Redis
// server's clock: it is the same GCRA, keeping per key the theoretical
// arrival time (TAT) in integer nanoseconds plus an exact fraction.
//
// Reservation.Cancel follows the in-memory type: at or before the booked
// time, it gives a booking back whole if it is the latest booking still
// held on its key (the bucket is then exactly as if it had never been
// made), and nothing otherwise (later bookings are timed to follow it), so
// that whatever the order of Allow, Reserve and Cancel at most C + ⌊r·D⌋
// events conform in any interval of length D.
//
// Each decision is one round trip running a Lua script. The key holds the
// TAT as a string "<Unix ns> <numerator>" with a TTL ending at most 2 ms
// after the bucket is full again (TAT <= now, the key at rest); a key at
// rest is deleted, not written.
//
// Limits beyond the in-memory type's, for exact arithmetic in Lua:
// capacity/rate at most 35 days, a rate's count at most 2^52, and bookings
// (Reserve, Wait) at most 30 days ahead; a later booking is refused (the
// Reservation is not OK).
//
// Build it with NewTokenBucket. It is safe for concurrent use. Most callers
// want Allow.
type TokenBucket struct {
	limiter
}

var _ ratelimit.Limiter = (*TokenBucket)(nil)

type tbAlgo struct {
	iv       exact.Interval
	capacity int64
	tauNs    int64 // C intervals: the burst tolerance
	tauFr    int64
	// The script's arguments, boxed once: one interval, and the
	// constant parameters (see luaFractionBegin).
	niv1, params any
}

// NewTokenBucket returns a token bucket per key on Redis, of the given
// capacity, refilled at rate. It returns an error matching
// ratelimit.ErrInvalidRate if the rate's count or period is not positive or
// the count exceeds 2^52, ratelimit.ErrInvalidCapacity if capacity is not
// positive or capacity/rate exceeds 35 days, and ratelimit.ErrInvalidOption
// for a nil client or a bad option. It sends nothing to Redis: the script
// is loaded on first use (and again if Redis loses it).
func NewTokenBucket(client Client, rate ratelimit.Rate, capacity int, opts ...Option) (*TokenBucket, error) {
	a, err := newTBAlgo(rate, capacity)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	l, err := newLimiter(client, tbScript, []string{":tb"}, capacity, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(rate, capacity, o...)
	})
	if err != nil {
		return nil, err
	}
	return &TokenBucket{l}, nil
}

// newTBAlgo checks the parameters of a token or leaky bucket on Redis.
func newTBAlgo(rate ratelimit.Rate, capacity int) (*tbAlgo, error) {
	if !rate.Valid() || rate.N > maxDen {
		return nil, fmt.Errorf("%w: %v (count must be in [1, 2^52] and period positive)", ratelimit.ErrInvalidRate, rate)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: capacity must be positive, got %d", ratelimit.ErrInvalidCapacity, capacity)
	}
	iv := exact.NewInterval(int64(rate.Period), rate.N)
	a := &tbAlgo{iv: iv, capacity: int64(capacity)}
	if a.capacity > int64(maxSpan)/max(iv.Q, 1) {
		return nil, fmt.Errorf("%w: capacity %d at %v spans more than %v, the redis backend's bound", ratelimit.ErrInvalidCapacity, capacity, rate, maxSpan)
	}
	tau := iv.Add(exact.Time{}, a.capacity)
	a.tauNs, a.tauFr = tau.Ns, tau.Fr
	niv := iv.Add(exact.Time{}, 1)
	a.niv1 = fmt.Sprintf("%d %d", niv.Ns, niv.Fr)
	a.params = fmt.Sprintf("%d %d %d %d", a.tauNs, a.tauFr, iv.Den, int64(horizon))
	if a.tauNs >= int64(maxSpan) && (a.tauNs > int64(maxSpan) || a.tauFr > 0) {
		return nil, fmt.Errorf("%w: capacity %d at %v spans more than %v, the redis backend's bound", ratelimit.ErrInvalidCapacity, capacity, rate, maxSpan)
	}
	return a, nil
}

func (a *tbAlgo) args(dst []any, n, _ int64) []any {
	if n == 1 {
		return append(dst, a.niv1, a.params)
	}
	niv := a.iv.Add(exact.Time{}, n)
	return append(dst, strconv.FormatInt(niv.Ns, 10)+" "+strconv.FormatInt(niv.Fr, 10), a.params)
}

// decision reads {ok, allowed, remNs, remFr, ...}: rem is the span of the
// tokens left (full - TAT), Remaining the whole intervals in it.
func (a *tbAlgo) decision(r *reply, n int64) ratelimit.Decision {
	d := ratelimit.Decision{
		Allowed:    r.allowed,
		Limit:      int(a.capacity),
		RetryAfter: time.Duration(r.retry),
		ResetAfter: time.Duration(r.reset),
	}
	if !r.ok || r.allowed {
		d.Remaining = int(min(a.iv.Count(exact.Time{Ns: r.a, Fr: r.b}), a.capacity))
	}
	return d
}

// luaFraction declares the buckets' parameters, n intervals (nivn, nivf)
// and the burst tolerance (taun, tauf) as ns plus a numerator over den, and
// defines exact sums, differences, comparison and ceiling of such values,
// and how the buckets read and write the one instant they keep per key.
// luaFractionBegin reads the parameters of a call.
const luaFraction = `
local nivn, nivf, taun, tauf, den, hz, held
local niv_s, par_s -- the arguments nivn... and taun... were last read from
local F10TB = F10 .. '(%d+)$'

local function add(a, af, b, bf)
  local s, f = a + b, af + bf
  if f >= den then s = s + 1; f = f - den end
  return s, f
end
local function sub(a, af, b, bf)
  local s, f = a - b, af - bf
  if f < 0 then s = s - 1; f = f + den end
  return s, f
end
local function le(a, af, b, bf) return a < b or (a == b and af <= bf) end
local function ceil(a, af) if af > 0 then return a + 1 end return a end
-- frac returns the numerator f as digits: Lua writes numbers of 15 digits
-- or more in exponent form.
local function frac(f)
  if f < 100000000000000 then return f end
  return string.format('%d', f)
end

-- The key's instant, relative to now, and whether the key holds one. A
-- missing key reads as now (a full bucket, an empty queue); so does a
-- value the script could not have written (another program's, or one
-- further ahead than the algorithm ever books), which is reported as
-- corrupt and replaced.
local function get_instant()
  local v, wrong = get(key)
  if wrong then held = true; return 0, 0, true end
  if v then
    local r
    local s, ns, b = string.match(v, F10TB)
    if s then
      r = relsn(tonumber(s), tonumber(ns))
    else
      local a
      a, b = string.match(v, '^(%-?%d+) (%d+)$')
      if a then r = rel(a) end
    end
    if r then
      local f = tonumber(b)
      if f < den and r <= hz + taun + SKEW then held = true; return r, f end
    end
    held = true
    return 0, 0, true
  end
  return 0, 0
end

-- cancellable reports whether the booking of the cancel token ARGV[5],
-- "<act> <end ns> <end numerator>", is not yet due (its act has not
-- passed) and is the latest still held: the key's instant (tn, tf, read
-- by get_instant) is still the end it left.
local tn, tf
local function cancellable()
  local a, es, ef = string.match(ARGV[5], '^(%-?%d+) (%-?%d+) (%d+)$')
  return a ~= nil and rel(a) >= 0 and rel(es) == tn and tonumber(ef) == tf
end

-- token is the cancel token of a booking acting at act that left the
-- instant (xn, xf).
local function token(act, xn, xf) return abs(act) .. ' ' .. abs(xn) .. ' ' .. frac(xf) end

-- put stores the instant sn + sf/den until it passes, or deletes the key
-- if it has passed (the key is then at rest).
local function put(sn, sf)
  if le(sn, sf, 0, 0) then
    if held then redis.call('DEL', key) end
  else
    put_with(key, sn, '%d%09d %d', '%d', sf, nil, ceil(sn, sf))
  end
end
`

// The parameters come as two arguments, "nivn nivf" and "taun tauf den
// hz", the second constant for a limiter and the first for a given n: in
// a library (see library), the values read from the last call's are kept,
// and read again only when the argument differs (Lua compares strings by
// reference).
const luaFractionBegin = `
if ARGV[6] ~= niv_s then
  local a, b = string.match(ARGV[6], '^(%d+) (%d+)$')
  nivn, nivf, niv_s = tonumber(a), tonumber(b), ARGV[6]
end
if ARGV[7] ~= par_s then
  local a, b, c, d = string.match(ARGV[7], '^(%d+) (%d+) (%d+) (%d+)$')
  taun, tauf, den, hz, par_s = tonumber(a), tonumber(b), tonumber(c), tonumber(d), ARGV[7]
end
held = false
`

// tbScript mirrors the core's tbParams.admit and unstep. Instants are ns
// relative to now with a numerator over den (see luaPrelude).
//
// A step ('s', or 'r' for a booking that may be cancelled) replies
// {status, allowed, remNs, remFr, retryAfter (the delay), resetAfter}, and a
// booking also the cancel token "<act> <end ns> <end numerator>": the
// booked instant and the TAT the booking left. status is 1 if the step
// booked, plus 2 if the key held a value the script could not have written
// (replaced: the key starts afresh).
//
// An unstep ('u', the token in ARGV[5]) gives the booking back whole if it
// is not yet due and is the latest booking still held (the TAT is still
// the one it left): the TAT moves back n intervals, to where the booking
// found it. Otherwise it gives nothing back: later bookings are timed to
// follow it, and its tokens given to a new booking would let that one act
// together with them.
var tbScript = script{name: "tb", defs: luaFraction, body: luaFractionBegin + `
local corrupt
tn, tf, corrupt = get_instant()
local status = 0
if corrupt then status = 2 end

if op == 'u' then
  if corrupt then redis.call('DEL', key); return 2 end
  if not held or not cancellable() then return 0 end
  put(sub(tn, tf, nivn, nivf))
  return 1
end

local maxwait = tonumber(ARGV[5])
if maxwait < 0 or maxwait > hz then maxwait = hz end
if tn < 0 then tn, tf = 0, 0 end -- base = max(TAT, now)
local xn, xf = add(tn, tf, nivn, nivf)
local delay = 0
if not le(xn, xf, taun, tauf) then delay = ceil(sub(xn, xf, taun, tauf)) end
if delay > maxwait then
  if corrupt then redis.call('DEL', key) end
  local rn, rf = sub(taun, tauf, tn, tf)
  return {status, 0, rn, rf, delay, ceil(tn, tf)}
end
if n > 0 then put(xn, xf) elseif corrupt then redis.call('DEL', key) end
local rn, rf = sub(taun, tauf, xn, xf)
local allowed = 0
if delay == 0 then allowed = 1 end
if op == 'r' then
  return {status + 1, allowed, rn, rf, delay, ceil(xn, xf), token(delay, xn, xf)}
end
return {status + 1, allowed, rn, rf, delay, ceil(xn, xf)}
`}

// span is capacity intervals plus 1 ns: a bucket refills within it.
func (a *tbAlgo) span() int64 { return a.tauNs + 1 }

// period is capacity/rate rounded up to the nanosecond.
func (a *tbAlgo) period() int64 {
	if a.tauFr > 0 {
		return a.tauNs + 1
	}
	return a.tauNs
}
