package redis

// slFormat defines how the sliding log keeps a key's log: one Redis
// string, read whole by one GET (or a batch's MGET) and written whole by
// one SET with its expiry, as the other algorithms keep their state.
//
// The value is a header of 17 bytes, packed little-endian by Redis Lua's
// struct library ('<Bdd'): a format tag (TAG), a base instant as whole
// Unix seconds (a double holding an integer), and the floor (the instant
// before which nothing conforms: the newest instant dropped from the log
// plus W) as nanoseconds after the base, or NOFLOOR for none; then one
// entry of 8 bytes per logged event, oldest first: its instant's
// nanoseconds after the base, as a little-endian double. Every offset is
// an integer below 2^53 in magnitude, so a double holds it exactly: the
// base is moved to the current second (rebase, every entry rewritten)
// whenever it is more than 2^51 ns (26 days) behind now or an offset to
// write would not fit, so that a value that lives (at most W plus the
// booking horizon after its last write) never has its base more than
// about 92 days behind now. The base relative to now is kept as whole
// seconds in ns (bsec, a multiple of 1e9, exact up to 2^54) and now's
// nanoseconds apart, so that an instant near now is exact even from a
// base up to 208 days away.
//
// A decision reads only the entries its searches touch (at), by random
// access into the string; dropping the k oldest is a substring, logging
// events a concatenation, and the whole value is written once, by pack,
// with the header, the entries kept and those added in one concatenation.
//
// What unpacked and at detect as not written by the script (corrupt): a
// value of another type; a length that is not the header plus 8 bytes an
// entry; a wrong tag; more than 2^20 entries; a base more than 9e6 s (104
// days) ahead of now or not whole; a floor that is not an integer below
// 2^53 or lies further ahead than a booking goes plus the longest window
// (plus SKEW); a newest entry further ahead than a booking goes (plus
// SKEW); and any entry the decision reads that is not an integer below
// 2^53. Entries out of order are not detected (checking them would read
// every entry). A base more than 208 days behind now leaves nothing that
// counts (every offset is below 2^53 ns, 104 days): the log is read as
// empty and the value deleted or replaced.
const slFormat = `
local TAG, HDR = 1, 17
local EMPTY = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' -- HDR zero bytes
local NOFLOOR = -4611686018427387904 -- -2^62: no floor
local P53, REBASE = 9007199254740992, 2251799813685248 -- 2^53, 2^51
local MAXW = 35 * 86400 * E9 -- the longest window
local NONE = -2 * FAR -- no floor, no entry
-- The log of the call: E the value as a string (its header is rewritten
-- by pack), the base bs (Unix seconds) and bsec (the base's seconds
-- relative to now's, in ns: a multiple of 1e9, exact up to 2^54), N entries counted from the entry after the hoff first
-- (dropped, still in E), the last pn of them pending (instant pt, not in
-- E yet), floor and newest relative to now (NONE: none), and bad, set
-- when an entry read is not what the script writes.
local E, bs, bsec, N, hoff, pn, pt, floor, newest, bad
local function fits(o) return o < P53 and o > -P53 end
-- rl returns the instant o ns after the base relative to now, exact
-- whenever it is below 2^53 in magnitude; off is its inverse.
local function rl(o) return (bsec + o) - now_ns end
local function off(t) return (t + now_ns) - bsec end
-- old reports whether the base is more than 2^51 ns (26 days) behind now.
local function old() return bsec - now_ns < -REBASE end
-- pos returns the position in E of the i-th entry (0 the oldest).
local function pos(i) return HDR + 8 * (hoff + i) + 1 end
-- at returns the log's i-th instant (0 the oldest), relative to now.
local function at(i)
  local o = struct.unpack('<d', E, HDR + 8 * (hoff + i) + 1)
  if o % 1 ~= 0 or o >= P53 or o <= -P53 then bad = true; return 0 end
  return (bsec + o) - now_ns -- rl(o), inlined
end
-- blank makes the log empty, based at now's second.
local function blank()
  E, bs, bsec = EMPTY, now_s, 0
  N, hoff, pn, floor, newest, bad = 0, 0, 0, NONE, NONE, false
end
-- unpacked takes v as the log, reporting false if it is corrupt, and
-- true and true if nothing in it can count any more (see below).
local function unpacked(v)
  local len = #v
  if len < HDR or (len - HDR) % 8 ~= 0 or string.byte(v, 1) ~= TAG or (len - HDR) / 8 > 1048576 then
    return false
  end
  local _, b, fo = struct.unpack('<Bdd', v)
  if b % 1 ~= 0 or b - now_s > 9000000 then return false end
  -- Every entry and the floor lie within 2^53 ns (104 days) of the base:
  -- a base 208 days behind now leaves nothing that counts.
  if b - now_s < -18000000 then blank(); return true, true end
  E, bs, bsec = v, b, (b - now_s) * E9
  N, hoff, pn, bad = (len - HDR) / 8, 0, 0, false
  floor = NONE
  if fo ~= NOFLOOR then
    if fo % 1 ~= 0 or not fits(fo) then return false end
    floor = rl(fo)
    if floor > hz + MAXW + SKEW then return false end
  end
  newest = NONE
  if N > 0 then
    newest = at(N - 1)
    if bad or newest > hz + SKEW then return false end
  end
  return true
end
-- rebase rewrites the first nb entries relative to now's second.
local function rebase(nb)
  local parts = {}
  for i = 0, nb - 1 do parts[i + 1] = struct.pack('<d', math.max(at(i), -FAR) + now_ns) end
  E = string.sub(E, 1, HDR) .. table.concat(parts)
  bs, bsec, hoff = now_s, 0, 0
end
-- append logs m instants t after the newest (pending until pack).
local function append(t, m)
  N, pn, pt = N + m, m, t
end
-- insert logs m instants t before the i-th entry.
local function insert(i, t, m)
  if old() or not fits(off(t)) then rebase(N) end
  E = string.sub(E, 1, HDR) .. string.sub(E, pos(0), pos(i) - 1) ..
    string.rep(struct.pack('<d', off(t)), m) .. string.sub(E, pos(i), pos(N) - 1)
  N, hoff = N + m, 0
end
-- pack makes E the value to write: header, entries kept, entries added.
local function pack()
  local nb = N - pn
  if old() or (floor > 0 and not fits(off(floor))) or (pn > 0 and not fits(off(pt))) then
    rebase(nb)
  end
  local fo = NOFLOOR
  if floor > 0 then fo = off(floor) end -- a floor passed counts for nothing
  local h = struct.pack('<Bdd', TAG, bs, fo)
  if pn > 0 then
    E = h .. string.sub(E, pos(0), pos(nb) - 1) .. string.rep(struct.pack('<d', off(pt)), pn)
  elseif hoff > 0 then
    E = h .. string.sub(E, pos(0), pos(nb) - 1)
  elseif string.sub(E, 1, HDR) ~= h then
    E = h .. string.sub(E, HDR + 1)
  end
  hoff, pn = 0, 0
end
`

// slImport reads a log kept in the list format (see slList): a list of
// decimal Unix nanoseconds, oldest first, under the suffix ":sl", and its
// floor, a string of decimal Unix nanoseconds, under ":slf".
// import(lk, fk, pk) is called when the log pk is missing: it reports
// (ok, found). If lk and fk are missing (checked once per key in a batch)
// it leaves the log empty; if they hold what the list format's code could
// have written (its own checks: a list of at most 2^20 decimal integers,
// the newest no further ahead than a booking goes, a decimal floor no
// further ahead than a booking plus the longest window) the log is
// theirs; otherwise they are corrupt, and ok is false. Either way lk and
// fk are deleted: the log lives on in one format only.
const slImport = `
local function import(lk, fk, pk)
  local e = C and C[pk]
  if e and e.nl then return true, false end
  -- A floor this batch has read or written is the cache's; otherwise one
  -- EXISTS checks both keys.
  local none
  if C and C[fk] then
    none = not get(fk) and redis.call('EXISTS', lk) == 0
  else
    none = redis.call('EXISTS', lk, fk) == 0
  end
  if none then
    if e then e.nl = true end
    return true, false
  end
  local fv, fwrong = get(fk)
  local l = redis.pcall('LRANGE', lk, 0, -1)
  local ok = l.err == nil and #l <= 1048576 and not fwrong
  local parts = {}
  if ok then
    for i = 1, #l do
      if not string.match(l[i], '^%-?%d+$') then ok = false; break end
      parts[i] = rel(l[i])
    end
  end
  if ok and #l > 0 and parts[#l] > hz + SKEW then ok = false end
  local f = NONE
  if ok and fv then
    if string.match(fv, '^%-?%d+$') then f = rel(fv) else ok = false end
    if ok and f > hz + MAXW + SKEW then ok = false end
  end
  redis.call('DEL', lk)
  del(fk)
  if not ok then return false, false end
  N, floor = #l, f
  if N > 0 then newest = parts[N] end
  for i = 1, N do parts[i] = struct.pack('<d', off(parts[i])) end
  E = EMPTY .. table.concat(parts)
  return true, true
end

-- tolist(lk, fk, pk) is import's converse, called by a decision in the
-- list format before it reads the list: if the key has no list lk and no
-- floor fk but a log pk in the string format, it writes that log's
-- instants and floor as the list format keeps them, expiring as that
-- format sets them to, and deletes pk. It reports false if pk is corrupt
-- (by unpacked's and at's checks, every entry read); pk is deleted then
-- too.
local function tolist(lk, fk, pk)
  local v, wrong = get(pk)
  if not v and not wrong then return true end
  if redis.call('EXISTS', lk) == 1 then return true end
  local fv, fwrong = get(fk)
  if fv or fwrong then return true end
  del(pk)
  if wrong then return false end
  local ok, stale = unpacked(v)
  if not ok then return false end
  if stale then return true end
  local parts = {}
  for i = 0, N - 1 do parts[i + 1] = at(i) end
  if bad then return false end
  local r = floor
  if N > 0 then r = math.max(r, newest + W) end
  if r <= 0 then return true end -- nothing in it counts any more
  for i = 1, N do parts[i] = abs(parts[i]) end
  for s = 1, N, 1000 do
    redis.call('RPUSH', lk, unpack(parts, s, math.min(s + 999, N)))
  end
  if N > 0 then expire(lk, r) end
  if floor > 0 then put_until(fk, abs(floor), floor) end
  return true
end
`

// slList is the sliding log's decision in the list format, for limits
// above slPackedMax: the log a list of decimal Unix ns under ":sl"
// (KEYS[1]), its floor under ":slf" (KEYS[2]), exactly as versions before
// the string format kept them and decided on them
// (testdata/slidinglog_list.lua, which the tests run as those versions
// did), but for its first step: a key with neither of those and a log in
// the string format (KEYS[3]) has that log moved into the list first (see
// tolist). A decision reads O(log L) entries of the list, the first 32 in
// one LRANGE, and writes only what changes.
const slList = `
local function list()
  local fkey, N, floor, floor0, newest, head, hoff, hv
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
  fkey = KEYS[2]
  local corrupt = not tolist(key, fkey, KEYS[3])
  if C and C[KEYS[3]] then C[KEYS[3]].nl = nil end -- the list may be written
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
` + luaSlDebt + `    if m > 0 then
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

` + luaSlAdmit + `  drop(after(-W))
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
end
`
