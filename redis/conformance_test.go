package redis

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
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
	name  string
	limit int
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
func pairFor(t *testing.T, c algoCase, mc *ratelimit.ManualClock, client Client) (core, rds ratelimit.Limiter) {
	t.Helper()
	core, err := c.core(mc)
	if err != nil {
		t.Fatal(err)
	}
	rds, err = c.redis(client, WithClock(mc), WithPrefix(testPrefix(t)), withClockTime(60_000),
		WithTimeout(5*time.Second), WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
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
			for seed := range uint64(2) {
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
func runTrace(t *testing.T, c algoCase, mc *ratelimit.ManualClock, core, rds ratelimit.Limiter, seed uint64, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 42))
	keys := []string{"a", "b", "", "{x}"}
	type booking struct {
		key       string
		core, rds *ratelimit.Reservation
	}
	var pending []booking
	// The last decision's RetryAfter and ResetAfter, and its key: moving
	// the clock to those instants exactly (and 1 ns either side) probes
	// the boundaries where off-by-one errors live.
	var lastRetry, lastReset time.Duration
	lastKey := ""
	var allowed, denied, booked, refused, cancelled, resets int
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
		n := rng.IntN(c.limit + 1)
		if rng.IntN(4) == 0 {
			n = min(1, c.limit)
		}
		switch op := rng.IntN(21); {
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
			pending = append(pending, booking{key, rc, rr})
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
			if err != nil || dc != dr || dc.Remaining != c.limit {
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
	t.Logf("%d steps: %d allowed, %d denied, %d booked, %d refused, %d cancelled, %d resets",
		steps, allowed, denied, booked, refused, cancelled, resets)
	// A trace that never allows or never denies tests little.
	if allowed == 0 || denied == 0 || booked == 0 {
		t.Errorf("trace too one-sided: %d allowed, %d denied, %d booked", allowed, denied, booked)
	}
}
