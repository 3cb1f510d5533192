package redis

import "strconv"

// luaPrelude is the start of every script: the helpers for exact time
// arithmetic, and begin, which reads a call's common arguments and takes
// the time. The per-call values are variables of the chunk that begin
// sets, so that in a Redis Functions library (see library) the helpers are
// created once, when the library loads, not at each call.
//
// Lua in Redis computes with doubles, exact for integers below 2^53. A Unix
// time in nanoseconds (about 1.8e18) is not exact as a double, so no script
// ever holds one in a number. Instead:
//
//   - now is a pair (now_s, now_ns): whole seconds and nanoseconds, from
//     TIME (seconds and microseconds) or, in tests, from ARGV[2] (a decimal
//     string of Unix nanoseconds);
//   - every instant a script computes with is relative to now, in integer
//     nanoseconds (rel), and the algorithms' spans are bounded so that
//     |rel| stays below 2^53 (about 104 days; see maxSpan and horizon);
//   - instants are stored in Redis as exact decimal strings of Unix
//     nanoseconds, split into seconds and nanoseconds by string operations
//     when read (rel) and joined the same way when written (abs);
//   - exact fractions of a nanosecond (a rate of 3/s spaces events
//     333,333,333⅓ ns apart) are kept as an integer numerator over the
//     rate's count, as the core does, and products such as n intervals are
//     computed in Go and passed as arguments.
//
// Common arguments: KEYS[1] the key; ARGV[1] the operation ("s" step, "u"
// unstep, algorithm-specific otherwise); ARGV[2] now in Unix ns, or "" for
// the server's TIME (production); ARGV[3] milliseconds added to every TTL
// (0 in production; tests that drive time themselves use a pad so keys do
// not expire on the real clock before they are at rest on the test's);
// ARGV[4] n; ARGV[5] the maximum wait in ns (-1: none) for a step, or the
// booked instant for an unstep. Algorithm parameters follow from ARGV[6].
const luaPrelude = `
local E9 = 1000000000
local FAR = 9000000000000000
-- How far beyond what an algorithm ever books a stored instant may lie and
-- still be taken as written by this package: a day, for a master whose
-- clock is behind the one that wrote it. Further is corrupt.
local SKEW = 86400 * E9
-- The call's keys and arguments and what begin reads from them.
local KEYS, ARGV, key, op, pad, n
local now_s, now_ns, clocked
-- SET with PXAT (value and expiry in one write) needs Redis 6.2; Redis
-- tells its version to scripts from 7.0 on.
local PXAT = redis.REDIS_VERSION_NUM ~= nil and redis.REDIS_VERSION_NUM >= 0x060200

-- split parses a decimal string of integer nanoseconds into (s, ns),
-- 0 <= ns < 1e9, without ever holding the whole value in a double.
local function split(str)
  local neg = string.sub(str, 1, 1) == '-'
  if neg then str = string.sub(str, 2) end
  local s, ns = 0, tonumber(str)
  if #str > 9 then
    s = tonumber(string.sub(str, 1, -10))
    ns = tonumber(string.sub(str, -9))
  end
  if neg then
    if ns > 0 then s = -s - 1; ns = E9 - ns else s = -s end
  end
  return s, ns
end

-- get returns the string value of key k (false if none), and true if k
-- holds a value of another type.
--
-- Inside a batch (see batch) the string keys are cached: C maps a Redis
-- key to {v = its value or false} as the batch last read or wrote it,
-- with w set if written (x its expiry, as expiry computed it), and the
-- batch writes each written key back once, at its end. A value put_with
-- wrote is kept as its numbers (s, m, a, b, and the formats full and
-- tail), v nil, and formatted only when read as a string (see value) or
-- written back: a key that several decisions of a batch update is
-- formatted once, and a reader that knows the layout (get_instant) reads
-- the numbers themselves, if the entry has them (s is set) in its layout
-- (full), even once v is formatted.
local C
local value
local function get(k)
  if C then
    local e = C[k]
    if e then
      if e.v == nil then e.v = value(e) end
      return e.v, false
    end
  end
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then return false, true end
  if C then C[k] = {v = v} end
  return v, false
end

-- reply returns a decision's reply {status, allowed, a, b, retry, reset[,
-- token]} (see limiter.go). While a batch collects its calls' replies
-- (OUT, its flat reply, holding O values), it appends them to OUT itself,
-- as batch lays a table out, and returns REPLIED instead: a table per
-- decision, built and then converted to the reply, costs a batch more
-- than the values alone.
local OUT, O
local REPLIED = {}
local function reply(s, al, a, b, r, x, tok)
  if not OUT then return {s, al, a, b, r, x, tok} end
  local o = O
  if tok == nil then
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5], OUT[o + 6], OUT[o + 7] = 6, s, al, a, b, r, x
    O = o + 7
  else
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5], OUT[o + 6], OUT[o + 7], OUT[o + 8] = 7, s, al, a, b, r, x, tok
    O = o + 8
  end
  return REPLIED
end

-- begin reads a call's common arguments and takes the time.
-- t, if given, is the server's TIME a batch read for the call, as numbers:
-- {seconds, nanoseconds}.
local function begin(keys, argv, t)
  KEYS, ARGV = keys, argv
  key, op, pad, n = keys[1], argv[1], tonumber(argv[3]), tonumber(argv[4])
  clocked = argv[2] ~= ''
  if clocked then
    now_s, now_ns = split(argv[2])
  elseif t then
    now_s, now_ns = t[1], t[2]
  else
    t = redis.call('TIME')
    now_s = tonumber(t[1])
    now_ns = tonumber(t[2]) * 1000
  end
end

-- rel returns the stored instant str relative to now, in ns (relsn that of
-- s seconds and ns nanoseconds). Instants more
-- than 9e6 s (104 days) away are clamped to -FAR or FAR: the algorithms'
-- spans and booking horizon keep every live instant well inside.
local function relsn(s, ns)
  local ds = s - now_s
  if ds < -9000000 then return -FAR end
  if ds > 9000000 then return FAR end
  return ds * E9 + (ns - now_ns)
end
local function rel(str) return relsn(split(str)) end



-- abs returns the instant r ns after now as a decimal string of Unix ns.
-- absplit returns the instant r ns after now as whole seconds and ns.
local function absplit(r)
  local t = now_ns + r
  local c = math.floor(t / E9)
  local m = t - c * E9
  if m < 0 then c = c - 1; m = m + E9 elseif m >= E9 then c = c + 1; m = m - E9 end
  return now_s + c, m
end
-- absfmt returns the instant s seconds and m ns (0 <= m < 1e9) after
-- the epoch as a decimal string of Unix ns.
local function absfmt(s, m)
  if s >= 0 then
    if s == 0 then return string.format('%d', m) end
    return string.format('%d%09d', s, m)
  end
  if m > 0 then s = s + 1; m = E9 - m end
  s = -s
  if s == 0 then return string.format('-%d', m) end
  return string.format('-%d%09d', s, m)
end
local function abs(r) return absfmt(absplit(r)) end

-- expiry returns when a key at rest r > 0 ns from now expires. On the
-- server's clock (TIME) it is absolute, in Unix ms: the millisecond after
-- the one holding now + r. Redis drops a key once the server's millisecond
-- clock reaches its expiry (at once, if the script has run that long), so
-- never before rest and at most 2 ms after, however long the script took
-- since TIME. On a clock passed by a test, it is relative: the whole
-- milliseconds of r plus one, plus the test's pad.
local function expiry(r)
  if clocked then return math.floor(r / 1000000) + 1 + pad end
  return now_s * 1000 + math.floor((now_ns + r) / 1000000) + 1
end
-- ms returns the integer x as digits, for an argument of redis.call,
-- which would print a number with '%.17g' (slower).
local function ms(x) return string.format('%d', x) end
-- expire makes key k expire once it is at rest, r > 0 ns from now.
local function expire(k, r)
  if clocked then
    redis.call('PEXPIRE', k, ms(expiry(r)))
  else
    redis.call('PEXPIREAT', k, ms(expiry(r)))
  end
end
-- put_until sets key k to v, expiring once at rest, r > 0 ns from now: one
-- write where Redis has SET with PXAT.
local function put_until(k, v, r)
  if C then
    C[k] = {v = v, w = true, x = expiry(r), c = clocked}
    return
  end
  if clocked then
    redis.call('SET', k, v, 'PX', ms(expiry(r)))
  elseif PXAT then
    redis.call('SET', k, v, 'PXAT', ms(expiry(r)))
  else
    redis.call('SET', k, v)
    redis.call('PEXPIREAT', k, ms(expiry(r)))
  end
end

-- del deletes key k (a string key: through the cache inside a batch).
local function del(k)
  if C then C[k] = {v = false, w = true}; return end
  redis.call('DEL', k)
end

-- prefetch fills the cache C of a batch with the values of keys, read by
-- one MGET (which reads a key of another type as missing): the values get
-- would read first. The missing ones are cached as missing only if none
-- of them exists (one EXISTS for all); otherwise get reads each of them
-- itself, telling a key of another type. also, if given, lists the
-- positions among a call's kpc keys of keys the script reads only when
-- the fetched key (the j-th of keys, of the call whose keys start at
-- all[(j - 1) * kpc + 1]) is missing (the sliding log's list and floor,
-- see slImport): they join the EXISTS, and the missing keys are then
-- cached with nl set (none of those exists either).
-- (In slices of 1,000 keys: unpack has a bound.)
local function prefetch(keys, also, all, kpc)
  local miss, found = {}, 0
  for s = 1, #keys, 1000 do
    local e = math.min(s + 999, #keys)
    local vs = redis.call('MGET', unpack(keys, s, e))
    for j = s, e do
      local v = vs[j - s + 1]
      if v then C[keys[j]] = {v = v} else miss[#miss + 1] = j end
    end
  end
  local ex = {}
  for x = 1, #miss do
    local j = miss[x]
    ex[#ex + 1] = keys[j]
    if also then
      for y = 1, #also do ex[#ex + 1] = all[(j - 1) * kpc + also[y]] end
    end
  end
  for s = 1, #ex, 1000 do
    found = found + redis.call('EXISTS', unpack(ex, s, math.min(s + 999, #ex)))
  end
  if found == 0 then
    for x = 1, #miss do C[keys[miss[x]]] = {v = false, nl = also ~= nil} end
  end
end

-- batch decides a batch of calls of one algorithm's function one (see
-- script.batchSource) in order, each exactly as one call would, with one
-- TIME read for all of them and each string key read and written at most
-- once. ARGV: [1] the TTL pad, [2] how many Redis keys each call has (k;
-- or 'd': one, and keys repeat, so prefetch is given each key once), [3]
-- how many parameter blocks follow (b), then each block as its length and
-- its values (a call's ARGV[6] on), then each call: '*' and 5
-- values, its block's number, op, now ('' for TIME), n and ARGV[5]; or,
-- for a plain step (op 's', now '', n 1, ARGV[5] 0, as Allow sends), its
-- block's number alone. KEYS holds each call's k keys in turn. It
-- replies one flat array of each call's reply in turn: a table's length m
-- and its m values; or -1 and a reply that is not a table; or -2 and the
-- error reply of a call that raised one (its writes up to then stand, as
-- for one call). each reads TIME again for a decision whose first key a
-- decision of the batch has already used (the leaky bucket, whose answers
-- on a key depend on when each decision arrives to the microsecond:
-- events at one instant cannot all depart at once). fetch,
-- if not 0, is the position among each call's keys of a string key the
-- call reads by get: batch then reads all of them at its start (see
-- prefetch); also, if not nil, the positions of the keys the call reads
-- only when that key is missing (see prefetch).
local function batch(one, keys, argv, each, fetch, also)
  local dup = argv[2] == 'd'
  local kpc, nb = tonumber(argv[2]) or 1, tonumber(argv[3])
  local blocks, i = {}, 4
  for b = 1, nb do
    local len, a = tonumber(argv[i]), {false, false, tonumber(argv[1]), false, false}
    for j = 1, len do a[5 + j] = argv[i + j] end
    blocks[tostring(b)] = a -- by the number as a call names it: no parsing
    i = i + 1 + len
  end
  local t
  local out, ks, c, seen = {}, {}, 0, {}
  O = 0
  C = {}
  if fetch == 1 and kpc == 1 and dup then
    local u, once = {}, {}
    for j = 1, #keys do
      local k = keys[j]
      if not once[k] then once[k] = true; u[#u + 1] = k end
    end
    prefetch(u)
  elseif fetch == 1 and kpc == 1 then
    prefetch(keys)
  elseif fetch > 0 then
    local fk = {}
    for j = fetch, #keys, kpc do fk[#fk + 1] = keys[j] end
    prefetch(fk, also, keys, kpc)
  end
  local na = #argv
  while i <= na do
    local x, a = argv[i], nil
    if string.byte(x) == 42 then -- '*'
      a = blocks[argv[i + 1]]
      a[1], a[2], a[4], a[5] = argv[i + 2], argv[i + 3], argv[i + 4], argv[i + 5]
      i = i + 6
    else
      a = blocks[x]
      a[1], a[2], a[4], a[5] = 's', '', 1, 0
      i = i + 1
    end
    for j = 1, kpc do ks[j] = keys[c * kpc + j] end
    c = c + 1
    if a[2] == '' and (not t or (each and seen[ks[1]])) then
      local tm = redis.call('TIME')
      t = {tonumber(tm[1]), tonumber(tm[2]) * 1000}
    end
    if each then seen[ks[1]] = true end
    OUT = out
    local ok, r = pcall(one, ks, a, t)
    local o = O
    if r == REPLIED then
    elseif not ok or (type(r) == 'table' and r.err) then
      if type(r) ~= 'table' or not r.err then r = redis.error_reply(tostring(r)) end
      out[o + 1], out[o + 2] = -2, r
      O = o + 2
    elseif type(r) ~= 'table' then
      if r == nil then r = false end
      out[o + 1], out[o + 2] = -1, r
      O = o + 2
    else
      local m = #r
      out[o + 1] = m
      for j = 1, m do out[o + 1 + j] = r[j] end
      O = o + 1 + m
    end
  end
  local w = C
  C, OUT = nil, nil
  for k, e in pairs(w) do
    if e.w then
      if e.v == nil then e.v = value(e) end
      if not e.v then
        redis.call('DEL', k)
      else
        local x = ms(e.x)
        if e.c then
          redis.call('SET', k, e.v, 'PX', x)
        elseif PXAT then
          redis.call('SET', k, e.v, 'PXAT', x)
        else
          redis.call('SET', k, e.v)
          redis.call('PEXPIREAT', k, x)
        end
      end
    end
  end
  return out
end

-- F10 matches a stored value that starts with an instant of 10-digit
-- seconds (2001 to 2286) and its nanoseconds: the common case, split by
-- the pattern itself.
local F10 = '^(%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d) '
-- put_with stores in key k the instant r ns after now, a space and the
-- values a (and b) as the format tail writes them, expiring once at
-- rest, e ns from now; full is '%d%09d ' followed by tail, which writes
-- the common instant (10-digit seconds) in the same string.format. In a
-- batch it keeps the numbers, formatted once at the batch's end (see get).
local function layout(s, m, full, tail, a, b)
  if s >= 1000000000 and s < 10000000000 then
    return string.format(full, s, m, a, b)
  end
  return absfmt(s, m) .. ' ' .. string.format(tail, a, b)
end
value = function(e) return layout(e.s, e.m, e.full, e.tail, e.a, e.b) end
local function put_with(k, r, full, tail, a, b, e)
  local s, m = absplit(r)
  if C then
    local o = C[k]
    if o and o.s then
      -- An entry of put_with's, from an earlier decision of this batch:
      -- its fields set anew, v nil until formatted.
      o.v, o.s, o.m, o.full, o.tail, o.a, o.b, o.w, o.x, o.c = nil, s, m, full, tail, a, b, true, expiry(e), clocked
    else
      -- A new table, built whole: cheaper than adding fields to the old.
      C[k] = {s = s, m = m, full = full, tail = tail, a = a, b = b, w = true, x = expiry(e), c = clocked}
    end
    return
  end
  put_until(k, layout(s, m, full, tail, a, b), e)
end
`

// evalHead starts a script run by EVAL: it keeps EVAL's KEYS and ARGV
// before luaPrelude's per-call variables of those names hide them.
const evalHead = `
if redis.replicate_commands then redis.replicate_commands() end
local KEYS_, ARGV_ = KEYS, ARGV
`

// script is one algorithm's Lua code: defs, run once where the helpers are
// defined (at library load for Redis Functions, at each call for EVAL),
// defines the algorithm's helpers and declares its per-call variables;
// body runs at each call, after begin, and returns the reply.
type script struct {
	name       string // the function's name in the library, after its prefix
	defs, body string
	timeEach   bool // a batch reads TIME again for each decision on a key it has decided (see batch)
	fetch      int  // if not 0, the position (from 1) of a string key a call reads by get: a batch prefetches them
	// also, if not empty, is a Lua list of the positions of keys a call
	// reads only when its fetch key is missing: a batch checks them with
	// the missing fetch keys (see prefetch).
	also string
}

// batchCall is the Lua call of batch for the script's function one.
func (s script) batchCall(keys, argv string) string {
	also := s.also
	if also == "" {
		also = "nil"
	}
	return "batch(one, " + keys + ", " + argv + ", " + strconv.FormatBool(s.timeEach) + ", " + strconv.Itoa(s.fetch) + ", " + also + ")"
}

// evalSource returns the script as EVAL runs it.
func (s script) evalSource() string {
	return evalHead + luaPrelude + s.defs + "\nbegin(KEYS_, ARGV_)\n" + luaReset + s.body
}

// oneSource is the script as a function of one call's keys, arguments and
// (optionally) the server's TIME: the single call and each call of a batch
// run this same function.
func (s script) oneSource() string {
	return "\nlocal function one(keys, argv, t)\nbegin(keys, argv, t)\n" + luaReset + s.body + "\nend\n"
}

// batchSource returns the script's batch form (see batch in luaPrelude)
// as EVAL runs it.
func (s script) batchSource() string {
	return evalHead + luaPrelude + s.defs + s.oneSource() + "return " + s.batchCall("KEYS_", "ARGV_") + "\n"
}

// luaReset starts every script's body: a reset ('x') deletes all the
// Redis keys of the call (KEYS, every suffix the algorithm uses) and
// replies how many existed, before the algorithm reads any state.
const luaReset = "if op == 'x' then return redis.call('DEL', unpack(KEYS)) end\n"

// luaWide defines exact products of integers below 2^52 as four limbs of
// 26 bits, low first, and their comparison.
const luaWide = `
local B = 67108864 -- 2^26
local function hilo(x) local h = math.floor(x / B); return h, x - h * B end
local function mul(a, b)
  local a1, a0 = hilo(a)
  local b1, b0 = hilo(b)
  local p = a0 * b0
  local c = math.floor(p / B)
  local l0 = p - c * B
  p = a1 * b0 + a0 * b1 + c
  c = math.floor(p / B)
  local l1 = p - c * B
  p = a1 * b1 + c
  c = math.floor(p / B)
  return {l0, l1, p - c * B, c}
end
local function wcmp(x, y)
  for i = 4, 1, -1 do
    if x[i] ~= y[i] then if x[i] < y[i] then return -1 end return 1 end
  end
  return 0
end
`
