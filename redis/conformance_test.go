package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// The Redis limiters must decide exactly as the in-memory ones. These tests
// run the same random traces through both on one ManualClock, the Redis
// side reading that clock through the test-only withClockTime option, and
// compare every Decision and Reservation field for field.

// start is a Unix time in the 2020s, so that instants exercise the split
// of 19-digit nanosecond times in the scripts.
var start = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// algoCase builds both sides of one algorithm with one set of parameters.
type algoCase struct {
	name   string
	limit  int
	params params
	bucket bool // SetRate takes a capacity
	// step is the typical spacing of events, to scale the clock's moves.
	step  time.Duration
	core  func(clk ratelimit.Clock) (ratelimit.Limiter, error)
	redis builder
}

// conformanceCases lists every algorithm with the parameters of its
// entry in algorithms (algorithms_test.go).
func conformanceCases() []algoCase {
	var cs []algoCase
	for _, a := range testAlgorithms {
		for _, p := range a.conformance {
			cs = append(cs, a.conformanceCase(p))
		}
	}
	return cs
}

// pairFor builds the two limiters of c on clock mc, the Redis one on client.
// extra options go to the Redis one.
func pairFor(t *testing.T, c algoCase, mc *ratelimit.ManualClock, client Client, extra ...Option) (core, rds ratelimit.Limiter) {
	t.Helper()
	core, err := c.core(mc)
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]Option{WithClock(mc), WithPrefix(testPrefix(t)), withClockTime(60_000),
		WithTimeout(5 * time.Second), WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) })}, extra...)
	rds, err = c.redis(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return core, rds
}

// TestWindow: each Redis limiter reports the window of its in-memory twin.
func TestWindow(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	type windowed interface{ Window() time.Duration }
	for _, c := range conformanceCases() {
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		if got, want := rds.(windowed).Window(), core.(windowed).Window(); got != want {
			t.Errorf("%s: Window() = %v, want %v", c.name, got, want)
		}
	}
}

func TestConformanceRandomTraces(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(conformanceSeeds()) {
				mc := ratelimit.NewManualClock(start)
				core, rds := pairFor(t, c, mc, client)
				runTrace(t, c, mc, core, rds, seed, 500)
			}
		})
	}
}

// runTrace drives both limiters through steps random operations: AllowN
// (including peeks), Reserve, Cancel of earlier reservations and Reset, at
// irregular times, on a few keys (some needing escapes).
//
// It also changes the rate of both (a raise, a lowering, several changes
// in a row while every key is idle, sometimes more than the token bucket
// remembers), so that the traces cover keys written under earlier
// parameters, bookings held across a change (whose Cancel gives nothing
// back on either side), and Resets after changes.
func runTrace(t *testing.T, c algoCase, mc *ratelimit.ManualClock, core, rds ratelimit.Limiter, seed uint64, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 42))
	keys := []string{"a", "b", "", "{x}"}
	type booking struct {
		key       string
		n         int
		core, rds *ratelimit.Reservation
	}
	var pending []booking
	// The last decision's RetryAfter and ResetAfter, and its key: moving
	// the clock to those instants exactly (and 1 ns either side) probes
	// the boundaries where off-by-one errors live.
	var lastRetry, lastReset time.Duration
	lastKey := ""
	var allowed, denied, booked, refused, cancelled, resets, changes, taken, settled, overridden int
	limit := limitOf(core) // an earlier trace may have changed it
	cur := c.params        // the parameters in force
	most := limit          // the largest limit in force so far
	// The keys' overrides' limits, where the core has overrides (every
	// Redis limiter has them).
	own := map[string]params{}
	_, overrides := core.(interface{ RemoveOverride(string) })
	keyLimit := func(k string) int {
		if p, ok := own[k]; ok {
			if c.bucket {
				return p.capacity
			}
			return int(p.rate.N)
		}
		return limit
	}
	keyParams := func(k string) params {
		if p, ok := own[k]; ok {
			return p
		}
		return cur
	}
	// change sets both sides to parameters near the case's own; one the
	// Redis backend refuses (its bounds are stricter) is skipped.
	change := func(i int) {
		// Keys at rest are dropped on both sides first, as Redis's TTLs
		// and the store's sweeps do: a key full at a raise starts full
		// under the new capacity whether or not it was dropped (on Redis
		// its TTL has ended), so the traces must agree on which are.
		forgetAtRest(t, core, rds, keys)
		p := variant(rng, c)
		if err := setRate(rds, c.bucket, p); err != nil {
			return
		}
		if err := setRate(core, c.bucket, p); err != nil {
			t.Fatalf("step %d: SetRate(%v, %d): redis accepted, core: %v", i, p.rate, p.capacity, err)
		}
		limit, cur = limitOf(core), p
		most = max(most, limit)
		if got := limitOf(rds); got != limit {
			t.Fatalf("step %d: SetRate(%v, %d): Limit() core %d, redis %d", i, p.rate, p.capacity, limit, got)
		}
		changes++
	}
	for i := range steps {
		// Move the clock: mostly a fraction of the event spacing, sometimes
		// not at all, sometimes far, sometimes to the very nanosecond (or
		// one either side) at which the last denial said to retry.
		key := keys[rng.IntN(len(keys))]
		switch r := rng.IntN(14); {
		case r < 2:
		case r < 4 && lastRetry > 0:
			mc.Advance(lastRetry + time.Duration(rng.IntN(3)-1))
			key, lastRetry = lastKey, 0
		case r < 6 && lastReset > 0:
			mc.Advance(lastReset + time.Duration(rng.IntN(3)-1))
			key, lastReset = lastKey, 0
		case r < 10:
			mc.Advance(time.Duration(rng.Int64N(int64(c.step)*2 + 1)))
		case r < 9:
			mc.Advance(time.Duration(rng.Int64N(int64(c.step)*int64(c.limit)*2 + 1)))
		default:
			mc.Advance(time.Duration(rng.Int64N(1000))) // a few ns
		}
		n := rng.IntN(keyLimit(key) + 1)
		if rng.IntN(4) == 0 {
			n = min(1, keyLimit(key))
		}
		switch op := rng.IntN(28); {
		case op == 27:
			if !overrides {
				continue
			}
			forgetAtRest(t, core, rds, keys) // as for SetRate
			if rng.IntN(3) == 0 {
				core.(interface{ RemoveOverride(string) }).RemoveOverride(key)
				rds.(interface{ RemoveOverride(string) }).RemoveOverride(key)
				delete(own, key)
				continue
			}
			p := variant(rng, c)
			if err := setOverride(rds, c.bucket, key, p); err != nil {
				continue // refused by the backend's stricter bounds
			}
			if err := setOverride(core, c.bucket, key, p); err != nil {
				t.Fatalf("step %d: SetOverride(%q, %v, %d): redis accepted, core: %v", i, key, p.rate, p.capacity, err)
			}
			overridden++
			own[key] = p
		case op == 23 || op == 24:
			rc, errc := core.(ratelimit.Taker).Take(ctx, key, n)
			rr, errr := rds.(ratelimit.Taker).Take(ctx, key, n)
			if errc != nil || errr != nil || rc.OK() != rr.OK() || rc.Decision() != rr.Decision() {
				t.Fatalf("step %d at +%v: Take(%q, %d): core %v %+v %v, redis %v %+v %v",
					i, mc.Now().Sub(start), key, n, rc.OK(), rc.Decision(), errc, rr.OK(), rr.Decision(), errr)
			}
			if rc.OK() {
				taken++
				pending = append(pending, booking{key, n, rc, rr})
			} else if n > 0 {
				denied++
			}
		case op == 25 || op == 26:
			if len(pending) == 0 {
				continue
			}
			j := rng.IntN(len(pending))
			b := pending[j]
			// Below, at or above the estimate; an excess small enough
			// that no debt nears the Redis backend's cap (35 days
			// ahead, where the core's is 36.5 years).
			actual := b.n
			switch rng.IntN(3) {
			case 0:
				actual = rng.IntN(b.n + 1)
			case 1:
				actual = b.n + 1 + rng.IntN(limit+1)
			}
			if actual > b.n {
				d, _ := core.AllowN(ctx, b.key, 0)
				if d.ResetAfter+debtSpan(c.bucket, keyParams(b.key), actual-b.n) > 20*24*time.Hour {
					actual = b.n
				}
			}
			if rng.IntN(2) == 0 {
				mc.Advance(time.Duration(rng.Int64N(int64(c.step)*2 + 1)))
			}
			if rng.IntN(2) == 0 { // a key dropped at rest settles as one kept
				forgetAtRest(t, core, rds, keys)
			}
			dc, errc := b.core.Settle(actual)
			dr, errr := b.rds.Settle(actual)
			if b.n == 0 { // a booking of 0 events holds nothing to settle
				if !errors.Is(errc, ratelimit.ErrSettled) || !errors.Is(errr, ratelimit.ErrSettled) {
					t.Fatalf("step %d: Settle(%d) of 0 on %q: core %v, redis %v", i, actual, b.key, errc, errr)
				}
			} else if errc != nil || errr != nil || dc != dr {
				t.Fatalf("step %d at +%v: Settle(%d) of %d on %q: core %+v %v, redis %+v %v",
					i, mc.Now().Sub(start), actual, b.n, b.key, dc, errc, dr, errr)
			}
			// Settled: a second Settle is refused, a Cancel does nothing.
			_, errc = b.core.Settle(actual)
			_, errr = b.rds.Settle(actual)
			if !errors.Is(errc, ratelimit.ErrSettled) || !errors.Is(errr, ratelimit.ErrSettled) {
				t.Fatalf("step %d: a second Settle: core %v, redis %v", i, errc, errr)
			}
			b.core.Cancel()
			b.rds.Cancel()
			dc, _ = core.AllowN(ctx, b.key, 0)
			dr, err := rds.AllowN(ctx, b.key, 0)
			if err != nil || dc != dr {
				t.Fatalf("step %d at +%v: peek after Settle and Cancel on %q: core %+v, redis %+v %v",
					i, mc.Now().Sub(start), b.key, dc, dr, err)
			}
			pending = append(pending[:j], pending[j+1:]...)
			settled++
		case op == 21:
			change(i)
		case op == 22:
			// Several changes while every key is idle, the clock moving
			// between them; sometimes more than the history kept.
			for range 2 + rng.IntN(10) {
				mc.Advance(time.Duration(rng.Int64N(int64(c.step)*int64(c.limit) + 1)))
				change(i)
			}
		case op < 13:
			dc, errc := core.AllowN(ctx, key, n)
			dr, errr := rds.AllowN(ctx, key, n)
			if errc != nil || errr != nil || dc != dr {
				t.Fatalf("step %d at +%v: AllowN(%q, %d): core %+v %v, redis %+v %v",
					i, mc.Now().Sub(start), key, n, dc, errc, dr, errr)
			}
			if dc.Allowed {
				allowed++
			} else {
				denied++
			}
			if dc.RetryAfter > 0 {
				lastRetry = dc.RetryAfter
			}
			lastReset, lastKey = dc.ResetAfter, key
		case op < 17:
			// Keep bookings well within the Redis backend's horizon (30
			// days ahead), where it refuses what the core books.
			if d, _ := core.AllowN(ctx, key, 0); d.ResetAfter > 20*24*time.Hour {
				continue
			}
			rc, errc := core.Reserve(ctx, key, n)
			rr, errr := rds.Reserve(ctx, key, n)
			if errc != nil || errr != nil {
				t.Fatalf("step %d: Reserve(%q, %d): core %v, redis %v", i, key, n, errc, errr)
			}
			if rc.OK() != rr.OK() || rc.Decision() != rr.Decision() || !rc.TimeToAct().Equal(rr.TimeToAct()) {
				t.Fatalf("step %d at +%v: Reserve(%q, %d): core ok=%v %+v act +%v, redis ok=%v %+v act +%v",
					i, mc.Now().Sub(start), key, n, rc.OK(), rc.Decision(), rc.TimeToAct().Sub(start),
					rr.OK(), rr.Decision(), rr.TimeToAct().Sub(start))
			}
			if !rc.OK() {
				refused++
				continue
			}
			booked++
			if rc.Decision().RetryAfter > 0 {
				lastRetry = rc.Decision().RetryAfter
			}
			lastReset, lastKey = rc.Decision().ResetAfter, key
			pending = append(pending, booking{key, n, rc, rr})
		case op == 20:
			// Bookings made before stay taken: their Cancels give nothing
			// back on either side.
			core.(interface{ Reset(string) }).Reset(key)
			if err := rds.(interface {
				Reset(context.Context, string) error
			}).Reset(ctx, key); err != nil {
				t.Fatalf("step %d: Reset(%q): %v", i, key, err)
			}
			dc, _ := core.AllowN(ctx, key, 0)
			dr, err := rds.AllowN(ctx, key, 0)
			if err != nil || dc != dr || dc.Remaining != keyLimit(key) {
				t.Fatalf("step %d at +%v: peek after Reset of %q: core %+v, redis %+v %v",
					i, mc.Now().Sub(start), key, dc, dr, err)
			}
			resets++
		default:
			if len(pending) > 0 {
				j := rng.IntN(len(pending))
				if rng.IntN(2) == 0 {
					j = len(pending) - 1 // the latest: likely still ahead
				}
				// Sometimes cancel at the very instant the booking falls
				// due, or 1 ns either side.
				if at := pending[j].core.TimeToAct().Add(time.Duration(rng.IntN(3) - 1)); rng.IntN(2) == 0 && at.After(mc.Now()) {
					mc.Set(at)
				}
				pending[j].core.Cancel()
				pending[j].rds.Cancel()
				// A peek shows the state the cancel left.
				k := pending[j].key
				dc, _ := core.AllowN(ctx, k, 0)
				dr, err := rds.AllowN(ctx, k, 0)
				if err != nil || dc != dr {
					t.Fatalf("step %d at +%v: peek after Cancel on %q: core %+v, redis %+v %v",
						i, mc.Now().Sub(start), k, dc, dr, err)
				}
				pending = append(pending[:j], pending[j+1:]...)
				cancelled++
			}
		}
	}
	t.Logf("%d steps: %d allowed, %d denied, %d booked, %d refused, %d cancelled, %d resets, %d changes, %d taken, %d settled, %d overrides",
		steps, allowed, denied, booked, refused, cancelled, resets, changes, taken, settled, overridden)
	// A trace that never allows or never denies tests little.
	if allowed == 0 || denied == 0 || booked == 0 {
		t.Errorf("trace too one-sided: %d allowed, %d denied, %d booked", allowed, denied, booked)
	}
}

// variant returns parameters near c's own: the rate's count or period
// doubled or halved, or kept, and for a bucket the capacity too.
func variant(rng *rand.Rand, c algoCase) params {
	p := c.params
	switch rng.IntN(5) {
	case 0:
		p.rate.N *= 2
	case 1:
		p.rate.N = max(p.rate.N/2, 1)
	case 2:
		p.rate.Period *= 2
	case 3:
		p.rate.Period = max(p.rate.Period/2, 1)
	}
	if c.bucket {
		switch rng.IntN(4) {
		case 0:
			p.capacity *= 2
		case 1:
			p.capacity = max(p.capacity/2, 1)
		case 2:
			p.capacity++
		}
	}
	return p
}

// setRate changes l, in memory or on Redis, to p: the buckets' SetRate
// takes a capacity, the windows' only a rate.
func setRate(l ratelimit.Limiter, bucket bool, p params) error {
	if bucket {
		return l.(interface {
			SetRate(ratelimit.Rate, int) error
		}).SetRate(p.rate, p.capacity)
	}
	return l.(interface{ SetRate(ratelimit.Rate) error }).SetRate(p.rate)
}

// limitOf is l's Limit().
func limitOf(l ratelimit.Limiter) int { return l.(interface{ Limit() int }).Limit() }

// forgetAtRest drops, in memory (Sweep) and on Redis (as its TTL would
// have, without waiting for the real clock), every key of keys that is at
// rest now: ResetAfter 0.
func forgetAtRest(t *testing.T, core, rds ratelimit.Limiter, keys []string) {
	t.Helper()
	core.(interface{ Sweep() }).Sweep()
	l := rds.(interface{ base() *limiter }).base()
	for _, k := range keys {
		// Peek both: a peek re-expresses a state written under earlier
		// parameters, on either side.
		d, _ := core.AllowN(bg, k, 0)
		if dr, err := rds.AllowN(bg, k, 0); err != nil || dr != d {
			t.Fatalf("peek of %q: core %+v, redis %+v %v", k, d, dr, err)
		}
		if d.ResetAfter == 0 {
			for _, sfx := range l.suffix {
				if err := l.client.(interface {
					Del(context.Context, ...string) *goredis.IntCmd
				}).Del(bg, redisKey(l.cfg.prefix, k, sfx)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// base returns the machinery l embeds (tests).
func (l *limiter) base() *limiter { return l }

// debtSpan is about how far ahead a debt of e events reaches under p: e
// intervals for a bucket, the windows it fills (and two more) for a
// window algorithm.
func debtSpan(bucket bool, p params, e int) time.Duration {
	per := time.Duration(int64(p.rate.Period) / p.rate.N)
	if bucket {
		return time.Duration(e+1) * (per + 1)
	}
	return time.Duration(int64(e)/p.rate.N+2) * p.rate.Period
}

// setOverride gives key the parameters p on l, in memory or on Redis.
func setOverride(l ratelimit.Limiter, bucket bool, key string, p params) error {
	if bucket {
		return l.(interface {
			SetOverride(string, ratelimit.Rate, int) error
		}).SetOverride(key, p.rate, p.capacity)
	}
	return l.(interface {
		SetOverride(string, ratelimit.Rate) error
	}).SetOverride(key, p.rate)
}

// conformanceSeeds is how many random traces each case plays: 2, or
// CONFORMANCE_SEEDS for a long run.
func conformanceSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("CONFORMANCE_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 2
}
