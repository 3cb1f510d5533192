package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// WithPenalty adds a penalty box to the limiter, kept on Redis so that
// every instance sharing the keys shares the blocks: the rule is
// ratelimit.PenaltyBox's (a refusal at t blocks the key until t+block if,
// counting it, the key had at least after refusals at instants in
// (t−within, t] since its last block began), decided on the server's
// clock in integer nanoseconds by the same script call that decides, so a
// decision still takes one round trip. While a key is blocked, AllowN
// returns Allowed false (a peek, n == 0, stays Allowed), Remaining 0,
// RetryAfter the time left of the block and ResetAfter at least that;
// Reserve is not OK and books nothing; WaitN fails at once with a
// *ratelimit.LimitError whose Deadline is false. The block state is one
// more Redis key per user key, of the same hash tag (the algorithm's
// suffix plus ":blk"): the last refusal instants, or the block's end.
// Reset clears it. after must be in [1, ratelimit.MaxPenaltyAfter];
// within and block must be positive and at most 35 days; the
// constructor returns an error matching ratelimit.ErrInvalidOption
// otherwise, or with WithLease. While Redis fails, the failure policy
// answers and no block is enforced.
func WithPenalty(after int, within, block time.Duration) Option {
	return func(c *config) { c.penAfter, c.penWithin, c.penBlock, c.penSet = after, within, block, true }
}

// penaltyCheck validates the penalty options.
func penaltyCheck(c *config) error {
	if !c.penSet {
		return nil
	}
	switch {
	case c.penAfter < 1 || c.penAfter > ratelimit.MaxPenaltyAfter:
		return fmt.Errorf("%w: penalty: refusals before a block must be in [1, %d], got %d", ratelimit.ErrInvalidOption, ratelimit.MaxPenaltyAfter, c.penAfter)
	case c.penWithin <= 0 || c.penWithin > maxSpan:
		return fmt.Errorf("%w: penalty: window must be positive and at most %v, got %v", ratelimit.ErrInvalidOption, maxSpan, c.penWithin)
	case c.penBlock <= 0 || c.penBlock > maxSpan:
		return fmt.Errorf("%w: penalty: block must be positive and at most %v, got %v", ratelimit.ErrInvalidOption, maxSpan, c.penBlock)
	case c.lease != 0:
		return fmt.Errorf("%w: penalty: not available with leases", ratelimit.ErrInvalidOption)
	}
	return nil
}

// penaltyScript returns s with the penalty box around its body: its own
// function name, the algorithm's body as the local function algo, and a
// body that checks and records the block state (see luaPenalty).
func penaltyScript(s script) script {
	return script{name: s.name + "_p", timeEach: s.timeEach, fetch: s.fetch, also: s.also,
		defs: s.defs + "\nlocal function algo()\n" + s.body + "\nend\n" + luaAlgoTable,
		body: luaPenalty}
}

// penaltyScripts returns the penalty forms of the library's scripts.
func penaltyScripts(ss []script) []script {
	out := make([]script, len(ss))
	for i, s := range ss {
		out[i] = penaltyScript(s)
	}
	return out
}

// decide is the Decision of a step's reply r for n events, with a block's
// answer (see WithPenalty) when r says the key is blocked.
func (l *limiter) decide(p *setting, r reply, n int64) ratelimit.Decision {
	d := p.alg.decision(r, n)
	if r.blocked {
		d.Allowed = n == 0
		d.Remaining = 0
		d.RetryAfter = time.Duration(r.retry)
		if d.ResetAfter < d.RetryAfter {
			d.ResetAfter = d.RetryAfter
		}
	}
	return d
}

// waitNone is WaitN for n == 0: at once nil, but with a penalty box a
// key's block fails it, as ratelimit.PenaltyBox's does (one peek at Redis;
// while Redis fails, no block is enforced).
func (l *limiter) waitNone(ctx context.Context, p *setting, key string) error {
	if !l.cfg.penSet {
		return nil
	}
	r, _, err := l.step(ctx, p, key, 0, 0, "s")
	if err != nil || !r.blocked {
		return nil
	}
	return &ratelimit.LimitError{RetryAfter: time.Duration(r.retry)}
}

// penaltyEvents reports to the observer a block that began or was found
// over in reply r for key.
func (l *caller) penaltyEvents(key string, r *reply) {
	if l.cfg.observer == nil {
		return
	}
	if r.ended {
		l.cfg.observer.Observe(ratelimit.Event{Kind: ratelimit.EventUnblocked, Limiter: l.cfg.name, Key: key})
	}
	if r.began {
		l.cfg.observer.Observe(ratelimit.Event{Kind: ratelimit.EventBlocked, Limiter: l.cfg.name, Key: key,
			N: l.cfg.penAfter, RetryAfter: l.cfg.penBlock})
	}
}

// luaAlgoTable defines algo_table: algo's reply as a table even in a batch
// (see reply in luaPrelude), for the penalty box to amend.
const luaAlgoTable = `
local function algo_table()
  local out = OUT
  OUT = nil
  local r = algo()
  OUT = out
  return r
end
`

// luaPenalty is a penalty script's body. ARGV[6..8] are after, within and
// block (ns); the algorithm's arguments follow and are shifted back to
// ARGV[6] before algo runs. The last KEYS entry is the block key: "b "
// and the block's end, or the last refusal instants separated by spaces.
// Status flags added to the reply: 8 refused by a block (retry the time
// left), 16 this refusal began a block, 32 a block found over.
const luaPenalty = `
local pa, pw, pd = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
do
  local a = {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]}
  for i = 9, #ARGV do a[i - 3] = ARGV[i] end
  ARGV = a
end
if op ~= 's' and op ~= 'r' then return algo() end
local bk = KEYS[#KEYS]
local v = get(bk)
local flags, hist = 0, nil
if v then
  local u = string.match(v, '^b (%-?%d+)$')
  if u then
    local left = rel(u)
    if left > 0 then
      local asked = n
      n, op = 0, 's'
      ARGV[1], ARGV[4], ARGV[5] = 's', '0', '0'
      local r = algo_table()
      -- A state to re-express first (see tbScript): the caller does, and
      -- asks again.
      if type(r) ~= 'table' or r[1] % 8 >= 4 then return r end
      local c = 0
      if r[1] % 4 >= 2 then c = 2 end
      r[1] = 8 + c
      if asked == 0 then r[2] = 1 else r[2] = 0 end
      r[5] = left
      if r[6] < left then r[6] = left end
      r[7] = nil
      return r
    end
    flags = 32
  else
    hist = v
  end
end
local r = algo_table()
if type(r) ~= 'table' then return r end
if n > 0 and r[1] % 2 == 0 and r[1] % 8 < 4 then
  local kept = {}
  if hist then
    for s in string.gmatch(hist, '%S+') do
      if string.match(s, '^%-?%d+$') and rel(s) > -pw then kept[#kept + 1] = s end
    end
  end
  kept[#kept + 1] = abs(0)
  if #kept >= pa then
    put_until(bk, 'b ' .. abs(pd), pd + pw)
    flags = flags + 16
  else
    put_until(bk, table.concat(kept, ' '), pw)
  end
elseif flags == 32 then
  del(bk)
end
r[1] = r[1] + flags
return r
`
