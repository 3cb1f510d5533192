package redis

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
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

var (
	_ ratelimit.Limiter = (*TokenBucket)(nil)
	_ ratelimit.Taker   = (*TokenBucket)(nil)
)

type tbAlgo struct {
	iv       exact.Interval
	capacity int64
	tauNs    int64 // C intervals: the burst tolerance
	tauFr    int64
	// The script's arguments, boxed once: one interval, and the
	// constant parameters (see luaFractionBegin).
	niv1, params any

	// tag names these parameters in the states written under them (see
	// luaFraction): "<parameters' fingerprint>.<limiter's nonce>.<gen>".
	// gen counts the changes made before these parameters; since is when
	// they took over on the limiter's clock (unused for gen 0), and hist
	// holds up to maxHist of the parameters before them, oldest first,
	// each with hist nil, so that a state written under any of them can
	// be re-expressed (see restate). The leaky bucket keeps no history.
	tag    string
	nonce  string
	gen    uint64
	since  time.Time
	hist   []*tbAlgo
	ghosts *ghosts // the limiter's removed overrides (see override.go)
}

// maxHist is how many earlier parameters a token bucket keeps, as in
// memory.
const maxHist = 8

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
	a.name(newNonce(), 0)
	l, err := newLimiter(client, tbScript, []string{":tb"}, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(rate, capacity, o...)
	})
	if err != nil {
		return nil, err
	}
	a.ghosts = &l.ov.ghosts
	return &TokenBucket{l}, nil
}

// SetRate changes the rate and capacity for every key, from each key's
// next decision on, as ratelimit.TokenBucket.SetRate does (see there for
// what each key's state becomes), and with the same errors as
// NewTokenBucket, leaving the limiter unchanged on error. A call reads the
// parameters once: it decides under either the old ones or the new ones.
//
// The change is this limiter's, not Redis's: every instance sharing the
// keys must make it (see the package doc, Changing the rate). A key's
// state records the parameters it was written under; the first decision
// on a key written under this limiter's earlier parameters re-expresses it
// through each change since, at the instant it happened, as in memory
// (that decision takes a second round trip). A key written by another
// instance is decided under this limiter's parameters: as it stands if
// that instance's parameters are the same, and otherwise as empty until
// its TAT (full if that has passed), so that it never holds more than this
// limiter's capacity nor lets an event act before a booking it holds. A
// key at rest (full) has no state on Redis, and starts full under the new
// capacity. A Cancel of a booking made before the change gives nothing
// back. Under FailLocal the local limiter changes too.
func (tb *TokenBucket) SetRate(rate ratelimit.Rate, capacity int) error {
	return tb.setRate(func(old algorithm, now time.Time) (algorithm, error) {
		a, err := newTBAlgo(rate, capacity)
		if err != nil {
			return nil, err
		}
		a.succeed(old.(*tbAlgo), now, maxHist)
		return a, nil
	}, func(l ratelimit.Limiter) error {
		return l.(interface {
			SetRate(ratelimit.Rate, int) error
		}).SetRate(rate, capacity)
	})
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
	if a.tauNs >= int64(maxSpan) && (a.tauNs > int64(maxSpan) || a.tauFr > 0) {
		return nil, fmt.Errorf("%w: capacity %d at %v spans more than %v, the redis backend's bound", ratelimit.ErrInvalidCapacity, capacity, rate, maxSpan)
	}
	return a, nil
}

// name sets the parameters' tag, for generation gen of the limiter with
// nonce, and boxes the constant arguments that carry it.
func (a *tbAlgo) name(nonce string, gen uint64) {
	sum := sha1.Sum([]byte(fmt.Sprintf("%d %d %d %d", a.iv.Q, a.iv.R, a.iv.Den, a.capacity)))
	a.nonce, a.gen = nonce, gen
	a.tag = hex.EncodeToString(sum[:4]) + "." + nonce + "." + strconv.FormatUint(gen, 10)
	a.params = fmt.Sprintf("%d %d %d %d %s", a.tauNs, a.tauFr, a.iv.Den, int64(horizon), a.tag)
}

// succeed makes a the parameters after old, from since on; keep is how
// many earlier parameters to remember.
func (a *tbAlgo) succeed(old *tbAlgo, since time.Time, keep int) {
	a.name(old.nonce, old.gen+1)
	a.since, a.ghosts = since, old.ghosts
	if keep == 0 {
		return
	}
	h := old.hist
	if len(h) == keep {
		h = h[1:]
	}
	prev := *old
	prev.hist = nil
	a.hist = append(append(make([]*tbAlgo, 0, len(h)+1), h...), &prev)
}

// newNonce returns a random name for one limiter's generations of
// parameters, so that states it wrote are told from another instance's.
func newNonce() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (a *tbAlgo) max() int { return int(a.capacity) }

// debt bounds a debt: the intervals in 60 days, and one more, take a TAT
// from no earlier than 25 days back past the cap of a debt (35 days
// ahead), and stay exact in Lua (below 104 days). The count saturates at
// the largest int64 (a rate above about 1.8e12/s): one more must not wrap.
func (a *tbAlgo) debt(e int) int {
	c := min(a.iv.Count(exact.Time{Ns: int64(60 * 24 * time.Hour)}), math.MaxInt64-1)
	return int(min(int64(e), c+1))
}

// restate re-expresses a state the script found written under earlier
// parameters of this limiter, "<TAT, Unix ns> <numerator> <tag>", in a's,
// as the in-memory token bucket does: it replays each change since at the
// instant it happened (or now, if that is earlier), with rebase. A state
// older than the history (or, racing a change, newer than a) is taken, at
// the oldest change kept (at now, if none), as full if its TAT had passed
// then, and as empty until its TAT otherwise. A change's instant is taken
// on the server's clock as now less the change's age on the limiter's
// clock at sent: within a round trip of the local instant, and exact in
// tests that pass the limiter's clock to the script.
func (a *tbAlgo) restate(v string, now int64, sent time.Time) (string, error) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return "", fmt.Errorf("unexpected state %q", v)
	}
	ns, err1 := strconv.ParseInt(f[0], 10, 64)
	fr, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || fr < 0 {
		return "", fmt.Errorf("unexpected state %q", v)
	}
	s := exact.Time{Ns: ns, Fr: fr}
	when := func(t time.Time) int64 { return min(now-int64(sent.Sub(t)), now) }
	at := func(b *tbAlgo) int64 { return when(b.since) }
	h := a.hist
	i := len(h) - 1
	for i >= 0 && h[i].tag != f[2] {
		i--
	}
	// A state written under an override removed since: re-expressed into
	// the limiter's parameters at the removal, then replayed from there.
	if g, ok := a.ghosts.find(f[2]); i < 0 && ok && fr < g.a.iv.Den {
		if g.to == a.gen && (len(h) == 0 || h[len(h)-1].gen != g.to) {
			s = a.rebase(g.a, s, when(g.since))
			return fmt.Sprintf("%d %d", s.Ns, s.Fr), nil
		}
		for j := len(h) - 1; j >= 0; j-- {
			if h[j].gen == g.to && h[j].nonce == a.nonce && h[j].gen < ovGen0 {
				s = h[j].rebase(g.a, s, when(g.since))
				for k := j + 1; k < len(h); k++ {
					s = h[k].rebase(h[k-1], s, at(h[k]))
				}
				s = a.rebase(h[len(h)-1], s, at(a))
				return fmt.Sprintf("%d %d", s.Ns, s.Fr), nil
			}
		}
	}
	switch {
	case i >= 0 && fr >= h[i].iv.Den:
		return "", fmt.Errorf("unexpected state %q", v)
	case i < 0 && len(h) == 0:
		if t := (exact.Time{Ns: now}); s.NotAfter(t) {
			s = t
		} else {
			s = emptyAt(s, a.tau())
		}
		return fmt.Sprintf("%d %d", s.Ns, s.Fr), nil
	case i < 0:
		o := h[0]
		if t := (exact.Time{Ns: at(o)}); s.NotAfter(t) {
			s = t // full
		} else {
			s = emptyAt(s, o.tau())
		}
		i = 0
	}
	for j := i + 1; j < len(h); j++ {
		s = h[j].rebase(h[j-1], s, at(h[j]))
	}
	s = a.rebase(h[len(h)-1], s, at(a))
	return fmt.Sprintf("%d %d", s.Ns, s.Fr), nil
}

func (a *tbAlgo) tau() exact.Time { return exact.Time{Ns: a.tauNs, Fr: a.tauFr} }

// rebase re-expresses the TAT s from old's parameters in a's at the
// instant t of the change, as the in-memory token bucket does: the tokens
// the bucket held then under old, capped at a's capacity; a bucket in debt
// then keeps the instant at which it is empty, that of its latest booking.
func (a *tbAlgo) rebase(old *tbAlgo, s exact.Time, t int64) exact.Time {
	tt := exact.Time{Ns: t}
	base := s
	if base.NotAfter(tt) {
		base = tt
	}
	fullOld := exact.Time{Ns: t + old.tauNs, Fr: old.tauFr}
	fullNew := exact.Time{Ns: t + a.tauNs, Fr: a.tauFr}
	if base.NotAfter(fullOld) {
		tokens := min(old.iv.Count(old.iv.Diff(fullOld, base)), a.capacity)
		return a.iv.Sub(fullNew, tokens)
	}
	return emptyAt(old.iv.Diff(base, old.tau()), a.tau())
}

// emptyAt is the TAT, under burst tolerance tau, of a bucket empty at e
// (in another rate's units, so rounded up to a whole nanosecond).
func emptyAt(e, tau exact.Time) exact.Time { return exact.Time{Ns: e.CeilNs() + tau.Ns, Fr: tau.Fr} }

func (a *tbAlgo) args(dst []any, n, _ int64) []any {
	if n == 1 {
		return append(dst, a.niv1, a.params)
	}
	niv := a.iv.Add(exact.Time{}, n)
	return append(dst, strconv.FormatInt(niv.Ns, 10)+" "+strconv.FormatInt(niv.Fr, 10), a.params)
}

// decision reads {ok, allowed, remNs, remFr, ...}: rem is the span of the
// tokens left (full - TAT), Remaining the whole intervals in it.
func (a *tbAlgo) decision(r reply, n int64) ratelimit.Decision {
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
local nivn, nivf, taun, tauf, den, hz, held, val
local tag, pfp, nonce -- the tag of the parameters, and its first two parts
local niv_s, par_s -- the arguments nivn... and taun... were last read from
local F10TB = F10 .. '(%d+) ?(%S*)$'
local FULLTB = '%d%09d %d %s'
-- The most a bucket spans (capacity/rate), on any instance.
local MAXSPAN = 35 * 86400 * E9

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

-- The key's instant (relative to now), whether the key held a corrupt
-- value, and what parameters it was written under; held says whether the
-- key holds a value, val is the value. The value is "<instant, Unix ns>
-- <numerator> <tag>", the tag naming the parameters (see tbAlgo.tag):
-- "<fingerprint>.<nonce>.<gen>". The kind is nil for a state written
-- under this call's parameters (the same tag, or another instance's tag
-- with the same fingerprint, or no tag: an earlier version's, under the
-- same parameters by contract), 'own' for one written by this limiter
-- under earlier parameters, and 'other' for another instance's under
-- other parameters; the numerator of these two is in other units. A
-- missing key reads as now (a full bucket, an empty queue); so does a
-- value the script could not have written (another program's, or one
-- further ahead than the algorithm ever books), which is reported as
-- corrupt and replaced.
local function get_instant()
  local e = C and C[key]
  local r, b, tg
  if e and e.s and e.b == tag and e.full == FULLTB then
    -- Put under these parameters by an earlier decision of this batch:
    -- its numbers, as they would read from the value (see put_with).
    held, val = true, e.v
    r, b, tg = relsn(e.s, e.m), e.a, tag
  else
    local v, wrong = get(key)
    val = v
    if wrong then held = true; return 0, 0, true end
    if not v then return 0, 0 end
    held = true
    local s, ns
    s, ns, b, tg = string.match(v, F10TB)
    if s then
      r = relsn(tonumber(s), tonumber(ns))
    else
      local a
      a, b, tg = string.match(v, '^(%-?%d+) (%d+) ?(%S*)$')
      if a then r = rel(a) end
    end
    if not r then return 0, 0, true end
  end
  local f = tonumber(b)
  if tg == '' or tg == tag then
    if f < den and r <= hz + taun + MAXSPAN + SKEW then return r, f end
    return 0, 0, true
  end
  local p, c = string.match(tg, '^(%x+)%.(%x+)%.%d+$')
  if not p or r > hz + MAXSPAN + MAXSPAN + SKEW then return 0, 0, true end
  if c == nonce then return r, f, false, 'own' end
  if p == pfp and f < den then return r, f end
  return r, f, false, 'other'
end

-- cancellable reports whether the booking of the cancel token ARGV[5],
-- "<act> <end ns> <end numerator>", is not yet due (its act has not
-- passed) and is the latest still held: the key's instant (tn, tf, read
-- by get_instant) is still the end it left; latest, whether it is the
-- latest, due or not.
local tn, tf
local function cancellable()
  local a, es, ef = string.match(ARGV[5], '^(%-?%d+) (%-?%d+) (%d+)$')
  return a ~= nil and rel(a) >= 0 and rel(es) == tn and tonumber(ef) == tf
end
local function latest()
  local a, es, ef = string.match(ARGV[5], '^(%-?%d+) (%-?%d+) (%d+)$')
  return a ~= nil and rel(es) == tn and tonumber(ef) == tf
end

-- debt returns the instant (sn, sf) moved on n intervals (nivn, nivf), a
-- debt booked with no admission check, but never beyond MAXSPAN ahead of
-- now (what lies beyond is forgiven); an instant already beyond stays.
local function debt(sn, sf)
  if sn >= MAXSPAN then return sn, sf end
  if le(nivn, nivf, MAXSPAN - sn - 1, 0) then return add(sn, sf, nivn, nivf) end
  return MAXSPAN, 0
end

-- restated reads, for a state written by this limiter under earlier
-- parameters (kind 'own'), the replacement the caller sent for it
-- (ARGV[9]) if the state is still the one it was computed from
-- (ARGV[8]); without one, the reply asks for it: {4, 0, now_s, now_ns,
-- 0, 0, the value}.
local function restated()
  if ARGV[8] ~= val then return reply(4, 0, now_s, now_ns, 0, 0, val) end
  local a, b = string.match(ARGV[9], '^(%-?%d+) (%d+)$')
  tn, tf = rel(a), tonumber(b)
end

-- token is the cancel token of a booking acting at act that left the
-- instant (xn, xf).
local function token(act, xn, xf) return abs(act) .. ' ' .. abs(xn) .. ' ' .. frac(xf) end

-- put stores the instant sn + sf/den until it passes, or deletes the key
-- if it has passed (the key is then at rest).
local function put(sn, sf)
  if le(sn, sf, 0, 0) then
    if held then del(key) end
  else
    put_with(key, sn, FULLTB, '%d %s', sf, tag, ceil(sn, sf))
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
  local a, b, c, d, g = string.match(ARGV[7], '^(%d+) (%d+) (%d+) (%d+) (%S+)$')
  taun, tauf, den, hz, par_s = tonumber(a), tonumber(b), tonumber(c), tonumber(d), ARGV[7]
  tag = g
  pfp, nonce = string.match(g, '^(%x+)%.(%x+)%.')
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
// together with them. Nor does it give back from a state written under
// other parameters.
//
// A state written under other parameters (see get_instant): another
// instance's, under parameters this one does not know, is read as empty
// until its TAT (full if that has passed), refilling at this limiter's
// rate from then. This limiter's own, under earlier parameters, needs the
// history of its changes, which the hot path does not send: the step
// replies {4, 0, now_s, now_ns, 0, 0, value} and writes nothing; the
// limiter re-expresses the value (tbAlgo.restate) and calls again with
// ARGV[8] the value and ARGV[9] its replacement, used if the key still
// holds that value (else the reply asks again), or ARGV[8] '*' to read it
// as another instance's. A peek stores the replacement, as the in-memory
// bucket keeps a state re-expressed by a peek.
var tbScript = script{name: "tb", fetch: 1, defs: luaFraction, body: luaFractionBegin + `
local corrupt, kind
tn, tf, corrupt, kind = get_instant()
local status = 0
if corrupt then status = 2 end

if op == 'u' then
  if corrupt then del(key); return 2 end
  if not held or kind or not cancellable() then return 0 end
  put(sub(tn, tf, nivn, nivf))
  return 1
end

-- A settlement of the booking of the cancel token ARGV[5] (see
-- limiter.settle): 'g' gives a surplus of n tokens back, at any time, if
-- the booking is still the latest held, under these parameters; 'd'
-- books a debt of n tokens from the TAT as it stands, or from now if it
-- has passed (the bucket full again), once the state is in these
-- parameters. Either then replies as a peek.
local settling = op == 'g' or op == 'd'
if op == 'g' and held and not corrupt and not kind and latest() then
  tn, tf = sub(tn, tf, nivn, nivf)
  put(tn, tf)
end

if kind == 'own' and ARGV[8] == '*' then
  kind = 'other' -- the caller gave up re-expressing it (see limiter.step)
elseif kind == 'own' then
  local r = restated()
  if r then return r end
  -- Kept even by a peek, as in memory: the history it was re-expressed
  -- through may be gone by the next call.
  if n == 0 then put(tn, tf) end
end
if kind == 'other' then
  -- Another instance's, under parameters this one does not know: empty
  -- until its TAT, then refilling at this rate (full if it has passed).
  if le(tn, tf, 0, 0) then tn, tf = 0, 0 else tn, tf = ceil(tn, tf) + taun, tauf end
end
if op == 'd' then
  -- From now at the earliest: a bucket refilled since is full, as the
  -- bucket of a key dropped at rest and set up again is.
  if le(tn, tf, 0, 0) then tn, tf = 0, 0 end
  tn, tf = debt(tn, tf)
  put(tn, tf)
  corrupt = false -- replaced
end

local maxwait = 0
if settling then
  n, nivn, nivf, niv_s = 0, 0, 0, nil
else
  maxwait = tonumber(ARGV[5])
  -- A peek counts no intervals, whatever ARGV[6] says: the penalty box
  -- peeks with the arguments of the n it refuses.
  if n == 0 and (nivn ~= 0 or nivf ~= 0) then nivn, nivf, niv_s = 0, 0, nil end
end
if maxwait < 0 or maxwait > hz then maxwait = hz end
if tn < 0 then tn, tf = 0, 0 end -- base = max(TAT, now)
local xn, xf = add(tn, tf, nivn, nivf)
local delay = 0
-- A peek takes nothing: it conforms now, whatever is booked ahead.
if n > 0 and not le(xn, xf, taun, tauf) then delay = ceil(sub(xn, xf, taun, tauf)) end
if delay > maxwait then
  if corrupt then del(key) end
  local rn, rf = sub(taun, tauf, tn, tf)
  return reply(status, 0, rn, rf, delay, ceil(tn, tf))
end
if n > 0 then put(xn, xf) elseif corrupt then del(key) end
local rn, rf = sub(taun, tauf, xn, xf)
local allowed = 0
if delay == 0 then allowed = 1 end
if op == 'r' then
  return reply(status + 1, allowed, rn, rf, delay, ceil(xn, xf), token(delay, xn, xf))
end
return reply(status + 1, allowed, rn, rf, delay, ceil(xn, xf))
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
