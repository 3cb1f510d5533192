package redis

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// The bound each algorithm promises, over the instants at which events act,
// whatever the order of Allow, AllowN, Reserve and Cancel:
//
//   - token bucket (capacity C, rate r = N per P): at most C + ⌊r·D⌋
//     events conform in any interval of length D >= 0; as bookings act at
//     their instants rounded up to whole ns, at most C + ⌈r·(D+1ns)⌉ − 1
//     act in one (the in-memory type's documented bound);
//   - leaky bucket: what it lets out never bursts beyond one booking: for
//     bookings i before j (by time to act), the events of i and of every
//     booking between them need their intervals, Σn·P/N <= act_j - act_i
//     + 1 ns (slots are rounded up to whole ns);
//   - fixed window: at most L in each window of length W aligned to the
//     Unix epoch;
//   - sliding log: at most L in any interval shorter than W;
//   - sliding window counter: at most 2L − ⌈2L/W⌉ in any interval shorter
//     than W (its documented worst case).
//
// TestBoundsUnderReserveAndCancel checks them on random interleavings run
// against Redis, on the limiter's clock passed to the scripts (the
// test-only withClockTime), and the same trace through the in-memory
// limiter, which must decide identically.

// boundCase is one algorithm with small parameters, where bursts matter.
type boundCase struct {
	algoCase
	check func(events []booked) error
}

// booked is a booking that acts: n events at an instant (Unix ns).
type booked struct {
	at int64
	n  int
}

// mulDiv returns ⌊a·b/c⌋ for a, b, c >= 0, c > 0, saturating.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, 1<<63-1))
}

// mulDivCeil returns ⌈a·b/c⌉ for a, b >= 0, c > 0, saturating.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r > 0 {
		q++
	}
	return int64(min(q, 1<<63-1))
}

// eachEvent expands bookings into one instant per event, sorted.
func eachEvent(bs []booked) []int64 {
	var ts []int64
	for _, b := range bs {
		for range b.n {
			ts = append(ts, b.at)
		}
	}
	slices.Sort(ts)
	return ts
}

func tokenBound(rate ratelimit.Rate, capacity int) func([]booked) error {
	return func(bs []booked) error {
		ts := eachEvent(bs)
		for i := range ts {
			for j := i; j < len(ts); j++ {
				d := ts[j] - ts[i]
				// A booking acts at its instant rounded up to whole ns,
				// up to 1 ns after the exact one: hence, as the in-memory
				// type documents, C + ⌈r·(D+1ns)⌉ − 1.
				if allowed := int64(capacity) + mulDivCeil(d+1, rate.N, int64(rate.Period)) - 1; int64(j-i+1) > allowed {
					return fmt.Errorf("%d events in %v (from +%v), bound %d", j-i+1, time.Duration(d), time.Unix(0, ts[i]).Sub(start), allowed)
				}
			}
		}
		return nil
	}
}

func leakyBound(rate ratelimit.Rate) func([]booked) error {
	return func(bs []booked) error {
		s := slices.Clone(bs)
		slices.SortStableFunc(s, func(a, b booked) int { return int(min(max(a.at-b.at, -1), 1)) })
		for i := range s {
			sum := int64(0)
			for j := i + 1; j < len(s); j++ {
				sum += int64(s[j-1].n)
				if room := mulDiv(s[j].at-s[i].at+1, rate.N, int64(rate.Period)); sum > room {
					return fmt.Errorf("bookings at +%v and +%v: %d events between need more than %v", time.Unix(0, s[i].at).Sub(start), time.Unix(0, s[j].at).Sub(start), sum, time.Duration(s[j].at-s[i].at))
				}
			}
		}
		return nil
	}
}

func fixedWindowBound(rate ratelimit.Rate) func([]booked) error {
	return func(bs []booked) error {
		per := map[int64]int64{}
		w := int64(rate.Period)
		for _, b := range bs {
			k := windowStart(b.at, w)
			if per[k] += int64(b.n); per[k] > rate.N {
				return fmt.Errorf("%d events in the window at +%v, limit %d", per[k], time.Unix(0, k).Sub(start), rate.N)
			}
		}
		return nil
	}
}

// slidingBound: at most limit events in any interval shorter than W.
func slidingBound(w time.Duration, limit int64) func([]booked) error {
	return func(bs []booked) error {
		ts := eachEvent(bs)
		for i := range ts {
			for j := i; j < len(ts) && ts[j]-ts[i] < int64(w); j++ {
				if int64(j-i+1) > limit {
					return fmt.Errorf("%d events within %v (from +%v), bound %d", j-i+1, time.Duration(ts[j]-ts[i]), time.Unix(0, ts[i]).Sub(start), limit)
				}
			}
		}
		return nil
	}
}

// boundCases lists every algorithm of testAlgorithms (algorithms_test.go)
// with the parameters and the bound of its entry.
func boundCases() []boundCase {
	var cs []boundCase
	for _, a := range testAlgorithms {
		for _, p := range a.bounds {
			cs = append(cs, boundCase{a.conformanceCase(p), a.bound(p)})
		}
	}
	return cs
}

func TestBoundsUnderReserveAndCancel(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(4) {
				mc := ratelimit.NewManualClock(start)
				core, rds := pairFor(t, c.algoCase, mc, client)
				boundTrace(t, c, mc, core, rds, seed, 160)
			}
		})
	}
}

// boundTrace drives both limiters on one key through random Allow,
// AllowN, Reserve and Cancel (of any earlier booking, in any order, often
// of one that later bookings queue behind), checks that they decide alike,
// and checks the bound on the instants at which events act: allowed events
// now, bookings at their time to act unless cancelled by then.
func boundTrace(t *testing.T, c boundCase, mc *ratelimit.ManualClock, core, rds ratelimit.Limiter, seed uint64, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1213))
	const key = "k"
	type pending struct {
		core, rds *ratelimit.Reservation
		n         int
	}
	var open []pending
	var acted []booked
	cancels := 0
	for i := range steps {
		switch r := rng.IntN(10); {
		case r < 3: // no time passes: bookings pile up
		case r < 9:
			mc.Advance(time.Duration(rng.Int64N(int64(c.step) + 1)))
		default:
			mc.Advance(time.Duration(rng.Int64N(int64(c.step)*int64(c.limit) + 1)))
		}
		now := mc.Now().UnixNano()
		n := 1 + rng.IntN(c.limit)
		if rng.IntN(2) == 0 {
			n = 1
		}
		switch op := rng.IntN(10); {
		case op < 3:
			dc, errc := core.AllowN(ctx, key, n)
			dr, errr := rds.AllowN(ctx, key, n)
			if errc != nil || errr != nil || dc != dr {
				t.Fatalf("seed %d step %d at +%v: AllowN(%d): core %+v %v, redis %+v %v", seed, i, mc.Now().Sub(start), n, dc, errc, dr, errr)
			}
			if dr.Allowed {
				acted = append(acted, booked{now, n})
			}
		case op < 7:
			rc, errc := core.Reserve(ctx, key, n)
			rr, errr := rds.Reserve(ctx, key, n)
			if errc != nil || errr != nil || rc.OK() != rr.OK() || rc.Decision() != rr.Decision() || !rc.TimeToAct().Equal(rr.TimeToAct()) {
				t.Fatalf("seed %d step %d at +%v: Reserve(%d): core %v %+v +%v %v, redis %v %+v +%v %v", seed, i, mc.Now().Sub(start), n,
					rc.OK(), rc.Decision(), rc.TimeToAct().Sub(start), errc, rr.OK(), rr.Decision(), rr.TimeToAct().Sub(start), errr)
			}
			if rr.OK() {
				open = append(open, pending{rc, rr, n})
			}
		default:
			if len(open) == 0 {
				continue
			}
			j := rng.IntN(len(open))
			p := open[j]
			open = append(open[:j], open[j+1:]...)
			p.core.Cancel()
			p.rds.Cancel()
			cancels++
			if act := p.rds.TimeToAct().UnixNano(); act < now {
				acted = append(acted, booked{act, p.n}) // due: it acted
			}
			dc, _ := core.AllowN(ctx, key, 0)
			dr, err := rds.AllowN(ctx, key, 0)
			if err != nil || dc != dr {
				t.Fatalf("seed %d step %d at +%v: peek after Cancel: core %+v, redis %+v %v", seed, i, mc.Now().Sub(start), dc, dr, err)
			}
		}
	}
	for _, p := range open {
		acted = append(acted, booked{p.rds.TimeToAct().UnixNano(), p.n})
	}
	if cancels == 0 || len(acted) == 0 {
		t.Fatalf("seed %d: a trace without cancels or events tests nothing", seed)
	}
	if err := c.check(acted); err != nil {
		t.Errorf("seed %d: bound broken: %v", seed, err)
	}
}
