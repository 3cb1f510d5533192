package redis

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// What the window algorithms (FixedWindow, SlidingLog, SlidingWindowCounter)
// share.

// maxWindowLimit bounds the window algorithms' L, so that counts and the
// products the sliding window counter forms stay exact.
const maxWindowLimit = 1 << 40

// windowParams checks a rate for the window algorithms on Redis.
func windowParams(rate ratelimit.Rate) error {
	if !rate.Valid() || rate.N > maxWindowLimit || rate.Period > maxSpan {
		return fmt.Errorf("%w: %v (the redis backend needs a count in [1, 2^40] and a period in (0, %v])", ratelimit.ErrInvalidRate, rate, maxSpan)
	}
	return nil
}

// luaWindowArgs returns the Lua that reads a window algorithm's W, L and
// hz from ARGV[6], ARGV[7] and ARGV[hz] into the chunk's variables W, L
// and hz, parsed again only when an argument differs from the last call's
// (kept in Ws, Ls and hzs; Lua compares strings by reference): once per
// batch, and in a library once per parameters.
func luaWindowArgs(hz int) string {
	a := "ARGV[" + strconv.Itoa(hz) + "]"
	return `
if ARGV[6] ~= Ws or ARGV[7] ~= Ls or ` + a + ` ~= hzs then
  -- Parsed again only when an argument differs from the last call's (Lua
  -- compares strings by reference): once per batch, and in a library once
  -- per parameters.
  Ws, Ls, hzs = ARGV[6], ARGV[7], ` + a + `
  W, L, hz = tonumber(Ws), tonumber(Ls), tonumber(hzs)
end`
}

// windowStart returns t rounded down to a multiple of w.
func windowStart(t, w int64) int64 {
	m := t % w
	if m < 0 {
		m += w
	}
	return t - m
}

// luaAlign defines align(), the start of the window of length W holding
// now, relative to now (so in (-W, 0]), from ARGV[8], a window boundary
// near now in Unix ns. Its distance d from now, at most 92 days (the
// local clock's skew plus up to W), is exact, and so is d + ⌊-d/W⌋·W once
// corrected by one W for the rounding of the division.
const luaAlign = `
local MAXL = 1099511627776 -- 2^40, the most L may be
local aligned -- align()'s answer in this call; the body sets it to nil
-- carry counts a debt of e events in the window s (relative to now)
-- holding k: up to L there, and beyond, L in each window after it, the
-- key's window becoming the last of them with what is left (1 to L), so
-- that a debt never vanishes at a window boundary. The carry stops at hz
-- ahead of now: a debt reaching further is forgiven. It returns the
-- window, its count and whether the debt carried past s.
local function carry(s, k, e)
  local total = k + e
  if total <= L then return s, total, false end
  local q = math.floor((total - 1) / L) -- windows filled before the last
  while q > 0 and q * L > total - 1 do q = q - 1 end
  while (q + 1) * L <= total - 1 do q = q + 1 end
  local room = hz - s
  local mq = 0
  if room > 0 then
    mq = math.floor(room / W)
    while mq > 0 and mq * W > room do mq = mq - 1 end
    while (mq + 1) * W <= room do mq = mq + 1 end
  end
  if q > mq then
    if mq == 0 then return s, L, false end
    return s + mq * W, L, true
  end
  if q == 0 then return s, L, false end
  return s + q * W, total - q * L, true
end
local function align()
  if aligned then return aligned end
  local d = rel(ARGV[8])
  if d <= -8000000000000000 or d >= 8000000000000000 then
    error('ratelimit: the local clock is too far off the server clock')
  end
  local st = d + math.floor(-d / W) * W
  if st > 0 then st = st - W elseif st <= -W then st = st + W end
  aligned = st
  return st
end
`

// windowAlgo is what the three window algorithms send to their scripts and
// read back: ARGV window, limit, [the start of the local clock's window, an
// exact reference for the alignment, if aligned], horizon; the reply
// {ok, allowed, remaining, 0, ...}.
type windowAlgo struct {
	limit, window, horizon int64
	aligned                bool
	boxed                  struct{ window, limit, horizon any } // boxed once
	last                   atomic.Pointer[anchorArg]
}

func newWindowAlgo(limit, window, horizon int64, aligned bool) *windowAlgo {
	a := &windowAlgo{limit: limit, window: window, horizon: horizon, aligned: aligned}
	a.boxed.window, a.boxed.limit, a.boxed.horizon = window, limit, horizon
	return a
}

// with returns the parameters of rate, aligned as a's.
func (a *windowAlgo) with(rate ratelimit.Rate) *windowAlgo {
	return newWindowAlgo(rate.N, int64(rate.Period), a.horizon, a.aligned)
}

// setLocalRate makes a rate change on a FailLocal limiter of windows.
func setLocalRate(rate ratelimit.Rate) func(ratelimit.Limiter) error {
	return func(l ratelimit.Limiter) error {
		return l.(interface{ SetRate(ratelimit.Rate) error }).SetRate(rate)
	}
}

func (a *windowAlgo) max() int { return int(a.limit) }

// debt bounds a debt to 2^52 events, which the scripts count exactly.
func (a *windowAlgo) debt(e int) int { return min(e, 1<<52) }

func (a *windowAlgo) args(dst []any, _, local int64) []any {
	dst = append(dst, a.boxed.window, a.boxed.limit)
	if a.aligned {
		dst = append(dst, a.anchor(local))
	}
	return append(dst, a.boxed.horizon)
}

// anchor returns the start of the window holding local, as the script's
// argument: boxed once per window, not at each call.
func (a *windowAlgo) anchor(local int64) any {
	st := windowStart(local, a.window)
	if c := a.last.Load(); c != nil && c.start == st {
		return c.boxed
	}
	c := &anchorArg{start: st, boxed: strconv.FormatInt(st, 10)}
	a.last.Store(c)
	return c.boxed
}

type anchorArg struct {
	start int64
	boxed any
}

func (a *windowAlgo) decision(r reply, _ int64) ratelimit.Decision {
	return ratelimit.Decision{
		Allowed:    r.allowed,
		Limit:      int(a.limit),
		Remaining:  int(r.a),
		RetryAfter: time.Duration(r.retry),
		ResetAfter: time.Duration(r.reset),
	}
}

// span is two windows: the sliding window counter's previous window weighs
// for one more window; the others come to rest within one.
func (a *windowAlgo) span() int64 { return 2 * a.window }

// period is the rate's period.
func (a *windowAlgo) period() int64 { return a.window }
