package redis

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// slidingLogCase is the conformance case of the sliding log at rate.
func slidingLogCase(rate ratelimit.Rate) algoCase {
	for _, a := range testAlgorithms {
		if a.name == "SlidingLog" {
			return a.conformanceCase(params{rate: rate})
		}
	}
	panic("no SlidingLog in testAlgorithms")
}

// TestSlidingLogAcrossFormats plays random traces (runTrace: steps,
// peeks, bookings, cancels, Take and Settle, Resets) whose limits cross
// slPackedMax both ways: SetRate doubles and halves the limit, and
// overrides give keys limits on the other side than the limiter's. Every
// decision is the in-memory SlidingLog's, with coalescing off and on.
func TestSlidingLogAcrossFormats(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, coalesce := range []bool{false, true} {
		for _, l := range []int64{slPackedMax*3/4 + 1, slPackedMax*3/2 + 1} { // doubled or halved, they cross
			c := slidingLogCase(ratelimit.Per(l, 10*time.Second))
			t.Run("coalesce="+strconv.FormatBool(coalesce)+"/"+c.name, func(t *testing.T) {
				for seed := range uint64(conformanceSeeds()) {
					mc := ratelimit.NewManualClock(start)
					core, rds := pairFor(t, c, mc, client, WithCoalescing(coalesce))
					runTrace(t, c, mc, core, rds, seed, 400)
				}
			})
		}
	}
}

// TestSlidingLogCrossing moves one key's log across slPackedMax and back,
// by SetRate and by an override, with bookings ahead (which leave a
// floor): each decision is the in-memory SlidingLog's, and after each
// crossing only the keys of the format in use exist (the other's are
// deleted by the decision that converted them).
func TestSlidingLogCrossing(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	small, big := ratelimit.Per(slPackedMax, time.Minute), ratelimit.Per(slPackedMax+1, time.Minute)
	for _, coalesce := range []bool{false, true} {
		for _, by := range []string{"SetRate", "override"} {
			t.Run("coalesce="+strconv.FormatBool(coalesce)+"/"+by, func(t *testing.T) {
				mc := ratelimit.NewManualClock(start)
				prefix := testPrefix(t)
				mem, err := ratelimit.NewSlidingLog(small, ratelimit.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				lim, err := NewSlidingLog(c, small, WithPrefix(prefix), WithClock(mc), withClockTime(60_000), WithCoalescing(coalesce),
					WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
				if err != nil {
					t.Fatal(err)
				}
				to := func(r ratelimit.Rate) {
					t.Helper()
					if by == "SetRate" {
						if err := lim.SetRate(r); err != nil {
							t.Fatal(err)
						}
						if err := mem.SetRate(r); err != nil {
							t.Fatal(err)
						}
						return
					}
					if err := lim.SetOverride("k", r); err != nil {
						t.Fatal(err)
					}
					if err := mem.SetOverride("k", r); err != nil {
						t.Fatal(err)
					}
				}
				// keys reports which of the key's Redis keys exist.
				keys := func() string {
					var s []string
					for _, sfx := range []string{":slp", ":sl", ":slf"} {
						if c.Exists(ctx, redisKey(prefix, "k", sfx)).Val() == 1 {
							s = append(s, sfx)
						}
					}
					return strings.Join(s, " ")
				}
				step := func(what string, n int, book bool) {
					t.Helper()
					if book {
						want, _ := mem.Reserve(ctx, "k", n)
						got, err := lim.Reserve(ctx, "k", n)
						if err != nil || got.OK() != want.OK() || got.Decision() != want.Decision() || got.Delay() != want.Delay() {
							t.Fatalf("%s: Reserve(%d) = %v %+v %v %v, in memory %v %+v %v", what, n, got.OK(), got.Decision(), got.Delay(), err, want.OK(), want.Decision(), want.Delay())
						}
						return
					}
					want, _ := mem.AllowN(ctx, "k", n)
					got, err := lim.AllowN(ctx, "k", n)
					if err != nil || got != want {
						t.Fatalf("%s: AllowN(%d) = %+v %v, in memory %+v", what, n, got, err, want)
					}
				}
				step("first", 1000, false)
				mc.Advance(time.Second)
				step("fill", slPackedMax-1000, false)
				mc.Advance(time.Second)
				step("booking ahead", 500, true) // drops 500: a floor
				if got := keys(); got != ":slp" {
					t.Fatalf("as a string: the keys %q exist", got)
				}
				for round := range 3 {
					mc.Advance(5 * time.Second)
					to(big)
					step("peek, big", 0, false)
					if got := keys(); got != ":sl :slf" {
						t.Fatalf("round %d, as a list: the keys %q exist", round, got)
					}
					step("allow, big", 1+round, false)
					step("booking, big", 3, true)
					mc.Advance(5 * time.Second)
					to(small)
					step("peek, small", 0, false)
					if got := keys(); got != ":slp" {
						t.Fatalf("round %d, as a string again: the keys %q exist", round, got)
					}
					step("allow, small", 2, false)
					step("booking, small", 1, true)
				}
				// At rest, under the limit of either format, no key is left.
				mc.Advance(3 * time.Minute)
				for _, r := range []ratelimit.Rate{big, small} {
					to(r)
					step("at rest", 0, false)
					if got := keys(); got != "" {
						t.Errorf("at rest under %v: the keys %q exist", r, got)
					}
				}
			})
		}
	}
}

// TestSlidingLogCrossingBatched decides in one batch keys in either
// format, some converted by the batch's first decision on them (a limit
// on the other side of slPackedMax by an override), their decisions
// repeated and interleaved: each is the in-memory SlidingLog's, taken in
// the batch's order, and each key ends with one format's keys.
func TestSlidingLogCrossingBatched(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	small, big := ratelimit.Per(100, time.Minute), ratelimit.Per(slPackedMax*2, time.Minute)
	for seed := range uint64(4) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 5))
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			mem, err := ratelimit.NewSlidingLog(small, ratelimit.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := NewSlidingLog(c, small, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
				WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
			if err != nil {
				t.Fatal(err)
			}
			override := func(k string, r ratelimit.Rate) {
				if err := lim.SetOverride(k, r); err != nil {
					t.Fatal(err)
				}
				if err := mem.SetOverride(k, r); err != nil {
					t.Fatal(err)
				}
			}
			// s: a string that becomes a list; l: a list that becomes a
			// string; S and L stay as they are; n: a new key under the list.
			override("l", big)
			override("L", big)
			for _, k := range []string{"s", "l", "S", "L"} {
				mc.Advance(time.Second)
				want, _ := mem.AllowN(ctx, k, 50)
				got, err := lim.AllowN(ctx, k, 50)
				if err != nil || got != want {
					t.Fatalf("setting up %q: %+v %v, in memory %+v", k, got, err, want)
				}
			}
			override("s", big)
			override("n", big)
			lim.RemoveOverride("l")
			mem.RemoveOverride("l")
			mc.Advance(time.Second)
			ks := []string{"s", "l", "S", "L", "n"}
			order := make([]string, 12)
			ns := make([]int, len(order))
			for i := range order {
				order[i], ns[i] = ks[rng.IntN(len(ks))], rng.IntN(40)
			}
			// s and l converted by the batch's first decisions; n given a list.
			order[0], order[1], order[2], ns[2] = "s", "l", "n", 1+rng.IntN(40)
			bt := batcherOf(t, lim)
			hold(bt)
			got := make([]ratelimit.Decision, len(order))
			errs := make([]error, len(order))
			var wg sync.WaitGroup
			for i, k := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = lim.AllowN(ctx, k, ns[i])
				}()
				waitQueued(bt, i+1)
			}
			releaseBatched(t, bt, &wg, len(order))
			for i, k := range order {
				want, _ := mem.AllowN(ctx, k, ns[i])
				if errs[i] != nil || got[i] != want {
					t.Errorf("decision %d (%s, %d) = %+v %v, in memory %+v", i, k, ns[i], got[i], errs[i], want)
				}
			}
			for _, k := range ks {
				list := k == "s" || k == "L" || k == "n"
				exists := func(sfx string) bool { return c.Exists(ctx, redisKey(prefix, k, sfx)).Val() == 1 }
				if exists(":slp") == list || exists(":sl") != list {
					t.Errorf("%q: string %v, list %v; want the list %v", k, exists(":slp"), exists(":sl"), list)
				}
			}
		})
	}
}

// TestSlidingLogBothFormats: a key with a log in each format (as a
// previous version writing the list beside this one can leave) is decided
// on the format of the decision's limit alone, and the other format's
// keys are left as they are: neither read, nor converted, nor deleted.
func TestSlidingLogBothFormats(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	mc := ratelimit.NewManualClock(start)
	prefix := testPrefix(t)
	small, big := ratelimit.Per(10, time.Minute), ratelimit.Per(slPackedMax+1, time.Minute)
	ll := listLimiter{c: c, s: listScript(t), prefix: prefix, mc: mc, rate: small}
	lim, err := NewSlidingLog(c, small, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
		WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
		t.Fatalf("AllowN(2) = %+v %v", d, err)
	}
	mc.Advance(time.Second)
	if ok, _ := ll.step(t, "k", 3, 0); !ok {
		t.Fatal("the list's step of 3 was refused")
	}
	pk, lk := redisKey(prefix, "k", ":slp"), redisKey(prefix, "k", ":sl")
	str, list := c.Get(ctx, pk).Val(), c.LRange(ctx, lk, 0, -1).Val()
	unchanged := func(what string, other string) {
		t.Helper()
		if other == "list" {
			if got := c.LRange(ctx, lk, 0, -1).Val(); !slices.Equal(got, list) {
				t.Errorf("%s: the list is now %v, was %v", what, got, list)
			}
		} else if got := c.Get(ctx, pk).Val(); got != str {
			t.Errorf("%s: the string changed", what)
		}
	}
	mc.Advance(time.Second)
	if d, err := lim.AllowN(ctx, "k", 0); err != nil || d.Remaining != 8 {
		t.Errorf("the string's peek = %+v %v, want 8 remaining (its own 2 events)", d, err)
	}
	unchanged("a decision on the string", "list")
	if err := lim.SetRate(big); err != nil {
		t.Fatal(err)
	}
	if d, err := lim.AllowN(ctx, "k", 0); err != nil || d.Remaining != int(big.N)-3 {
		t.Errorf("the list's peek = %+v %v, want %d remaining (the list's 3 events)", d, err, big.N-3)
	}
	unchanged("a decision on the list", "string")
}

// TestSlidingLogMixedFleetLong alternates the previous version and this
// one at random on one key under a limit above slPackedMax, as during a
// rolling upgrade: both decide on the same list, so together they admit
// at most L events in any window, and each decision is the in-memory
// SlidingLog's over the two versions' events.
func TestSlidingLogMixedFleetLong(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	old := listScript(t)
	for seed := range uint64(3) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			rate := ratelimit.Per(slPackedMax+1, 10*time.Second)
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			mem, err := ratelimit.NewSlidingLog(rate, ratelimit.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			ll := listLimiter{c: c, s: old, prefix: prefix, mc: mc, rate: rate}
			lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
				WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
			if err != nil {
				t.Fatal(err)
			}
			var admitted []time.Time
			var by [2]int
			for i := range 300 {
				mc.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
				n := 1 + rng.IntN(300)
				want, _ := mem.AllowN(ctx, "k", n)
				var ok bool
				side := rng.IntN(2)
				if side == 0 {
					ok, _ = ll.step(t, "k", n, 0)
				} else {
					d, err := lim.AllowN(ctx, "k", n)
					if err != nil || d != want {
						t.Fatalf("step %d: AllowN(%d) = %+v %v, in memory %+v", i, n, d, err, want)
					}
					ok = d.Allowed
				}
				if ok != want.Allowed {
					t.Fatalf("step %d: version %d allowed %d: %v, in memory %v", i, side, n, ok, want.Allowed)
				}
				if ok {
					by[side] += n
					for range n {
						admitted = append(admitted, mc.Now())
					}
				}
			}
			if by[0] == 0 || by[1] == 0 {
				t.Fatalf("admitted by the previous version %d, by this one %d", by[0], by[1])
			}
			// admitted is in order: the most in any window is the most
			// events from one admission to W later.
			most, j := 0, 0
			for i := range admitted {
				for j < len(admitted) && admitted[j].Sub(admitted[i]) < rate.Period {
					j++
				}
				most = max(most, j-i)
			}
			if most > int(rate.N) || most < int(rate.N)/2 {
				t.Errorf("%d events admitted in one window, the limit is %d", most, rate.N)
			}
			if got := c.Exists(ctx, redisKey(prefix, "k", ":slp")).Val(); got != 0 {
				t.Error("a string log exists beside the shared list")
			}
		})
	}
}

// TestSlidingLogCrossingMidBatch changes the limiter's rate across
// slPackedMax while decisions are queued, so that one batch holds, for the
// same keys, decisions made under the old limit and then under the new:
// the later ones convert the log the earlier ones just wrote, inside the
// batch (through its cache). Each decision is the in-memory SlidingLog's
// with the same change at the same point of the sequence, and afterwards
// each key has the new limit's format alone.
func TestSlidingLogCrossingMidBatch(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	small, big := ratelimit.Per(100, time.Minute), ratelimit.Per(slPackedMax*2, time.Minute)
	for _, dir := range []struct {
		name     string
		from, to ratelimit.Rate
	}{{"string to list", small, big}, {"list to string", big, small}} {
		for seed := range uint64(3) {
			t.Run(dir.name+"/seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 17))
				mc := ratelimit.NewManualClock(start)
				prefix := testPrefix(t)
				mem, err := ratelimit.NewSlidingLog(dir.from, ratelimit.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				lim, err := NewSlidingLog(c, dir.from, WithPrefix(prefix), WithClock(mc), withClockTime(60_000),
					WithOnError(func(_ string, err error) { t.Errorf("hook: %v", err) }))
				if err != nil {
					t.Fatal(err)
				}
				ks := []string{"a", "b", "c"}
				for _, k := range ks { // each key logged under the old limit first
					mc.Advance(time.Second)
					want, _ := mem.AllowN(ctx, k, 30)
					if got, err := lim.AllowN(ctx, k, 30); err != nil || got != want {
						t.Fatalf("setting up %q: %+v %v, in memory %+v", k, got, err, want)
					}
				}
				mc.Advance(time.Second)
				type call struct {
					key string
					n   int
				}
				before, after := make([]call, 6), make([]call, 6)
				for i := range before {
					before[i] = call{ks[rng.IntN(len(ks))], 1 + rng.IntN(30)}
					after[i] = call{ks[rng.IntN(len(ks))], 1 + rng.IntN(30)}
				}
				rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
				for i, k := range ks { // every key decided on after the change too
					after[i].key = k
				}
				bt := batcherOf(t, lim)
				hold(bt)
				order := append(slices.Clone(before), after...)
				got := make([]ratelimit.Decision, len(order))
				errs := make([]error, len(order))
				var wg sync.WaitGroup
				for i, cl := range order {
					if i == len(before) {
						if err := lim.SetRate(dir.to); err != nil {
							t.Fatal(err)
						}
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i], errs[i] = lim.AllowN(ctx, cl.key, cl.n)
					}()
					waitQueued(bt, i+1)
				}
				releaseBatched(t, bt, &wg, len(order))
				for i, cl := range order {
					if i == len(before) {
						if err := mem.SetRate(dir.to); err != nil {
							t.Fatal(err)
						}
					}
					want, _ := mem.AllowN(ctx, cl.key, cl.n)
					if errs[i] != nil || got[i] != want {
						t.Errorf("decision %d (%s, %d) = %+v %v, in memory %+v", i, cl.key, cl.n, got[i], errs[i], want)
					}
				}
				list := dir.to == big
				for _, k := range ks {
					exists := func(sfx string) bool { return c.Exists(ctx, redisKey(prefix, k, sfx)).Val() == 1 }
					if exists(":slp") == list || exists(":sl") != list {
						t.Errorf("%q: string %v, list %v; want the list %v", k, exists(":slp"), exists(":sl"), list)
					}
				}
			})
		}
	}
}
