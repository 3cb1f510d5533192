package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newTestSlidingLog(t *testing.T, rate Rate, start time.Time, opts ...Option) (*SlidingLog, *ManualClock) {
	t.Helper()
	clock := NewManualClock(start)
	sl, err := NewSlidingLog(rate, append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return sl, clock
}

func TestSlidingLogTimeline(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	sl, clock := newTestSlidingLog(t, PerSecond(3), winT0)
	runWinTimeline(t, sl, clock, winT0, []winRow{
		{at: 0, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 2, ResetAfter: time.Second}},
		{at: 300 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		{at: 600 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// Full: the event at 0 leaves the window (t−1s, t] at t = 1s.
		{at: 700 * ms, key: "k", n: 1, want: Decision{RetryAfter: 300 * ms, ResetAfter: 900 * ms}},
		{at: time.Second - ns, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: time.Second, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// Room for 2 comes when the second oldest (600ms) leaves: 1.6s.
		{at: time.Second, key: "k", n: 2, want: Decision{RetryAfter: 600 * ms, ResetAfter: time.Second}},
		// (The event at 300ms has left: room for 1, not 2.)
		{at: 1600*ms - ns, key: "k", n: 2, want: Decision{Remaining: 1, RetryAfter: ns, ResetAfter: 400*ms + ns}},
		{at: 1600 * ms, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: 1600 * ms, key: "other", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: 2600 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 3}},
	})
}

// Where the fixed window lets 2L through across a boundary, the sliding
// log waits until the first burst has left the window.
func TestSlidingLogNoBoundaryBurst(t *testing.T) {
	const ns = time.Nanosecond
	sl, clock := newTestSlidingLog(t, PerMinute(100), winT0)
	runWinTimeline(t, sl, clock, winT0, []winRow{
		{at: time.Minute - ns, key: "k", n: 100, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Minute}},
		{at: time.Minute, key: "k", n: 100, want: Decision{RetryAfter: time.Minute - ns, ResetAfter: time.Minute - ns}},
		{at: time.Minute, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: 2*time.Minute - ns, key: "k", n: 100, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Minute}},
	})
}

func TestSlidingLogReserveCancel(t *testing.T) {
	const ms = time.Millisecond
	sl, clock := newTestSlidingLog(t, PerSecond(3), winT0)
	runWinTimeline(t, sl, clock, winT0, []winRow{
		{at: 0, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		// Reservation 0: room for 2 when the events at 0 leave, at 1s. To
		// make room in the log it drops one instant 0, which keeps the
		// key closed until 1s.
		{at: 100 * ms, key: "k", n: 2, op: winReserve, ok: true, want: Decision{RetryAfter: 900 * ms, ResetAfter: 1900 * ms}},
		// The window (−800ms, 200ms] holds 2 events, but the booking is
		// first in line: a new event conforms no earlier than it.
		{at: 200 * ms, key: "k", n: 1, want: Decision{RetryAfter: 800 * ms, ResetAfter: 1800 * ms}},
		{at: 200 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
		// Reservation 1: the third place in (0, 1s].
		{at: 200 * ms, key: "k", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: 800 * ms, ResetAfter: 1800 * ms}},
		// Reservation 2: (0, 1s] is full; room when the 1s events leave.
		// It drops one of them from the log: the key is closed until 2s.
		{at: 300 * ms, key: "k", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: 1700 * ms, ResetAfter: 2700 * ms}},
		{at: 300 * ms, op: winCancel, res: 1},
		{at: 300 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2700 * ms}},
		{at: 400 * ms, op: winCancel, res: 2},
		// Both cancelled: the log holds reservation 0's instants at 1s
		// (one of them dropped), and the key stays closed until the
		// dropped one leaves the window, at 2s. An exact log would let one
		// event through at 1s: the price of O(L) memory under bookings.
		{at: 400 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1600 * ms}},
		{at: 400 * ms, key: "k", n: 1, want: Decision{RetryAfter: 1600 * ms, ResetAfter: 1600 * ms}},
		{at: 2 * time.Second, key: "k", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},

		// On a full log, cancelling a booking of one event is exact.
		{at: 0, key: "e", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: 500 * ms, key: "e", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{at: 500 * ms, key: "e", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{at: 500 * ms, op: winCancel, res: 3},
		{at: 500 * ms, key: "e", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 500 * ms}},
		{at: 500 * ms, key: "e", n: 1, want: Decision{RetryAfter: 500 * ms, ResetAfter: 500 * ms}},
		{at: time.Second, key: "e", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},

		// A booking for now, cancelled at once, is given back whole; one
		// cancelled after its instant gives nothing back.
		{at: 0, key: "c", n: 3, op: winReserve, ok: true, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: 0, op: winCancel, res: 4},
		{at: 0, key: "c", n: 2, op: winReserve, ok: true, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		{at: 1, op: winCancel, res: 5},
		{at: 1, key: "c", n: 2, want: Decision{Remaining: 1, RetryAfter: time.Second - 1, ResetAfter: time.Second - 1}},
	})
}

func TestSlidingLogBackwardsClock(t *testing.T) {
	const ms = time.Millisecond
	sl, clock := newTestSlidingLog(t, PerSecond(3), winT0)
	runWinTimeline(t, sl, clock, winT0, []winRow{
		{at: time.Second, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		// Back to 0.5s: nothing conforms before the newest instant, 1s.
		{at: 500 * ms, key: "k", n: 1, want: Decision{RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{at: 500 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: 1200 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// At 2.1s the instants at 1s have left the window and leave the log.
		{at: 2100 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		// Back to 1.5s, where they would still count: nothing conforms
		// before the newest instant, 2.1s, so nothing is freed.
		{at: 1500 * ms, key: "k", n: 1, want: Decision{RetryAfter: 600 * ms, ResetAfter: 1600 * ms}},
		{at: 1500 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
	})
}

func TestNewSlidingLogErrors(t *testing.T) {
	for _, tc := range []struct {
		rate Rate
		want error
	}{
		{Rate{}, ErrInvalidRate},
		{Per(0, time.Second), ErrInvalidRate},
		{Per(1, -1), ErrInvalidRate},
		{Per(1, time.Duration(maxSpan)+1), ErrInvalidRate},
		{Per(maxLogLimit+1, time.Second), ErrInvalidRate},
	} {
		if _, err := NewSlidingLog(tc.rate); !errors.Is(err, tc.want) {
			t.Errorf("NewSlidingLog(%v): %v, want %v", tc.rate, err, tc.want)
		}
	}
	if _, err := NewSlidingLog(Per(maxLogLimit, time.Duration(maxSpan))); err != nil {
		t.Errorf("NewSlidingLog at the extremes: %v", err)
	}
}

// A limit above the log's says what it would cost, in numbers that hold
// for any limit (8 bytes an event would overflow past 2⁶⁰), through
// NewSlidingLog, SetRate and SetOverride alike.
func TestSlidingLogLimitError(t *testing.T) {
	sl, _ := newTestSlidingLog(t, Per(3, time.Second), winT0)
	for _, n := range []int64{maxLogLimit + 1, 1 << 61, math.MaxInt64} {
		rate := Per(n, time.Second)
		_, errNew := NewSlidingLog(rate)
		for _, err := range []error{errNew, sl.SetRate(rate), sl.SetOverride("k", rate)} {
			if !errors.Is(err, ErrInvalidRate) {
				t.Fatalf("a log of %d events: %v, want ErrInvalidRate", n, err)
			}
			msg := err.Error()
			if strings.Contains(msg, "-") || strings.Contains(msg, " 0 ") || !strings.Contains(msg, strconv.FormatInt(n, 10)) || !strings.Contains(msg, strconv.Itoa(maxLogLimit)) {
				t.Errorf("a log of %d events: %q, want its count and the log's limit, nothing negative", n, msg)
			}
		}
	}
	if d := mustAllowN(t, sl, "k", 0); d.Limit != 3 {
		t.Fatalf("a refused override changed the key: %+v", d)
	}
}

func TestSlidingLogExtremes(t *testing.T) {
	sl, clock := newTestSlidingLog(t, Per(3, time.Duration(maxSpan)), winT0)
	checkExtremes(t, sl, clock, 3)
}

// The log is allocated when a key is created, never by a peek and never
// again for that key.
func TestSlidingLogAllocations(t *testing.T) {
	ctx := context.Background()
	sl, clock := newTestSlidingLog(t, PerSecond(50), winT0)
	// keyed.book builds a throwaway state for a peek at an absent key, and
	// that state escapes to the heap (one small allocation, for every
	// algorithm); the log itself must not be allocated.
	if a := testing.AllocsPerRun(100, func() { sl.AllowN(ctx, "absent", 0) }); a > 1 {
		t.Errorf("peek at an absent key: %v allocations", a)
	}
	sl.Allow("k")
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		i++
		clock.Set(winT0.Add(time.Duration(i) * 7 * time.Millisecond))
		sl.Allow("k")
		sl.AllowN(ctx, "k", 2)
	}); a != 0 {
		t.Errorf("Allow and AllowN on an existing key: %v allocations", a)
	}
}

// slOracle keeps every allowed instant per key in a plain slice.
type slOracle struct {
	limit int
	w     int64
	log   map[string][]int64
}

func newSLOracle(limit int, w int64) *slOracle {
	return &slOracle{limit: limit, w: w, log: map[string][]int64{}}
}

// count returns how many of key's events lie in (t−W, t].
func (o *slOracle) count(key string, t int64) int {
	c := 0
	for _, x := range o.log[key] {
		if t-o.w < x && x <= t {
			c++
		}
	}
	return c
}

func (o *slOracle) allowN(key string, t int64, n int) Decision {
	d := Decision{Limit: o.limit, Allowed: o.count(key, t)+n <= o.limit}
	if d.Allowed {
		for range n {
			o.log[key] = append(o.log[key], t)
		}
	} else {
		// The count only falls when an event leaves: try those instants.
		var when []int64
		for _, x := range o.log[key] {
			if x+o.w > t {
				when = append(when, x+o.w)
			}
		}
		slices.Sort(when)
		for _, u := range when {
			if o.count(key, u)+n <= o.limit {
				d.RetryAfter = time.Duration(u - t)
				break
			}
		}
	}
	d.Remaining = o.limit - o.count(key, t)
	if l := o.log[key]; len(l) > 0 && l[len(l)-1]+o.w > t {
		d.ResetAfter = time.Duration(l[len(l)-1] + o.w - t)
	}
	return d
}

// Whatever the mix of Allow, AllowN, Reserve and Cancel, and however the
// clock jumps back, no interval (t−W, t] ever holds more than L events that
// happen.
func TestSlidingLogNeverExceeds(t *testing.T) {
	const limit, w = 5, int64(1000)
	for _, seed := range winSeeds {
		rng := winRand(seed)
		sl, clock := newTestSlidingLog(t, Per(limit, time.Duration(w)), winT0)
		events := playMixed(t, sl, clock, winTrace(rng, 3000, winT0.UnixNano(), w, limit), w, rng)
		for key, in := range winMaxInWindow(events, w) {
			if in > limit {
				t.Fatalf("seed %d: key %q: %d events within %dns", seed, key, in, w)
			}
		}
	}
}

// winMaxInWindow returns, per key, the most events in any interval
// (t−w, t].
func winMaxInWindow(events []winEvent, w int64) map[string]int {
	byKey := map[string][]winEvent{}
	for _, e := range events {
		byKey[e.key] = append(byKey[e.key], e)
	}
	most := map[string]int{}
	for key, evs := range byKey {
		slices.SortFunc(evs, func(a, b winEvent) int { return cmp.Compare(a.t, b.t) })
		// The busiest interval ends at an event: slide its start.
		in, lo := 0, 0
		for hi := range evs {
			in += evs[hi].n
			for evs[lo].t <= evs[hi].t-w {
				in -= evs[lo].n
				lo++
			}
			// Events at the same instant as hi after it count too.
			extra := 0
			for k := hi + 1; k < len(evs) && evs[k].t == evs[hi].t; k++ {
				extra += evs[k].n
			}
			most[key] = max(most[key], in+extra)
		}
	}
	return most
}
