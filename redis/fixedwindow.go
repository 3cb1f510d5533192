package redis

import (
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// FixedWindow is ratelimit.FixedWindow on Redis: at most L events per key
// in each window of length W, for a rate of L per W, windows aligned to the
// Unix epoch on the Redis server's clock, shared by every limiter instance
// that uses the same Redis, prefix and parameters. Its decisions, Reserve
// and Cancel are those of ratelimit.FixedWindow (see there), to the
// nanosecond.
//
// Aligning a window needs the server's time modulo W, which Lua's doubles
// cannot compute from a Unix time in nanoseconds. So each call sends a
// window boundary computed on the local clock (a multiple of W, in exact
// integer arithmetic); the script finds the boundary of the server's now
// from it in small, exact steps. The local clock only serves as that
// reference: it may be off the server's by up to 50 days without changing
// a decision (by much more, the call fails and the failure policy answers).
//
// The key holds "<window start, Unix ns> <count>", with a TTL ending at
// most 2 ms after the key is at rest (its window has passed, or it counts
// nothing and has begun).
//
// Limits beyond the in-memory type's: W at most 35 days, L at most 2^40,
// and bookings (Reserve, Wait) at most 35 days ahead, so always into the
// next window unless one is booked there already; a later booking is
// refused (the Reservation is not OK).
//
// Build it with NewFixedWindow. It is safe for concurrent use. Most callers
// want Allow.
type FixedWindow struct {
	limiter
}

var (
	_ ratelimit.Limiter = (*FixedWindow)(nil)
	_ ratelimit.Taker   = (*FixedWindow)(nil)
)

// NewFixedWindow returns a fixed-window limiter on Redis of rate.N events
// per window of rate.Period, per key. It returns an error matching
// ratelimit.ErrInvalidRate if the rate's count or period is not positive,
// the count exceeds 2^40 or the period 35 days, and
// ratelimit.ErrInvalidOption for a nil client or a bad option.
func NewFixedWindow(client Client, rate ratelimit.Rate, opts ...Option) (*FixedWindow, error) {
	if err := windowParams(rate); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	a := newWindowAlgo(rate.N, int64(rate.Period), int64(maxSpan), true)
	l, err := newLimiter(client, fwScript, []string{":fw"}, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewFixedWindow(rate, o...)
	})
	if err != nil {
		return nil, err
	}
	return &FixedWindow{l}, nil
}

// SetRate changes the limit and the window's length for every key, from
// each key's next decision on, as ratelimit.FixedWindow.SetRate does (each
// key keeps its window's start and count), and with the same errors as
// NewFixedWindow, leaving the limiter unchanged on error. A call reads the
// parameters once: it decides under either the old ones or the new ones.
//
// The change is this limiter's, not Redis's: every instance sharing the
// keys must make it (see the package doc, Changing the rate). A window
// written under other parameters, this limiter's earlier ones or another
// instance's, is read as in memory: its start and count, the count held
// against this limiter's limit, the window closing this limiter's length
// after its start. A Cancel of a booking made before the change gives
// nothing back. Under FailLocal the local limiter changes too.
func (fw *FixedWindow) SetRate(rate ratelimit.Rate) error {
	return fw.setRate(func(old algorithm, _ time.Time) (algorithm, error) {
		if err := windowParams(rate); err != nil {
			return nil, err
		}
		return old.(*windowAlgo).with(rate), nil
	}, setLocalRate(rate))
}

// fwScript mirrors the core's fwParams.admit and unstep; st is the key's
// window start relative to now. Its replies are the token bucket's (see
// tbScript), remaining in place of remNs; the cancel token is the booked
// instant. A value the script could not have written (a window start
// further ahead than a booking goes, a count above 2^40) is corrupt: the
// key starts afresh. A window start off the epoch's boundaries and a
// count above L are what a change of the rate leaves (see SetRate).
var fwScript = script{name: "fw", fetch: 1, defs: `
local W, L, hz, st, c, v
local Ws, Ls, hzs -- the arguments W, L and hz were last read from
local F10FW = F10 .. '(%d+)$'
local FULLFW = '%d%09d %d'
` + luaAlign + `
local function put(s, k)
  if -s >= W or (k == 0 and s <= 0) then
    if v then del(key) end
    return
  end
  local rest = s + W
  if k == 0 then rest = s end
  put_with(key, s, FULLFW, '%d', k, nil, rest)
end
local function remaining(s, k)
  if s > 0 then return 0 end
  return math.max(L - k, 0) -- none over a limit lowered since
end
local function reset(s, k)
  if k == 0 then return math.max(s, 0) end
  return math.max(s + W, 0)
end
`, body: luaWindowArgs(9) + `
aligned = nil
st, c = nil, nil
local corrupt
local e = C and C[key]
if e and e.s and e.full == FULLFW then
  -- Put by an earlier decision of this batch: its numbers, as they would
  -- read from the value (see put_with).
  v, st, c = true, relsn(e.s, e.m), e.a
  if c > MAXL or st > hz + SKEW then
    corrupt, st, c = true, nil, nil
  end
else
  v, corrupt = get(key)
end
if v and not st and not corrupt then
  local a, b, x = string.match(v, F10FW)
  if a then
    st, c, a = relsn(tonumber(a), tonumber(b)), tonumber(x), true
  else
    a, b = string.match(v, '^(%-?%d+) (%d+)$')
    if a then st, c = rel(a), tonumber(b) end
  end
  if not a or c > MAXL or st > hz + SKEW then
    corrupt, st, c = true, nil, nil
  end
end
local status = 0
if corrupt then status, v = 2, true end

-- A settlement of the booking at ARGV[5] (see limiter.settle): 'g'
-- gives a surplus of n events back, at any time, if the key's window is
-- still the one the booking was counted in; 'd' counts a debt of n events
-- in the key's window as it stands (the window of now if it has passed),
-- carried into the windows after it beyond L. Either then replies as a
-- peek.
if op == 'g' then
  local act = rel(ARGV[5])
  if v and not corrupt and st <= act and act < st + W and (st - align()) % W == 0 then
    c = c - math.min(n, c)
    put(st, c)
  end
  n = 0
elseif op == 'd' then
  if not st or -st >= W then st, c = align(), 0 end
  st, c = carry(st, c, n)
  put(st, c)
  corrupt, v = false, true
  n = 0
end

if op == 'u' then
  if corrupt then del(key); return 2 end
  local act = rel(ARGV[5])
  -- The booking's window, aligned to the epoch, is still the key's.
  if v and act >= 0 and st <= act and act < st + W and (st - align()) % W == 0 then
    put(st, c - math.min(n, c))
    return 1
  end
  return 0
end

if not st or -st >= W then st, c = align(), 0 end -- a passed window counts nothing
if n == 0 then
  if corrupt then del(key) end
  return reply(status + 1, 1, remaining(st, c), 0, 0, reset(st, c))
end
local target, total = st, c + n
if n > L - c then target, total = st + W, n end
local act = math.max(target, 0)
local maxwait = tonumber(ARGV[5])
if maxwait < 0 or maxwait > hz then maxwait = hz end
if act > maxwait then
  if corrupt then del(key) end
  return reply(status, 0, remaining(st, c), 0, act, reset(st, c))
end
put(target, total)
local allowed, rem = 0, 0
if act == 0 then allowed, rem = 1, L - total end
if op == 'r' then
  return reply(status + 1, allowed, rem, 0, act, reset(target, total), abs(act))
end
return reply(status + 1, allowed, rem, 0, act, reset(target, total))
`}
