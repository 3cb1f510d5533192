package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

var bg = context.Background()

func TestRedisKey(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"user:1", "p:{user:1}:tb"},
		{"", `p:{\_}:tb`},
		{"{", `p:{\(}:tb`},
		{"}", `p:{\)}:tb`},
		{"a}b{c", `p:{a\)b\(c}:tb`},
		{`\`, `p:{\\}:tb`},
		{`\_`, `p:{\\_}:tb`},
	} {
		if got := redisKey("p:", c.key, ":tb"); got != c.want {
			t.Errorf("redisKey(%q) = %q, want %q", c.key, got, c.want)
		}
	}
	// Distinct keys, distinct Redis keys; every tag non-empty and the same
	// whatever the suffix (one slot per decision).
	keys := []string{"", "{", "}", "{}", "}{", `\`, `\\`, `\(`, `\)`, `\_`, "_", "a", "a}", "{a", "{a}", "a{b}c", "(", ")"}
	seen := map[string]string{}
	for _, k := range keys {
		rk := redisKey("p:", k, ":x")
		if prev, ok := seen[rk]; ok {
			t.Errorf("keys %q and %q both map to %q", prev, k, rk)
		}
		seen[rk] = k
		tag := hashTag(rk)
		if tag == "" || tag == rk || tag != hashTag(redisKey("p:", k, ":other")) {
			t.Errorf("key %q: Redis key %q has hash tag %q", k, rk, tag)
		}
	}
}

// TestRedisKeys: the keys of one call built together are the keys built
// one by one, for short, escaped and long keys, one suffix or several.
func TestRedisKeys(t *testing.T) {
	long := strings.Repeat("k{}", 40)
	for _, k := range []string{"user:1", "", "a}b{c", `\_`, long, long + "x"} {
		for _, sfx := range [][]string{{":tb"}, {":sl", ":slf", ":slp"}, {":sl", ":slf", ":slp", ":sl:blk"}} {
			got := make([]string, len(sfx))
			redisKeys(got, "p:", k, sfx)
			for i, s := range sfx {
				if want := redisKey("p:", k, s); got[i] != want {
					t.Errorf("redisKeys(%q)[%d] = %q, want %q", k, i, got[i], want)
				}
			}
		}
	}
}

// newTB builds a TokenBucket on the shared Redis with a prefix of the test's.
func newTB(t *testing.T, c Client, rate ratelimit.Rate, capacity int, opts ...Option) *TokenBucket {
	t.Helper()
	opts = append([]Option{WithPrefix(testPrefix(t))}, opts...)
	tb, err := NewTokenBucket(c, rate, capacity, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestKeysAreIndependent(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	tb := newTB(t, c, ratelimit.PerHour(1), 2)
	keys := []string{"", "{", "}", "a}b", `\`, `\\`, "{x}", "x"}
	for _, k := range keys {
		for i := range 2 {
			if !tb.Allow(k) {
				t.Fatalf("key %q: event %d denied", k, i)
			}
		}
	}
	for _, k := range keys {
		if tb.Allow(k) {
			t.Errorf("key %q: third event allowed", k)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	for _, tc := range []struct {
		rate     ratelimit.Rate
		capacity int
		opts     []Option
		want     error
	}{
		{ratelimit.Rate{}, 1, nil, ratelimit.ErrInvalidRate},
		{ratelimit.PerSecond(-1), 1, nil, ratelimit.ErrInvalidRate},
		{ratelimit.Per(1<<53, time.Hour), 1, nil, ratelimit.ErrInvalidRate},
		{ratelimit.PerSecond(1), 0, nil, ratelimit.ErrInvalidCapacity},
		{ratelimit.PerDay(1), 36, nil, ratelimit.ErrInvalidCapacity}, // 36 days > 35
		{ratelimit.PerSecond(1), 1, []Option{WithTimeout(0)}, ratelimit.ErrInvalidOption},
		{ratelimit.PerSecond(1), 1, []Option{WithFailurePolicy(7)}, ratelimit.ErrInvalidOption},
		{ratelimit.PerSecond(1), 1, []Option{WithClock(nil)}, ratelimit.ErrInvalidOption},
		{ratelimit.PerSecond(1), 1, []Option{WithDenyCache(-1)}, ratelimit.ErrInvalidOption},
	} {
		if _, err := NewTokenBucket(c, tc.rate, tc.capacity, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("NewTokenBucket(%v, %d): %v, want %v", tc.rate, tc.capacity, err, tc.want)
		}
	}
	if _, err := NewTokenBucket(nil, ratelimit.PerSecond(1), 1); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := NewTokenBucket((*goredis.Client)(nil), ratelimit.PerSecond(1), 1); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("nil *goredis.Client: %v", err)
	}
	// The FailLocal limiter's options are checked too.
	if _, err := NewTokenBucket(c, ratelimit.PerSecond(1), 1, WithLocalOptions(ratelimit.WithShards(3))); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("bad local option: %v", err)
	}
	if _, err := NewTokenBucket(c, ratelimit.PerDay(35), 35); err != nil {
		t.Errorf("35 days: %v", err)
	}

	tb := newTB(t, c, ratelimit.PerSecond(1), 3)
	if _, err := tb.AllowN(bg, "k", -1); !errors.Is(err, ratelimit.ErrNegativeN) {
		t.Errorf("AllowN(-1): %v", err)
	}
	if _, err := tb.AllowN(bg, "k", 4); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("AllowN(4): %v", err)
	}
	if _, err := tb.Reserve(bg, "k", 4); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("Reserve(4): %v", err)
	}
	if err := tb.WaitN(bg, "k", -2); !errors.Is(err, ratelimit.ErrNegativeN) {
		t.Errorf("WaitN(-2): %v", err)
	}
	if tb.Limit() != 3 {
		t.Errorf("Limit() = %d", tb.Limit())
	}
}

// TestTTL checks on the server's own clock that every key written has a
// TTL, ending within 1 ms after the key is at rest, and that a step or a
// cancel leaving a key at rest deletes it.
func TestTTL(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	prefix := testPrefix(t)
	tb, err := NewTokenBucket(c, ratelimit.PerSecond(1), 10, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := tb.AllowN(bg, "peek", 0); err != nil || !d.Allowed || d.Remaining != 10 {
		t.Fatalf("peek: %+v %v", d, err)
	}
	if keys := keysWithPrefix(t, c, prefix); len(keys) != 0 {
		t.Fatalf("a peek wrote %v", keys)
	}
	if d, err := tb.AllowN(bg, "k", 3); err != nil || !d.Allowed || d.ResetAfter != 3*time.Second {
		t.Fatalf("AllowN(3): %+v %v", d, err)
	}
	pttl := c.PTTL(bg, redisKey(prefix, "k", ":tb")).Val()
	if pttl <= 2900*time.Millisecond || pttl > 3001*time.Millisecond {
		t.Errorf("PTTL after 3 tokens at 1/s = %v, want just under 3.001s", pttl)
	}

	// A reservation given back at the instant it was made (on a manual
	// clock: on the server's, it would be due already) leaves the bucket
	// full: the key is deleted.
	mc := ratelimit.NewManualClock(start)
	tbm, err := NewTokenBucket(c, ratelimit.PerSecond(1), 10, WithPrefix(prefix+"m:"), WithClock(mc), withClockTime(60_000))
	if err != nil {
		t.Fatal(err)
	}
	r, err := tbm.Reserve(bg, "r", 10)
	if err != nil || !r.OK() {
		t.Fatalf("Reserve: %v %v", r, err)
	}
	if c.Exists(bg, redisKey(prefix+"m:", "r", ":tb")).Val() != 1 {
		t.Fatal("reservation wrote no key")
	}
	r.Cancel()
	if n := c.Exists(bg, redisKey(prefix+"m:", "r", ":tb")).Val(); n != 0 {
		t.Error("a cancel leaving the bucket full did not delete the key")
	}

	// A mixed workload: every key has a TTL.
	for i := range 200 {
		key := fmt.Sprint("m", i%17)
		switch i % 3 {
		case 0:
			tb.AllowN(bg, key, 1+i%4)
		case 1:
			if r, err := tb.Reserve(bg, key, 1+i%10); err == nil && i%2 == 0 {
				r.Cancel()
			}
		default:
			tb.Allow(key)
		}
	}
	keys := keysWithPrefix(t, c, prefix)
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	for _, k := range keys {
		if pttl := c.PTTL(bg, k).Val(); pttl <= 0 {
			t.Errorf("key %q has PTTL %v", k, pttl)
		}
	}
}

// builder builds a limiter on Redis.
type builder func(c Client, opts ...Option) (ratelimit.Limiter, error)

// TestTwoInstancesNeverExceedTheLimit runs two limiters on two clients,
// as two service replicas, hammering the same keys from several
// goroutines each: in total, never more than the limit per key is allowed
// (exactly the limit where the algorithm lets it all through at once).
func TestTwoInstancesNeverExceedTheLimit(t *testing.T) {
	addr := redisAddr(t)
	const limit, keys, workers, calls = 25, 3, 4, 50
	for _, a := range testAlgorithms {
		prefix := testPrefix(t) + a.name + ":"
		var lims [2]ratelimit.Limiter
		for i := range lims {
			var err error
			lims[i], err = a.builder(a.hammer)(newClient(t, addr, true), WithPrefix(prefix), WithTimeout(5*time.Second),
				WithFailurePolicy(FailClosed), WithOnError(func(key string, err error) { t.Errorf("%q: %v", key, err) }))
			if err != nil {
				t.Fatal(err)
			}
		}
		var allowed [keys]atomic.Int64
		var wg sync.WaitGroup
		for _, lim := range lims {
			for w := range workers {
				wg.Go(func() {
					for i := range calls {
						k := (w + i) % keys
						if i%5 == 0 {
							if d, err := lim.AllowN(bg, fmt.Sprint("k", k), 2); err == nil && d.Allowed {
								allowed[k].Add(2)
							}
							continue
						}
						if lim.Allow(fmt.Sprint("k", k)) {
							allowed[k].Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		for k := range allowed {
			got := allowed[k].Load()
			if got > limit || (a.hammerExact && got != limit) || got == 0 {
				t.Errorf("%s, key k%d: %d events allowed in total, limit %d", a.name, k, got, limit)
			}
		}
	}
}

func TestNoScriptReloads(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	tb := newTB(t, c, ratelimit.PerHour(1), 2)
	if !tb.Allow("k") {
		t.Fatal("first event denied")
	}
	if err := c.ScriptFlush(bg).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := tb.AllowN(bg, "k", 1); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
	}
}

// TestErrorReplyAppliesPolicy: a Redis that refuses writes (out of memory
// under noeviction) makes the call fail; the policy answers, the hook
// hears of it, nothing panics.
func TestErrorReplyAppliesPolicy(t *testing.T) {
	srv := ownServer(t)
	c := newClient(t, srv.addr, true)
	var hooked []error
	tb, err := NewTokenBucket(c, ratelimit.PerHour(1), 2, WithPrefix(testPrefix(t)), WithFailurePolicy(FailClosed),
		WithOnError(func(key string, err error) { hooked = append(hooked, err) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(bg, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if tb.Allow("k") {
		t.Error("FailClosed allowed on an error reply")
	}
	if len(hooked) != 1 || !errors.Is(hooked[0], ErrUnavailable) || !strings.Contains(hooked[0].Error(), "OOM") {
		t.Errorf("hook got %v", hooked)
	}
}

func TestCallerContextIsNotAFailure(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	hooked := 0
	tb := newTB(t, c, ratelimit.PerHour(1), 2, WithFailurePolicy(FailOpen),
		WithOnError(func(string, error) { hooked++ }))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := tb.AllowN(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("AllowN on a done ctx: %v", err)
	}
	if _, err := tb.Reserve(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve on a done ctx: %v", err)
	}
	if err := tb.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on a done ctx: %v", err)
	}
	if hooked != 0 {
		t.Errorf("hook called %d times for the caller's own context", hooked)
	}
	if d, _ := tb.AllowN(bg, "k", 0); d.Remaining != 2 {
		t.Errorf("calls on a done ctx consumed: %+v", d)
	}
}

// countingClient counts the scripts it runs.
type countingClient struct {
	*goredis.Client
	calls atomic.Int64
}

func (c *countingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *goredis.Cmd {
	c.calls.Add(1)
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func (c *countingClient) FCall(ctx context.Context, fn string, keys []string, args ...any) *goredis.Cmd {
	c.calls.Add(1)
	return c.Client.FCall(ctx, fn, keys, args...)
}

func (c *countingClient) Eval(ctx context.Context, src string, keys []string, args ...any) *goredis.Cmd {
	c.calls.Add(1)
	return c.Client.Eval(ctx, src, keys, args...)
}

func TestDenyCache(t *testing.T) {
	c := &countingClient{Client: newClient(t, redisAddr(t), true)}
	mc := ratelimit.NewManualClock(start)
	tb := newTB(t, c, ratelimit.PerSecond(1), 4, WithClock(mc), withClockTime(60_000), WithDenyCache(10))
	if d, _ := tb.AllowN(bg, "k", 4); !d.Allowed {
		t.Fatal("burst denied")
	}
	mc.Advance(500 * time.Millisecond)
	d, _ := tb.AllowN(bg, "k", 2) // denied by Redis: cached for n >= 2 until +1.5s
	want := ratelimit.Decision{Limit: 4, RetryAfter: 1500 * time.Millisecond, ResetAfter: 3500 * time.Millisecond}
	if d != want || c.calls.Load() != 2 {
		t.Fatalf("AllowN(2) = %+v after %d calls, want %+v after 2", d, c.calls.Load(), want)
	}
	mc.Advance(time.Second)
	d, _ = tb.AllowN(bg, "k", 3) // n >= 2: answered locally
	want = ratelimit.Decision{Limit: 4, RetryAfter: 500 * time.Millisecond, ResetAfter: 2500 * time.Millisecond}
	if d != want || c.calls.Load() != 2 {
		t.Fatalf("cached AllowN(3) = %+v after %d calls, want %+v after 2", d, c.calls.Load(), want)
	}
	if !tb.Allow("k") || c.calls.Load() != 3 { // n < 2: asks Redis, which has one token
		t.Fatalf("Allow after 1.5s: denied, or not asked (%d calls)", c.calls.Load())
	}
	mc.Advance(500*time.Millisecond - 1)
	if d, _ := tb.AllowN(bg, "k", 2); d.Allowed || c.calls.Load() != 3 {
		t.Fatalf("1 ns before the cached retry: %+v, %d calls", d, c.calls.Load())
	}
	mc.Advance(1)
	if d, _ := tb.AllowN(bg, "k", 2); d.Allowed || c.calls.Load() != 4 {
		// Redis now answers: the token taken at +1.5s means 2 are not there.
		t.Fatalf("at the cached retry: %+v, %d calls (want Redis asked)", d, c.calls.Load())
	}
	if _, err := tb.Reserve(bg, "k", 2); err != nil || c.calls.Load() != 5 {
		t.Fatalf("Reserve did not ask Redis: %v, %d calls", err, c.calls.Load())
	}
}

func TestDenyCacheBounded(t *testing.T) {
	dc := newDenyCache(2)
	now := start
	deny := ratelimit.Decision{Limit: 1, RetryAfter: time.Second, ResetAfter: time.Second}
	dc.add("a", 1, now, deny)
	dc.add("b", 1, now, ratelimit.Decision{Limit: 1, RetryAfter: 2 * time.Second})
	dc.add("c", 1, now, deny) // full, nothing expired: not cached
	if _, ok := dc.lookup("c", 1, now); ok {
		t.Error("a full cache took a new key")
	}
	now = now.Add(time.Second) // a expired
	dc.add("c", 1, now, deny)
	if _, ok := dc.lookup("c", 1, now); !ok {
		t.Error("expired entry not made room for c")
	}
	if _, ok := dc.lookup("a", 1, now); ok {
		t.Error("a still cached after its retry time")
	}
	if len(dc.m) != 2 {
		t.Errorf("%d entries, cap 2", len(dc.m))
	}
}

// TestTTLAllAlgorithms runs a mixed workload on every algorithm on the
// server's clock, then checks that every key written has a TTL and that it
// ends no later than 1 ms after the key is at rest (its ResetAfter). (Keys
// of the fastest cases, at rest within a millisecond, may show PTTL 0.)
func TestTTLAllAlgorithms(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	for _, ac := range conformanceCases() {
		prefix := testPrefix(t) + ac.name + ":"
		lim, err := ac.redis(c, WithPrefix(prefix), WithTimeout(5*time.Second),
			WithOnError(func(key string, err error) { t.Errorf("%s %q: %v", ac.name, key, err) }))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			key := fmt.Sprint("k", i%5)
			n := 1 + i%max(ac.limit, 1)
			switch i % 4 {
			case 0, 1:
				lim.AllowN(bg, key, min(n, ac.limit))
			case 2:
				if r, err := lim.Reserve(bg, key, min(n, ac.limit)); err == nil && i%8 == 2 {
					r.Cancel()
				}
			default:
				lim.Allow(key)
			}
		}
		for _, k := range keysWithPrefix(t, c, prefix) {
			t0 := time.Now()
			pttl := c.PTTL(bg, k).Val()
			user := hashTag(k)
			d, err := lim.AllowN(bg, user, 0)
			elapsed := time.Since(t0)
			if err != nil {
				t.Fatal(err)
			}
			// -1 (ns, as go-redis returns it) is a key without a TTL; -2
			// one gone since the scan; 0, one expiring this millisecond.
			if pttl == -1 {
				t.Errorf("%s: key %q has no TTL", ac.name, k)
			}
			// The TTL ends within 1 ms after rest; PTTL counts from the
			// server's whole millisecond (up to 1 ms more); the peek came
			// elapsed later; 1 ms more for the server's clock cache.
			if pttl > d.ResetAfter+3*time.Millisecond+elapsed {
				t.Errorf("%s: key %q has PTTL %v, but is at rest in %v", ac.name, k, pttl, d.ResetAfter)
			}
		}
	}
}

// TestNoDrift books 3000 events one by one at 3 per second on a frozen
// clock: the k-th is due exactly ⌈k/3 s⌉ after the first, to the
// nanosecond, however many fractions of a nanosecond have accumulated in
// Redis.
func TestNoDrift(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	for _, alg := range []string{"TokenBucket", "LeakyBucket"} {
		mc := ratelimit.NewManualClock(start)
		opts := []Option{WithPrefix(testPrefix(t) + alg), WithClock(mc), withClockTime(60_000)}
		const events = 3000
		var lim ratelimit.Limiter
		var err error
		capacity := 1
		if alg == "TokenBucket" {
			lim, err = NewTokenBucket(c, ratelimit.PerSecond(3), capacity, opts...)
		} else {
			capacity = events // a queue that holds every booking
			lim, err = NewLeakyBucket(c, ratelimit.PerSecond(3), capacity, opts...)
		}
		if err != nil {
			t.Fatal(err)
		}
		for k := int64(0); k < events; k++ {
			r, err := lim.Reserve(bg, "k", 1)
			if err != nil || !r.OK() {
				t.Fatalf("%s: Reserve #%d: %v", alg, k, err)
			}
			want := start.Add(time.Duration((k*1e9 + 2) / 3)) // ⌈k·10⁹/3⌉ ns
			if got := r.TimeToAct(); !got.Equal(want) {
				t.Fatalf("%s: event %d due at +%v, want +%v", alg, k, got.Sub(start), want.Sub(start))
			}
		}
		// When the last booking's slot has passed, the key is at rest.
		mc.Set(start.Add(events * time.Second / 3))
		if d, _ := lim.AllowN(bg, "k", 0); d.Remaining != capacity || d.ResetAfter != 0 {
			t.Errorf("%s: after %d events at 3/s: %+v", alg, events, d)
		}
	}
}
