package redis

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Direct tests of the scripts' exact arithmetic, run in Redis's Lua against
// int64 and math/big in Go, at the extremes the algorithms allow.

// evalHelpers runs the prelude (now given), extra definitions and body,
// with args from ARGV[6] on, and returns the reply.
func evalHelpers(t *testing.T, c *goredis.Client, now int64, defs, body string, args ...any) []any {
	t.Helper()
	all := append([]any{"t", strconv.FormatInt(now, 10), 0, 0, 0}, args...)
	v, err := c.Eval(bg, evalHead+luaPrelude+"\nbegin(KEYS_, ARGV_)\n"+defs+body, []string{"rltest:lua"}, all...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLuaTimeArithmetic(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	rng := rand.New(rand.NewPCG(7, 7))
	nows := []int64{0, 1, 999_999_999, 1_000_000_000, 1_000_000_001, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
		start.UnixNano(), 1<<62 - 1, -1, -999_999_999, -1_000_000_000, -1_000_000_001, -start.UnixNano()}
	for range 8 {
		nows = append(nows, rng.Int64N(1<<62), -rng.Int64N(1<<62))
	}
	const lim = int64(1) << 52
	for _, now := range nows {
		rels := []int64{0, 1, -1, 999_999_999, -999_999_999, 1e9, -1e9, lim, -lim, lim - 1, -lim + 1}
		for range 20 {
			rels = append(rels, rng.Int64N(2*lim)-lim, rng.Int64N(2e9)-1e9)
		}
		var args []any
		for _, r := range rels {
			args = append(args, r)
		}
		// For each r: abs(r), rel(abs(r)), and rel of the exact string.
		v := evalHelpers(t, c, now, "", `
local out = {}
for i = 6, #ARGV do
  local r = tonumber(ARGV[i])
  local s = abs(r)
  out[#out + 1] = s
  out[#out + 1] = rel(s)
end
return out`, args...)
		for i, r := range rels {
			want := now + r
			if got := v[2*i].(string); got != strconv.FormatInt(want, 10) {
				t.Errorf("now %d: abs(%d) = %s, want %d", now, r, got, want)
			}
			if got := v[2*i+1].(int64); got != r {
				t.Errorf("now %d: rel(abs(%d)) = %d", now, r, got)
			}
		}
	}
	// expire(k, r) on the server's clock: PEXPIREAT the millisecond after
	// the one holding now + r, read inside the script; the key may be gone
	// already, if and only if the server's clock has reached that.
	rs := []int64{1, 999_999, 1_000_000, 1_000_001, 2_999_999_999, 3_000_000_000, lim - 1, 3_024_000_000_000_000}
	for _, r := range rs {
		v, err := c.Eval(bg, evalHead+luaPrelude+"\nbegin(KEYS_, ARGV_)\n"+`
redis.call('SET', key, 'x')
expire(key, tonumber(ARGV[6]))
local t = redis.call('TIME')
return {now_s, now_ns, redis.call('PEXPIRETIME', key), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}`,
			[]string{"rltest:lua:expire"}, "t", "", 0, 0, 0, r).Slice()
		if err != nil {
			t.Fatal(err)
		}
		now := v[0].(int64)*1e9 + v[1].(int64)
		at, want, after := v[2].(int64), (now+r)/1e6+1, v[3].(int64)
		if at != want && (at != -2 || after < want) {
			t.Errorf("expire(%d) at now %d: PEXPIRETIME %d (server at %d ms), want %d", r, now, at, after, want)
		}
	}
	// On a test's clock: PEXPIRE the whole milliseconds of r plus one,
	// plus the pad, from the server's time (its whole millisecond).
	for _, r := range rs {
		v, err := c.Eval(bg, evalHead+luaPrelude+"\nbegin(KEYS_, ARGV_)\n"+`
redis.call('SET', key, 'x')
expire(key, tonumber(ARGV[6]))
local t = redis.call('TIME')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), redis.call('PEXPIRETIME', key)}`,
			[]string{"rltest:lua:expire"}, "t", "0", 7, 0, 0, r).Slice()
		if err != nil {
			t.Fatal(err)
		}
		ttl, want := v[1].(int64)-v[0].(int64), r/1e6+1+7
		if ttl > want || ttl < want-1 {
			t.Errorf("expire(%d) on a test clock: expires in %d ms, want %d", r, ttl, want)
		}
	}
	c.Del(bg, "rltest:lua:expire")
}

func TestLuaAlign(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	rng := rand.New(rand.NewPCG(8, 8))
	ws := []int64{1, 7, 1e9, 1e9 + 1, 1500 * 1e6, 86400e9 + 1, int64(maxSpan), int64(maxSpan) - 1, 3, 999_999_937}
	for _, w := range ws {
		for range 10 {
			now := start.UnixNano() + rng.Int64N(1<<50)
			// The local clock's boundary may be off the server's by days.
			skew := rng.Int64N(2*40*86400e9) - 40*86400e9
			anchor := windowStart(now+skew, w)
			v := evalHelpers(t, c, now, "local W = tonumber(ARGV[6])\n"+luaAlign, `
return {align()}`, w, 0, strconv.FormatInt(anchor, 10))
			if got, want := v[0].(int64), windowStart(now, w)-now; got != want {
				t.Errorf("W %d, now %d, anchor %d: align() = %d, want %d", w, now, anchor, got, want)
			}
		}
	}
}
