-- The sliding log's script before its log became one string: a list of
-- decimal Unix ns under ":sl" and the floor under ":slf". The tests run
-- it to write logs as that version did (see slidinglog_import_test.go).
-- Its helpers, then after the line "-- body" what runs at each call.

local W, L, hz, fkey, N, floor, floor0, newest, head, hoff, hv
local NONE = -2 * FAR -- no floor yet
local MAXLOG, MAXW = 1048576, 35 * 86400 * E9 -- the most L and W may be
local HEAD = 32 -- entries read at once from the start of the log
-- hat returns the instant of the j-th entry read (0 the first), converted
-- when first asked for (hv holds those converted).
local function hat(j)
  local v = hv[j + 1]
  if not v then
    v = rel(head[j + 1])
    hv[j + 1] = v
  end
  return v
end
-- at returns the log's i-th instant (0 the oldest), from the entries read
-- at the start of the call where it can.
local function at(i)
  local j = i + hoff
  if j < #head then return hat(j) end
  return rel(redis.call('LINDEX', key, i))
end
-- after returns the index of the oldest instant later than t; N if none.
local function after(t)
  local lo, hi = 0, N
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end
local function remaining(from)
  if from > 0 then return 0 end
  return math.max(L - (N - after(-W)), 0) -- none over a limit lowered since
end
local function reset()
  local t = floor
  if N > 0 then t = math.max(t, newest + W) end
  if t <= 0 then return 0 end
  return t
end
-- store sets the log to expire when it is at rest, or deletes both keys
-- then; the floor is written only when it moved, to expire once passed
-- (a floor in the past counts for nothing).
local function store()
  local r = reset()
  if r == 0 then
    redis.call('DEL', key); del(fkey)
    N, head, hoff, newest = 0, {}, 0, NONE -- as empty: nothing left counts
    return
  end
  if N > 0 then expire(key, r) end
  if floor > floor0 and floor > 0 then put_until(fkey, abs(floor), floor) end
end
-- drop removes the k oldest instants and raises floor to when the newest
-- of them leaves the window.
local function drop(k)
  if k == 0 then return end
  floor = math.max(floor, at(k - 1) + W)
  redis.call('LTRIM', key, k, -1)
  N = N - k
  hoff = hoff + k
end
-- load reads the start of the log (all of it, if short), its length and
-- newest instant, and the floor; it reports false if they are not what
-- the script writes: of another type, more than L instants, text, or
-- further ahead than a booking goes.
local function load()
  head, hoff, hv = redis.pcall('LRANGE', key, 0, HEAD - 1), 0, {}
  if head.err then return false end
  for i = 1, #head do
    if not string.match(head[i], '^%-?%d+$') then return false end
  end
  N = #head
  if N == HEAD then N = redis.call('LLEN', key) end
  if N > MAXLOG then return false end
  newest = NONE
  if N > 0 then
    if N <= HEAD then
      newest = hat(N - 1)
    else
      local e = redis.call('LINDEX', key, -1)
      if not string.match(e, '^%-?%d+$') then return false end
      newest = rel(e)
    end
    if newest > hz + SKEW then return false end
  end
  local fv, wrong = get(fkey)
  if wrong then return false end
  floor = NONE
  if fv then
    if not string.match(fv, '^%-?%d+$') then return false end
    floor = rel(fv)
    if floor > hz + MAXW + SKEW then return false end
  end
  floor0 = floor
  return true
end

-- body

W, L, hz = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
fkey = KEYS[2]
local corrupt = false
if not load() then
  redis.call('DEL', key); del(fkey)
  corrupt, N, head, hoff, newest, floor, floor0 = true, 0, {}, 0, NONE, NONE, NONE
end
local status = 0
if corrupt then status = 2 end

-- A settlement of the booking at ARGV[5] (see limiter.settle): 'g'
-- removes up to n of its instants from the log, at any time; 'd' logs n
-- more instants at its time to act, in order, keeping the newest L (those
-- dropped raise the floor, as for a booking). Either then replies as a
-- peek.
-- lrem removes up to n instants equal to ARGV[5] and says how many: it
-- scans from the log's older end when the instant is among the first read
-- (bookings settled in the order they were made, as requests finish), else
-- from the newer end, so that neither order costs the whole log a call.
-- The copies are equal: which are removed changes nothing.
local function lrem(n)
  if #head > hoff and rel(ARGV[5]) <= hat(#head - 1) then
    return redis.call('LREM', key, n, ARGV[5])
  end
  return redis.call('LREM', key, -n, ARGV[5])
end

if op == 'g' then
  if N > 0 then
    local m = lrem(n)
    if m > 0 then
      N, head, hoff = N - m, {}, 0
      newest = NONE
      if N > 0 then newest = at(N - 1) end
      store()
    end
  end
  n = 0
elseif op == 'd' then
  local t = rel(ARGV[5])
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
  if m > 0 then
    local later = {}
    if i < N then
      later = redis.call('LRANGE', key, i, -1)
      if i == 0 then redis.call('DEL', key) else redis.call('LTRIM', key, 0, i - 1) end
    end
    local vals = {}
    for j = 1, math.min(m, 1000) do vals[j] = ARGV[5] end
    local left = m
    while left > 0 do
      local k = math.min(left, 1000)
      redis.call('RPUSH', key, unpack(vals, 1, k))
      left = left - k
    end
    for j = 1, #later, 1000 do
      redis.call('RPUSH', key, unpack(later, j, math.min(j + 999, #later)))
    end
    if i == N then newest = t end
    N, head, hoff = N + m, {}, 0
  end
  store()
  n = 0
end

if op == 'u' then
  if corrupt then return 2 end
  local act = rel(ARGV[5])
  if act < 0 or N == 0 then return 0 end
  local m = lrem(n)
  if m == 0 then return 0 end
  N, head, hoff = N - m, {}, 0
  newest = NONE
  if N > 0 then newest = at(N - 1) end
  store()
  return 1
end

local from = math.max(0, floor, newest)
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
drop(after(-W))
if N + n - L > 0 then drop(N + n - L) end
local a = abs(act)
local vals = {}
for i = 1, math.min(n, 1000) do vals[i] = a end
local left = n
while left > 0 do
  local k = math.min(left, 1000)
  redis.call('RPUSH', key, unpack(vals, 1, k))
  left = left - k
end
N = N + n
newest = act
store()
local allowed, rem = 0, 0
if act == 0 then allowed, rem = 1, L - N end
if op == 'r' then
  return reply(status + 1, allowed, rem, 0, act, act + W, a)
end
return reply(status + 1, allowed, rem, 0, act, act + W)
