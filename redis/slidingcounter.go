package redis

import (
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// SlidingWindowCounter is ratelimit.SlidingWindowCounter on Redis: per key,
// the previous window's count weighted by the share of it still inside the
// sliding window, plus the current window's count, at most L per W;
// windows aligned to the Unix epoch on the Redis server's clock, as for
// FixedWindow (see there for how the script aligns them exactly). Its
// decisions, Reserve and Cancel are those of ratelimit.SlidingWindowCounter
// (see there, also for the approximation's worst case), to the nanosecond.
//
// The core compares prev·(W−e) + count·W with L·W in 128-bit integers; Lua
// has only doubles, so the script forms these products exactly in four
// 26-bit limbs, and finds quotients (how many events fit, how soon) from a
// floating-point estimate corrected by exact comparisons.
//
// The key holds "<window start, Unix ns> <previous count> <count>", with a
// TTL ending at most 2 ms after the key is at rest (no window it counts has
// weight left).
//
// Limits beyond the in-memory type's: W at most 35 days, L at most 2^40,
// and bookings (Reserve, Wait) at most 30 days ahead; a later booking is
// refused (the Reservation is not OK).
//
// Build it with NewSlidingWindowCounter. It is safe for concurrent use.
// Most callers want Allow.
type SlidingWindowCounter struct {
	limiter
}

var (
	_ ratelimit.Limiter = (*SlidingWindowCounter)(nil)
	_ ratelimit.Taker   = (*SlidingWindowCounter)(nil)
)

// NewSlidingWindowCounter returns a sliding window counter on Redis of
// rate.N events per sliding window of rate.Period, per key. It returns an
// error matching ratelimit.ErrInvalidRate if the rate's count or period is
// not positive, the count exceeds 2^40 or the period 35 days, and
// ratelimit.ErrInvalidOption for a nil client or a bad option.
func NewSlidingWindowCounter(client Client, rate ratelimit.Rate, opts ...Option) (*SlidingWindowCounter, error) {
	if err := windowParams(rate); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	a := newWindowAlgo(rate.N, int64(rate.Period), int64(horizon), true)
	l, err := newLimiter(client, swcScript, []string{":swc"}, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingWindowCounter(rate, o...)
	})
	if err != nil {
		return nil, err
	}
	return &SlidingWindowCounter{l}, nil
}

// SetRate changes the limit and the window's length for every key, from
// each key's next decision on, as ratelimit.SlidingWindowCounter.SetRate
// does (each key keeps its window's start and both counts), and with the
// same errors as NewSlidingWindowCounter, leaving the limiter unchanged on
// error. A call reads the parameters once: it decides under either the old
// ones or the new ones.
//
// The change is this limiter's, not Redis's: every instance sharing the
// keys must make it (see the package doc, Changing the rate). Counts
// written under other parameters, this limiter's earlier ones or another
// instance's, are read as in memory, weighed against this limiter's limit
// and length. A Cancel of a booking made before the change gives nothing
// back. Under FailLocal the local limiter changes too.
func (sc *SlidingWindowCounter) SetRate(rate ratelimit.Rate) error {
	return sc.setRate(func(old algorithm, _ time.Time) (algorithm, error) {
		if err := windowParams(rate); err != nil {
			return nil, err
		}
		return old.(*windowAlgo).with(rate), nil
	}, setLocalRate(rate))
}

// luaSWCMath defines the counter's quotients over W and L: earliest and
// remaining (the core's swcAlgo methods of those names).
const luaSWCMath = luaWide + `
local W, L
-- Products of integers below EXACT (2^52) are exact in a double: where
-- the largest product a function takes is below it, it skips the limbs.
local EXACT = 4503599627370496
-- earliest: the least e >= e0 with prev*(W-e) + count*W <= L*W; W if none
-- below W. With k = floor((L-count)*W / prev), that is max(e0, W-k).
local function earliest(prev, count, e0)
  if prev == 0 or L - count >= prev then return e0 end -- k >= W
  if prev * W < EXACT and L >= count then
    -- Every product below is under prev*W < 2^52: exact in a double.
    local T = (L - count) * W
    local k = math.min(math.floor((L - count) / prev * W), W - 1)
    while k > 0 and k * prev > T do k = k - 1 end
    while (k + 1) * prev <= T do k = k + 1 end
    return math.max(e0, W - k)
  end
  local T = mul(L - count, W)
  local k = math.min(math.floor((L - count) / prev * W), W - 1)
  while k > 0 and wcmp(mul(k, prev), T) > 0 do k = k - 1 end
  while wcmp(mul(k + 1, prev), T) <= 0 do k = k + 1 end
  return math.max(e0, W - k)
end
-- remaining: L - cur - ceil(prev*(W-e)/W), not below 0, at e = -s ns into
-- the window s; 0 before it opens.
local function remaining(s, prev, cur)
  local e = -s
  if e < 0 then return 0 end
  if prev * W < EXACT and e <= W then
    -- Every product below is under prev*W < 2^52: exact in a double.
    local P = prev * (W - e)
    local q = math.max(math.min(math.ceil(prev / W * (W - e)), prev), 0)
    while q > 0 and (q - 1) * W >= P do q = q - 1 end
    while q * W < P do q = q + 1 end
    return math.max(L - cur - q, 0)
  end
  local P = mul(prev, W - e)
  local q = math.max(math.min(math.ceil(prev / W * (W - e)), prev), 0)
  while q > 0 and wcmp(mul(q - 1, W), P) >= 0 do q = q - 1 end
  while wcmp(mul(q, W), P) < 0 do q = q + 1 end
  return math.max(L - cur - q, 0)
end
`

// swcScript mirrors the core's swcParams.admit and unstep; st is the key's
// window start relative to now, so now lies e = -st into it. Its replies
// are the fixed window's. A value the script could not have written (a
// window start off the epoch's boundaries or further ahead than a booking
// goes, counts above 2^40) is corrupt: the key starts afresh. A window
// start off the epoch's boundaries and counts above L are what a change of
// the rate leaves (see SetRate).
var swcScript = script{name: "swc", fetch: 1, defs: luaSWCMath + `
local hz, st, prev, cur, v
local Ws, Ls, hzs -- the arguments W, L and hz were last read from
local F10SWC = F10 .. '(%d+) (%d+)$'
local FULLSWC = '%d%09d %d %d'
` + luaAlign + `
-- rest: when a key in window s with these counts is at rest.
local function rest(s, p, c)
  if c > 0 then return s + 2 * W end
  if p > 0 then return s + W end
  return s
end
local function put(s, p, c)
  local r = rest(s, p, c)
  if r <= 0 then
    if v then del(key) end
    return
  end
  put_with(key, s, FULLSWC, '%d %d', p, c, r)
end
`, body: luaWindowArgs(9) + `
aligned = nil
st, prev, cur = nil, nil, nil
local corrupt
local e = C and C[key]
if e and e.s and e.full == FULLSWC then
  -- Put by an earlier decision of this batch: its numbers, as they would
  -- read from the value (see put_with).
  v, st, prev, cur = true, relsn(e.s, e.m), e.a, e.b
  if prev > MAXL or cur > MAXL or st > hz + SKEW then
    corrupt, st = true, nil
  end
else
  v, corrupt = get(key)
end
if v and not st and not corrupt then
  local a, b, c, d = string.match(v, F10SWC)
  if a then
    st, prev, cur, a = relsn(tonumber(a), tonumber(b)), tonumber(c), tonumber(d), true
  else
    a, b, c = string.match(v, '^(%-?%d+) (%d+) (%d+)$')
    if a then st, prev, cur = rel(a), tonumber(b), tonumber(c) end
  end
  if not a or prev > MAXL or cur > MAXL or st > hz + SKEW then
    corrupt, st = true, nil
  end
end
local status = 0
if corrupt then status, v = 2, true end

-- A settlement of the booking at ARGV[5] (see limiter.settle): 'g'
-- gives a surplus of n events back, at any time, from the count of the
-- window the booking was counted in if the state still keeps it; 'd'
-- counts a debt of n events in the key's window as it stands (as seen at
-- now), carried into the windows after it beyond L (the one before the
-- last then counting L). Either then replies as a peek.
if op == 'g' then
  local act = rel(ARGV[5])
  if v and not corrupt and (st - align()) % W == 0 then
    if st <= act and act < st + W then
      cur = cur - math.min(n, cur)
      put(st, prev, cur)
    elseif st - W <= act and act < st then
      prev = prev - math.min(n, prev)
      put(st, prev, cur)
    end
  end
  n = 0
elseif op == 'd' then
  if not st or -st >= 2 * W then
    st, prev, cur = align(), 0, 0
  elseif -st >= W then
    st, prev, cur = st + W, cur, 0
  end
  local carried
  st, cur, carried = carry(st, cur, n)
  if carried then prev = L end
  put(st, prev, cur)
  corrupt, v = false, true
  n = 0
end

if op == 'u' then
  if corrupt then del(key); return 2 end
  local act = rel(ARGV[5])
  -- Only from a window aligned to the epoch, as in memory.
  if not v or act < 0 or (st - align()) % W ~= 0 then return 0 end
  if st <= act and act < st + W then
    put(st, prev, cur - math.min(n, cur))
    return 1
  elseif st - W <= act and act < st then
    put(st, prev - math.min(n, prev), cur)
    return 1
  end
  return 0
end

-- The window and counts as seen at now.
if not st or -st >= 2 * W then
  st, prev, cur = align(), 0, 0
elseif -st >= W then
  st, prev, cur = st + W, cur, 0
end
if n == 0 then
  if corrupt then del(key) end
  return reply(status + 1, 1, remaining(st, prev, cur), 0, 0, math.max(rest(st, prev, cur), 0))
end
local e0 = math.max(-st, 0)
local ns, np, nc, act
if n <= L - cur then
  local e = earliest(prev, cur + n, e0)
  if e < W then ns, np, nc, act = st, prev, cur + n, st + e end
end
if not ns then
  local e = earliest(cur, n, 0)
  if e < W then
    ns, np, nc, act = st + W, cur, n, st + W + e
  else
    ns, np, nc, act = st + 2 * W, 0, n, st + 2 * W
  end
end
local maxwait = tonumber(ARGV[5])
if maxwait < 0 or maxwait > hz then maxwait = hz end
if act > maxwait then
  if corrupt then del(key) end
  return reply(status, 0, remaining(st, prev, cur), 0, act, math.max(rest(st, prev, cur), 0))
end
put(ns, np, nc)
local allowed, rem = 0, 0
if act == 0 then allowed, rem = 1, remaining(ns, np, nc) end
if op == 'r' then
  return reply(status + 1, allowed, rem, 0, act, math.max(rest(ns, np, nc), 0), abs(act))
end
return reply(status + 1, allowed, rem, 0, act, math.max(rest(ns, np, nc), 0))
`}
