package redis

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// SlidingLog is ratelimit.SlidingLog on Redis: exact, at most L events per
// key in every interval of length W, for a rate of L per W, on the Redis
// server's clock, shared by every limiter instance that uses the same
// Redis, prefix and parameters. Its decisions, Reserve and Cancel are those
// of ratelimit.SlidingLog (see there), to the nanosecond.
//
// A key's log takes one of two forms, chosen by each decision from the
// limit L it runs under (the limiter's, or the key's override's). Up to
// 2,048 events it is one Redis string (suffix ":slp"): a 17-byte header
// and 8 bytes an event, read whole and written whole with its expiry in
// one SET (once per batch for a key a batch touches several times), so
// that a decision costs what the other algorithms' do. Above 2,048 it is
// the list earlier versions kept (":sl", decimal Unix ns, with its floor
// under ":slf"), of which a decision reads O(log L) entries and writes
// only what changes: a string copied whole would cost Redis 0.4 ms a
// decision on a full log at 10,000 events and 64 ms at 1,048,576, during
// which Redis serves nothing else; the list costs 0.1 to 0.2 ms up to
// 1,048,576. Memory is O(L) per key either way, and every key expires at
// most 2 ms after it is at rest.
//
// When SetRate or an override moves a key's limit across 2,048, the
// key's next decision converts its log into the other form (the same
// instants, the same floor) and deletes the old form's keys in the same
// script call. A key that holds both forms (as earlier versions running
// beside this one can leave it) is decided on the form its limit chooses,
// and the other is left alone. See docs/redis.md, The sliding log's value
// and Upgrading the sliding log.
//
// A value the script could not have written is reported as corrupt
// (ErrCorruptState) and the key starts afresh. In the string: a value of
// another type, a wrong tag or length, more than 2^20 entries, a base
// more than 104 days ahead or not a whole second, a floor or newest entry
// further ahead than a booking goes (plus the longest window for the
// floor, and a day), and an entry a decision reads (every entry, when the
// log is converted into a list) that is not a whole number of nanoseconds
// below 2^53 in magnitude. In the list: a key of another type, a floor
// or any of the first 32 entries or the newest that is not a decimal
// integer, more than 2^20 entries, and a newest entry or floor further
// ahead than a booking goes (as for the string). Other entries, and
// entries out of order, are not checked.
//
// Limits beyond the in-memory type's: W at most 35 days, and bookings
// (Reserve, Wait) at most 30 days ahead; a later booking is refused (the
// Reservation is not OK). L is at most 1,048,576, as in memory.
//
// Build it with NewSlidingLog. It is safe for concurrent use. Most callers
// want Allow.
type SlidingLog struct {
	limiter
}

var (
	_ ratelimit.Limiter = (*SlidingLog)(nil)
	_ ratelimit.Taker   = (*SlidingLog)(nil)
)

// maxLogLimit is the in-memory SlidingLog's bound on L.
const maxLogLimit = 1 << 20

// slPackedMax is the longest limit whose decisions keep a key's log as
// one string (slFormat); a decision under a longer limit keeps it as a
// list (slList). A decision copies the string whole but reads and writes
// only a few entries of the list. Measured on a full log
// (BenchmarkSlidingLogFull, Redis time per decision): at 1,000 events the
// string 68 µs against the list's 96, at 2,048 119 µs against 107 (about
// even), at 10,000 0.40 ms against 0.12 ms. Up to here the string's
// single read and write is what lets a batch decide many keys cheaply.
const slPackedMax = 2048

// NewSlidingLog returns a sliding log on Redis of rate.N events per sliding
// window of rate.Period, per key. It returns an error matching
// ratelimit.ErrInvalidRate if the rate's count or period is not positive,
// the count exceeds 1,048,576 or the period 35 days, and
// ratelimit.ErrInvalidOption for a nil client or a bad option.
func NewSlidingLog(client Client, rate ratelimit.Rate, opts ...Option) (*SlidingLog, error) {
	if err := slidingLogParams(rate); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	a := newWindowAlgo(rate.N, int64(rate.Period), int64(horizon), false)
	l, err := newLimiter(client, slScript, []string{":sl", ":slf", ":slp"}, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingLog(rate, o...)
	})
	if err != nil {
		return nil, err
	}
	return &SlidingLog{l}, nil
}

// SetRate changes the limit and the window's length for every key, from
// each key's next decision on, as ratelimit.SlidingLog.SetRate does (each
// key keeps the instants it has logged, counted against the new limit over
// the new window), and with the same errors as NewSlidingLog, leaving the
// limiter unchanged on error. A call reads the parameters once: it decides
// under either the old ones or the new ones.
//
// The change is this limiter's, not Redis's: every instance sharing the
// keys must make it (see the package doc, Changing the rate). A log
// written under other parameters, this limiter's earlier ones or another
// instance's, is read as in memory. A Cancel of a booking made before the
// change gives nothing back. Under FailLocal the local limiter changes
// too.
func (sl *SlidingLog) SetRate(rate ratelimit.Rate) error {
	return sl.setRate(func(old algorithm, _ time.Time) (algorithm, error) {
		if err := slidingLogParams(rate); err != nil {
			return nil, err
		}
		return old.(*windowAlgo).with(rate), nil
	}, setLocalRate(rate))
}

// slidingLogParams checks a rate for the sliding log on Redis.
func slidingLogParams(rate ratelimit.Rate) error {
	if err := windowParams(rate); err != nil {
		return err
	}
	if rate.N > maxLogLimit {
		return fmt.Errorf("%w: a sliding log of %d events per key; the limit is %d (use SlidingWindowCounter)", ratelimit.ErrInvalidRate, rate.N, maxLogLimit)
	}
	return nil
}

// luaSlDebt begins a sliding log's debt ('d', see limiter.settle), in
// both of its formats: t is the booking's instant, m how many of its n
// instants the log keeps (at most L) and i where they go, the oldest
// entries beyond L dropped first (raising the floor, as for a booking).
const luaSlDebt = `    local t = rel(ARGV[5])
    local m = math.min(n, L)
    if n > L then floor = math.max(floor, t + W) end
    local i = after(t) -- the new instants go before the first later than t
    local over = N + m - L
    if over > 0 then
      local d = math.min(over, i)
      drop(d)
      i = i - d
      if over - d > 0 then -- the oldest of the merged log are copies of t
        m = m - (over - d)
        floor = math.max(floor, t + W)
      end
    end
`

// luaSlAdmit is a sliding log's step up to its verdict, in both of its
// formats: a peek (n 0) replies at once; otherwise act is when n more
// events may act (not before now, the floor, the newest instant, nor a
// window after the (L - n + 1)-th newest entry), and a step that would
// wait longer than ARGV[5] (at most the horizon) is refused.
const luaSlAdmit = `  local from = math.max(0, floor, newest)
  if n == 0 then
    if op == 'r' then return reply(status + 1, 1, remaining(from), 0, 0, reset(), abs(0)) end
    return reply(status + 1, 1, remaining(from), 0, 0, reset())
  end
  local act = from
  local j = N - (L - n) - 1
  if j >= 0 then act = math.max(act, at(j) + W) end
  local maxwait = tonumber(ARGV[5])
  if maxwait < 0 or maxwait > hz then maxwait = hz end
  if act > maxwait then
    return reply(status, 0, remaining(from), 0, act, reset())
  end
`

// slScript mirrors the core's slParams.admit and unstep. A decision under
// a limit above slPackedMax runs slList, on the list KEYS[1] and its floor
// KEYS[2] (converting a log kept in KEYS[3] first, see tolist); the rest
// of the script is the decision on the string KEYS[3] (see slFormat),
// which imports a log kept in KEYS[1] and KEYS[2] when KEYS[3] is missing
// (see slImport). Instants are relative to now. Its replies are the fixed
// window's; the cancel token is the booked instant. More than L entries
// are what a lower limit leaves (see SetRate).
var slScript = script{name: "sl", fetch: 3, also: "{1, 2}", defs: "\nlocal W, L, hz -- the call's window, limit and booking horizon\n" +
	"local Ws, Ls, hzs -- the arguments W, L and hz were last read from\n" +
	"local T = " + strconv.Itoa(slPackedMax) + " -- the longest limit kept as a string\n" +
	slFormat + slImport + slList + `
local n0, status, wr, wdel, existed, imported
-- after returns the index of the oldest instant later than t; N if none.
local function after(t)
  local lo, hi = 0, N
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end
-- gone returns after(-W), the number of instants that have left the
-- window, searching from the oldest end with steps that double: those
-- are usually few, and this reads about 2 log2 of their number entries.
local function gone()
  local t = -W
  if N == 0 or at(0) > t then return 0 end
  local lo, step = 1, 1 -- at(i) <= t for every i < lo
  while lo + step - 1 < N and at(lo + step - 1) <= t do
    lo, step = lo + step, step * 2
  end
  local hi = math.min(lo + step - 1, N) -- at(hi) > t, or hi == N
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end
local function remaining(from)
  if from > 0 then return 0 end
  return math.max(L - (N - gone()), 0) -- none over a limit lowered since
end
local function reset()
  local t = floor
  if N > 0 then t = math.max(t, newest + W) end
  if t <= 0 then return 0 end
  return t
end
-- drop removes the k oldest instants and raises floor to when the newest
-- of them leaves the window.
local function drop(k)
  if k == 0 then return end
  floor = math.max(floor, at(k - 1) + W)
  N, hoff = N - k, hoff + k
end
-- store packs the log (see pack) to be written by commit, expiring once
-- the key is at rest, or to be deleted then (nothing left counts).
local function store()
  local r = reset()
  if r == 0 then
    wr, wdel = false, existed
    blank()
    return
  end
  pack()
  wr = r
end
-- unlog removes up to m copies of the instant t and says how many: the
-- log is in order, so the copies are side by side.
local function unlog(t, m)
  local lo = after(t - 1)
  m = math.min(m, after(t) - lo)
  if m > 0 then
    E = string.sub(E, 1, HDR) .. string.sub(E, pos(0), pos(lo) - 1) .. string.sub(E, pos(lo + m), pos(N) - 1)
    N, hoff = N - m, 0
    newest = NONE
    if N > 0 then newest = at(N - 1) end
  end
  return m
end
-- load reads the key's log, or imports one kept in the list format
-- when there is none; it reports false if what it read is corrupt.
local function load()
  wr, wdel, imported, status = false, false, false, 0
  local v, wrong = get(KEYS[3])
  existed = v ~= false or wrong
  if wrong then return false end
  if not v then
    blank()
    local ok, found = import(KEYS[1], KEYS[2], KEYS[3])
    imported = found
    return ok
  end
  local ok, stale = unpacked(v)
  wdel = stale -- a value that never expired (see unpacked) goes
  return ok
end
-- decide is the decision, on the log load read. It may read an entry
-- that is not what the script writes (see at): the caller then decides
-- again on a fresh log.
local function decide()
  -- A settlement of the booking at ARGV[5] (see limiter.settle): 'g'
  -- removes up to n of its instants from the log, at any time; 'd' logs n
  -- more instants at its time to act, in order, keeping the newest L
  -- (those dropped raise the floor, as for a booking). Either then
  -- replies as a peek.
  if op == 'g' then
    if N > 0 and unlog(rel(ARGV[5]), n) > 0 then store() end
    n = 0
  elseif op == 'd' then
` + luaSlDebt + `    if m > 0 then
      if i == N then newest = t end
      insert(i, t, m)
    end
    store()
    n = 0
  end

  if op == 'u' then
    if status == 2 then return 2 end
    local act = rel(ARGV[5])
    if act < 0 or N == 0 then return 0 end
    if unlog(act, n) == 0 then return 0 end
    store()
    return 1
  end

` + luaSlAdmit + `  drop(gone())
  if N + n - L > 0 then drop(N + n - L) end
  append(act, n)
  newest = act
  store()
  local allowed, rem = 0, 0
  if act == 0 then allowed, rem = 1, L - N end
  if op == 'r' then
    return reply(status + 1, allowed, rem, 0, act, act + W, abs(act))
  end
  return reply(status + 1, allowed, rem, 0, act, act + W)
end
`, body: luaWindowArgs(8) + `
if L > T then return list() end
n0 = n
local o0 = O
if not load() then
  blank()
  status, wdel = 2, existed
end
local r = decide()
if bad then -- an entry read was not one the script writes
  if OUT then O = o0 end -- forget the reply decide wrote
  blank()
  status, wr, wdel, imported, n = 2, false, true, false, n0
  r = decide()
end
if imported and not wr and not wdel then store() end
if wr then
  put_until(KEYS[3], E, wr)
elseif wdel then
  del(KEYS[3])
end
return r
`}
