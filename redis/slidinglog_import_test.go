package redis

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// listScript is the sliding log's script as the previous version ran it
// (testdata/slidinglog_list.lua): its log a list under ":sl", its floor
// under ":slf".
func listScript(t testing.TB) *goredis.Script {
	t.Helper()
	src, err := os.ReadFile("testdata/slidinglog_list.lua")
	if err != nil {
		t.Fatal(err)
	}
	defs, body, ok := strings.Cut(string(src), "\n-- body\n")
	if !ok {
		t.Fatal("testdata/slidinglog_list.lua: no body")
	}
	return goredis.NewScript(script{defs: defs, body: body}.evalSource())
}

// listLimiter decides as the previous version's sliding log did, on the
// clock mc: a step ("s") of n events waiting at most maxWait (-1: a
// booking, up to the horizon), replying allowed (or, for a booking, OK)
// and the delay.
type listLimiter struct {
	c      *goredis.Client
	s      *goredis.Script
	prefix string
	mc     *ratelimit.ManualClock
	rate   ratelimit.Rate
}

func (l listLimiter) step(t testing.TB, key string, n int, maxWait time.Duration) (ok bool, delay time.Duration) {
	t.Helper()
	keys := []string{redisKey(l.prefix, key, ":sl"), redisKey(l.prefix, key, ":slf")}
	r, err := l.s.Run(context.Background(), l.c, keys, "s", strconv.FormatInt(l.mc.Now().UnixNano(), 10), 60_000, n,
		int64(maxWait), int64(l.rate.Period), l.rate.N, int64(horizon)).Slice()
	if err != nil {
		t.Fatalf("the previous version's script: %v", err)
	}
	return r[0].(int64)%2 == 1, time.Duration(r[4].(int64))
}

// TestSlidingLogImport writes logs as the previous version did (a list of
// decimal Unix ns and a floor key, by its own script), on random traces
// of steps and bookings ahead (which leave floors), and then decides on
// the same keys with this version: every decision, before and after, is
// the in-memory SlidingLog's on the same trace, so the imported log
// counts every event the list held. The list and its floor key are
// deleted by the import: after it, only the string format's key exists.
func TestSlidingLogImport(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	old := listScript(t)
	for _, coalesce := range []bool{false, true} {
		for seed := range uint64(6) {
			t.Run("coalesce="+strconv.FormatBool(coalesce)+"/seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				rate := ratelimit.Per(int64(1+rng.IntN(5)), time.Duration(1+rng.IntN(60))*time.Second)
				mc := ratelimit.NewManualClock(start)
				prefix := testPrefix(t)
				mem, err := ratelimit.NewSlidingLog(rate, ratelimit.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				ll := listLimiter{c: c, s: old, prefix: prefix, mc: mc, rate: rate}
				keys := []string{"a", "b", "c"}
				var sawFloor, sawList bool
				for i := range 60 {
					mc.Advance(time.Duration(rng.Int64N(int64(rate.Period) / 2)))
					k, n := keys[rng.IntN(len(keys))], 1+rng.IntN(int(rate.N))
					if rng.IntN(3) == 0 { // a booking ahead
						res, _ := mem.Reserve(ctx, k, n)
						ok, delay := ll.step(t, k, n, -1)
						if ok != res.OK() || (ok && delay != res.Delay()) {
							t.Fatalf("step %d: the list's booking of %d on %q: %v %v, in memory %v %v", i, n, k, ok, delay, res.OK(), res.Delay())
						}
						continue
					}
					want, _ := mem.AllowN(ctx, k, n)
					if ok, _ := ll.step(t, k, n, 0); ok != want.Allowed {
						t.Fatalf("step %d: the list's AllowN(%q, %d) = %v, in memory %+v", i, k, n, ok, want)
					}
				}
				lens := map[string]int64{}
				for _, k := range keys {
					lens[k] = c.LLen(ctx, redisKey(prefix, k, ":sl")).Val()
					sawList = sawList || lens[k] > 0
					sawFloor = sawFloor || c.Exists(ctx, redisKey(prefix, k, ":slf")).Val() == 1
				}
				if !sawList {
					t.Fatal("the trace left no list to import")
				}
				lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000), WithCoalescing(coalesce),
					WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
				if err != nil {
					t.Fatal(err)
				}
				for i := range 60 {
					k, n := keys[rng.IntN(len(keys))], rng.IntN(int(rate.N)+1)
					if rng.IntN(3) == 0 && n > 0 {
						want, _ := mem.Reserve(ctx, k, n)
						got, err := lim.Reserve(ctx, k, n)
						if err != nil || got.OK() != want.OK() || got.Delay() != want.Delay() || got.Decision() != want.Decision() {
							t.Fatalf("step %d: Reserve(%q, %d) = %v %v %+v %v, in memory %v %v %+v", i, k, n, got.OK(), got.Delay(), got.Decision(), err, want.OK(), want.Delay(), want.Decision())
						}
					} else {
						want, _ := mem.AllowN(ctx, k, n)
						got, err := lim.AllowN(ctx, k, n)
						if err != nil || got != want {
							t.Fatalf("step %d: AllowN(%q, %d) = %+v %v, in memory %+v", i, k, n, got, err, want)
						}
					}
					mc.Advance(time.Duration(rng.Int64N(int64(rate.Period) / 3)))
				}
				for _, k := range keys {
					if got := c.Exists(ctx, redisKey(prefix, k, ":sl"), redisKey(prefix, k, ":slf")).Val(); got != 0 {
						t.Errorf("%q: %d of the list format's keys exist after the import (it held %d entries)", k, got, lens[k])
					}
				}
				if !sawFloor {
					t.Error("the trace left no floor key to import")
				}
			})
		}
	}
}

// TestSlidingLogMixedFleet alternates the previous version and this one
// at random on one key, as during a rolling upgrade: each version admits
// at most L events in any window counted in its string (its own and
// those it imported), and the previous one at most L counted in its list
// (those since this one last took the list over), so together at most 2L;
// the previous version alone, its list taken over (and deleted) when this
// one's string is missing, may reach 2L in a window too.
func TestSlidingLogMixedFleet(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	old := listScript(t)
	for seed := range uint64(4) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			rate := ratelimit.Per(3, 10*time.Second)
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			ll := listLimiter{c: c, s: old, prefix: prefix, mc: mc, rate: rate}
			lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
				WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
			if err != nil {
				t.Fatal(err)
			}
			var admitted [2][]time.Time // by the previous version, by this one
			for range 400 {
				mc.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
				n := 1 + rng.IntN(2)
				if rng.IntN(2) == 0 {
					if ok, _ := ll.step(t, "k", n, 0); ok {
						for range n {
							admitted[0] = append(admitted[0], mc.Now())
						}
					}
				} else if d, err := lim.AllowN(ctx, "k", n); err != nil {
					t.Fatal(err)
				} else if d.Allowed {
					for range n {
						admitted[1] = append(admitted[1], mc.Now())
					}
				}
			}
			all := append(append([]time.Time{}, admitted[0]...), admitted[1]...)
			slices.SortFunc(all, time.Time.Compare)
			for side, limit := range map[string]struct {
				ts []time.Time
				l  int
			}{"previous": {admitted[0], 2 * int(rate.N)}, "this": {admitted[1], int(rate.N)}, "together": {all, 2 * int(rate.N)}} {
				if len(limit.ts) < int(rate.N) {
					t.Errorf("%s version admitted %d events in all", side, len(limit.ts))
				}
				for i, at := range limit.ts {
					in := 0
					for _, u := range limit.ts[i:] {
						if u.Sub(at) < rate.Period {
							in++
						}
					}
					if in > limit.l {
						t.Fatalf("%s: %d events admitted in the window from %v, the bound is %d", side, in, at.Sub(start), limit.l)
					}
				}
			}
		})
	}
}

// TestSlidingLogImportBatched imports logs inside batches: a batch whose
// missing logs all have no list (checked with the batch's prefetch), and
// batches mixing keys with a log, keys with a list to import and keys
// with neither, a key's decisions repeated. Each decision is the
// in-memory SlidingLog's, taken in the batch's order.
func TestSlidingLogImportBatched(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	old := listScript(t)
	rate := ratelimit.Per(3, time.Minute)
	for _, order := range [][]string{
		{"x", "y", "x", "z"},                // no list anywhere
		{"a", "x", "b", "a", "p", "y", "b"}, // lists, logs, neither
		{"p", "a", "a", "a", "a"},
	} {
		t.Run(strings.Join(order, ""), func(t *testing.T) {
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			mem, err := ratelimit.NewSlidingLog(rate, ratelimit.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
				WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
			if err != nil {
				t.Fatal(err)
			}
			ll := listLimiter{c: c, s: old, prefix: prefix, mc: mc, rate: rate}
			// a and b: lists the previous version wrote (b with a booking
			// ahead); p: a log this version wrote.
			for _, st := range []struct {
				key  string
				n    int
				book bool
			}{{"a", 2, false}, {"b", 3, false}, {"b", 2, true}, {"p", 1, false}} {
				mc.Advance(time.Second)
				var want bool
				var got bool
				if st.book {
					res, _ := mem.Reserve(ctx, st.key, st.n)
					got, _ = ll.step(t, st.key, st.n, -1)
					want = res.OK()
				} else {
					d, _ := mem.AllowN(ctx, st.key, st.n)
					want = d.Allowed
					if st.key == "p" {
						d, err := lim.AllowN(ctx, st.key, st.n)
						got = err == nil && d.Allowed
					} else {
						got, _ = ll.step(t, st.key, st.n, 0)
					}
				}
				if got != want || !want {
					t.Fatalf("setting up %q: %v, in memory %v", st.key, got, want)
				}
			}
			mc.Advance(time.Second)
			bt := batcherOf(t, lim)
			hold(bt)
			got := make([]ratelimit.Decision, len(order))
			errs := make([]error, len(order))
			var wg sync.WaitGroup
			for i, k := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = lim.AllowN(ctx, k, 1)
				}()
				waitQueued(bt, i+1)
			}
			releaseBatched(t, bt, &wg, len(order))
			for i, k := range order {
				want, _ := mem.AllowN(ctx, k, 1)
				if errs[i] != nil || got[i] != want {
					t.Errorf("decision %d (%s) = %+v %v, in memory %+v", i, k, got[i], errs[i], want)
				}
			}
		})
	}
}

// TestSlidingLogFloorOnly: a log whose entries are all given back keeps
// its floor in its value's header, and the value lives until the floor
// has passed: L = 1, an event at 0 and a booking that makes room for
// itself by dropping it (the floor: W after the dropped event), then the
// booking cancelled. The log is empty but nothing conforms before W, as
// in memory, and the value expires then (not at once, as an empty log
// would).
func TestSlidingLogFloorOnly(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	const w = 10 * time.Second
	rate := ratelimit.Per(1, w)
	mc := ratelimit.NewManualClock(start)
	prefix := testPrefix(t)
	mem, err := ratelimit.NewSlidingLog(rate, ratelimit.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(0),
		WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
	if err != nil {
		t.Fatal(err)
	}
	same := func(step string, n int) ratelimit.Decision {
		t.Helper()
		want, _ := mem.AllowN(ctx, "k", n)
		got, err := lim.AllowN(ctx, "k", n)
		if err != nil || got != want {
			t.Fatalf("%s: AllowN(%d) = %+v %v, in memory %+v", step, n, got, err, want)
		}
		return got
	}
	same("t0", 1)
	mc.Advance(time.Second)
	want, _ := mem.Reserve(ctx, "k", 1)
	got, err := lim.Reserve(ctx, "k", 1)
	if err != nil || !got.OK() || got.Delay() != want.Delay() || got.Delay() != w-time.Second {
		t.Fatalf("Reserve = %v %v %v, in memory %v %v", got.OK(), got.Delay(), err, want.OK(), want.Delay())
	}
	want.Cancel()
	got.Cancel()
	k := redisKey(prefix, "k", ":slp")
	v, err := c.Get(ctx, k).Result()
	if err != nil || len(v) != 17 {
		t.Fatalf("after the cancel the log is %d bytes (%v), want its header alone", len(v), err)
	}
	if pttl := c.PTTL(ctx, k).Val(); pttl < w-time.Second-time.Second || pttl > w-time.Second+2*time.Millisecond {
		t.Errorf("the header alone expires in %v, want about %v (when the floor passes)", pttl, w-time.Second)
	}
	mc.Advance(time.Second)
	if d := same("t2", 1); d.Allowed || d.RetryAfter != w-2*time.Second {
		t.Errorf("at 2 s: %+v, want refused until the floor, %v", d, w-2*time.Second)
	}
	mc.Advance(w - 2*time.Second)
	if d := same("at the floor", 1); !d.Allowed {
		t.Errorf("at the floor: %+v, want allowed", d)
	}
}

// TestSlidingLogAncientValue: a value based more than 208 days ago (which
// no expiring key reaches: a clock moved on, a key restored without its
// TTL) holds nothing that can still count. It is read as an empty log, not
// reported as corrupt, and deleted by a peek, or replaced by a step.
func TestSlidingLogAncientValue(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	rate := ratelimit.Per(2, time.Minute)
	const day = 24 * float64(time.Hour)
	for _, n := range []int{0, 1} {
		mc := ratelimit.NewManualClock(start)
		prefix := testPrefix(t)
		lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
			WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := NewSlidingLog(c, rate, WithPrefix(prefix+"fresh:"), WithClock(mc), withClockTime(60_000))
		if err != nil {
			t.Fatal(err)
		}
		// Two events and a floor, all within 104 days of a base 250 days
		// ago: the log was full then.
		k := redisKey(prefix, "k", ":slp")
		c.Set(ctx, k, packedLog(start.UnixNano()-int64(250*day), 2*day, day, day), 0)
		got, err := lim.AllowN(ctx, "k", n)
		want, _ := fresh.AllowN(ctx, "k", n)
		if err != nil || got != want {
			t.Errorf("AllowN(%d) = %+v %v, want a new key's %+v", n, got, err, want)
		}
		if pttl := c.PTTL(ctx, k).Val(); pttl == -1 {
			t.Errorf("n=%d: the key is left without a TTL", n)
		}
		if ex := c.Exists(ctx, k).Val(); ex != int64(n) {
			t.Errorf("n=%d: %d keys, want %d", n, ex, n)
		}
	}
}
