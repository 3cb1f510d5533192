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

// slImport reads a log the previous version of the sliding log kept: a
// list of decimal Unix nanoseconds, oldest first, under the suffix ":sl",
// and its floor, a string of decimal Unix nanoseconds, under ":slf".
// import(lk, fk, pk) is called when the log pk is missing: it reports
// (ok, found). If lk and fk are missing (checked once per key in a batch)
// it leaves the log empty; if they hold what the previous version could
// have written (its own checks: a list of at most 2^20 decimal integers,
// the newest no further ahead than a booking goes, a decimal floor no
// further ahead than a booking plus the longest window) the log is theirs;
// otherwise they are corrupt: deleted, as the previous version did, and
// ok is false. They are left as they are otherwise, to expire as that
// version set them to: an instance of it still running keeps its log
// there, and this one reads it again whenever its own log is missing.
const slImport = `
local function import(lk, fk, pk)
  local e = C and C[pk]
  if e and e.nl then return true, false end
  if redis.call('EXISTS', lk, fk) == 0 then
    if e then e.nl = true end
    return true, false
  end
  local l = redis.pcall('LRANGE', lk, 0, -1)
  local ok = l.err == nil and #l <= 1048576
  local parts = {}
  if ok then
    for i = 1, #l do
      if not string.match(l[i], '^%-?%d+$') then ok = false; break end
      parts[i] = rel(l[i])
    end
  end
  if ok and #l > 0 and parts[#l] > hz + SKEW then ok = false end
  local f = NONE
  if ok then
    local fv = redis.pcall('GET', fk)
    if type(fv) == 'table' then
      ok = false
    elseif fv then
      if string.match(fv, '^%-?%d+$') then f = rel(fv) else ok = false end
      if f > hz + MAXW + SKEW then ok = false end
    end
  end
  if not ok then
    redis.call('DEL', lk, fk)
    return false, false
  end
  N, floor = #l, f
  if N > 0 then newest = parts[N] end
  for i = 1, N do parts[i] = struct.pack('<d', off(parts[i])) end
  E = EMPTY .. table.concat(parts)
  return true, true
end
`
