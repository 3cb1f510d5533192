package ratelimit

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func newTestFixedWindow(t *testing.T, rate Rate, start time.Time, opts ...Option) (*FixedWindow, *ManualClock) {
	t.Helper()
	clock := NewManualClock(start)
	fw, err := NewFixedWindow(rate, append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return fw, clock
}

func TestFixedWindowTimeline(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	fw, clock := newTestFixedWindow(t, PerSecond(3), winT0)
	runWinTimeline(t, fw, clock, winT0, []winRow{
		{at: 0, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 2, ResetAfter: time.Second}},
		{at: 400 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 2, ResetAfter: 600 * ms}},
		// 3 do not fit in this window: they could next window, 600ms on.
		{at: 400 * ms, key: "k", n: 3, want: Decision{Remaining: 2, RetryAfter: 600 * ms, ResetAfter: 600 * ms}},
		{at: time.Second - ns, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: ns}},
		{at: time.Second - ns, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: time.Second - ns, key: "k", n: 1, want: Decision{RetryAfter: ns, ResetAfter: ns}},
		// The window has passed: all of the limit again.
		{at: time.Second, key: "k", op: winAllow, want: Decision{Allowed: true}},
		{at: time.Second, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// Keys are independent.
		{at: time.Second, key: "other", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// A window or more later the key is back to full.
		{at: 5*time.Second + 10*ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 3}},
	})
}

// The fixed window's known weakness: the limit at the end of one window
// and the limit again at the start of the next, 2L events within 2ns.
func TestFixedWindowBoundaryDoubleBurst(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	fw, clock := newTestFixedWindow(t, PerMinute(100), winT0)
	runWinTimeline(t, fw, clock, winT0, []winRow{
		{at: time.Minute - ns, key: "k", n: 100, want: Decision{Allowed: true, Remaining: 0, ResetAfter: ns}},
		{at: time.Minute - ns, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: time.Minute, key: "k", n: 100, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Minute}},
		{at: time.Minute, key: "k", n: 1, want: Decision{RetryAfter: time.Minute, ResetAfter: time.Minute}},
	})
}

func TestFixedWindowReserveCancel(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	fw, clock := newTestFixedWindow(t, PerSecond(3), winT0)
	runWinTimeline(t, fw, clock, winT0, []winRow{
		{at: 0, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		// Reservation 0: 2 do not fit in [0, 1s): booked at the start of [1s, 2s).
		{at: 100 * ms, key: "k", n: 2, op: winReserve, ok: true, want: Decision{RetryAfter: 900 * ms, ResetAfter: 1900 * ms}},
		// [0, 1s) still had room for 1, but the booking closed it: first
		// come, first served. The event would conform at 1s.
		{at: 200 * ms, key: "k", n: 1, want: Decision{RetryAfter: 800 * ms, ResetAfter: 1800 * ms}},
		{at: 200 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
		// Reservation 1: the last place in [1s, 2s).
		{at: 200 * ms, key: "k", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: 800 * ms, ResetAfter: 1800 * ms}},
		// Reservation 2: [1s, 2s) is full, so [2s, 3s).
		{at: 300 * ms, key: "k", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: 1700 * ms, ResetAfter: 2700 * ms}},
		// Cancelling reservation 1 gives nothing back: its window [1s, 2s)
		// is no longer the key's window, and its count is forgotten.
		{at: 300 * ms, op: winCancel, res: 1},
		{at: 300 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2700 * ms}},
		// Cancelling reservation 2 gives its event back: [2s, 3s) counts
		// nothing, but stays the key's window, closed until it opens.
		{at: 400 * ms, op: winCancel, res: 2},
		{at: 400 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1600 * ms}},
		{at: 400 * ms, key: "k", n: 3, want: Decision{RetryAfter: 1600 * ms, ResetAfter: 1600 * ms}},
		{at: 2 * time.Second, key: "k", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},

		// A booking for now, cancelled at once, is given back whole.
		{at: 2 * time.Second, key: "c", n: 3, op: winReserve, ok: true, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: 2 * time.Second, op: winCancel, res: 3},
		{at: 2 * time.Second, key: "c", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		// A booking cancelled at its very instant has not been spent yet.
		{at: 2 * time.Second, key: "c", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: time.Second, ResetAfter: 2 * time.Second}},
		{at: 3 * time.Second, op: winCancel, res: 4},
		{at: 3 * time.Second, key: "c", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},

		// A booking cancelled 1ns after its instant was spent: nothing back.
		{at: 3 * time.Second, key: "d", n: 1, op: winReserve, ok: true, want: Decision{Allowed: true, Remaining: 2, ResetAfter: time.Second}},
		{at: 3*time.Second + ns, op: winCancel, res: 5},
		{at: 3*time.Second + ns, key: "d", n: 3, want: Decision{Remaining: 2, RetryAfter: time.Second - ns, ResetAfter: time.Second - ns}},
	})
}

func TestFixedWindowBackwardsClock(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	fw, clock := newTestFixedWindow(t, PerSecond(3), winT0)
	runWinTimeline(t, fw, clock, winT0, []winRow{
		{at: 1500 * ms, key: "k", n: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 500 * ms}},
		// The clock goes back into [0, 1s): the key's window is still
		// [1s, 2s), which has room for 1, but not before it opens.
		{at: 500 * ms, key: "k", n: 1, want: Decision{RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{at: 500 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: 500 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		// Forward again, but still before 1.5s: inside [1s, 2s) it counts.
		{at: 1200 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 800 * ms}},
		// Far back, before the epoch of the test: nothing freed.
		{at: -ns, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2*time.Second + ns}},
		{at: -ns, key: "k", n: 1, want: Decision{RetryAfter: 2*time.Second + ns, ResetAfter: 2*time.Second + ns}},
		// A key the store has not seen starts in the window of the clock.
		{at: 500 * ms, key: "new", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 500 * ms}},
		{at: 2 * time.Second, key: "k", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
	})
}

// windowStart rounds down with floor division, also below zero (the
// limiters see instants from 1970 on, but the function is exact anyway).
func TestWindowStart(t *testing.T) {
	minute, t0 := int64(time.Minute), winT0.UnixNano()
	for _, tc := range []struct{ t, w, want int64 }{
		{0, 10, 0}, {9, 10, 0}, {10, 10, 10}, {11, 10, 10},
		{-1, 10, -10}, {-10, 10, -10}, {-11, 10, -20},
		{t0, minute, t0}, {t0 + minute - 1, minute, t0}, {t0 - 1, minute, t0 - minute},
		{maxNanos, maxSpan, maxNanos}, {maxNanos - 1, maxSpan, maxNanos - maxSpan},
		{t0, 1, t0}, {t0, 7, t0 - t0%7},
	} {
		if got := windowStart(tc.t, tc.w); got != tc.want {
			t.Errorf("windowStart(%d, %d) = %d, want %d", tc.t, tc.w, got, tc.want)
		}
	}
}

func TestNewFixedWindowErrors(t *testing.T) {
	for _, tc := range []struct {
		rate Rate
		opts []Option
		want error
	}{
		{Rate{}, nil, ErrInvalidRate},
		{Per(0, time.Second), nil, ErrInvalidRate},
		{Per(-1, time.Second), nil, ErrInvalidRate},
		{Per(1, 0), nil, ErrInvalidRate},
		{Per(1, -time.Second), nil, ErrInvalidRate},
		{Per(1, time.Duration(maxSpan)+1), nil, ErrInvalidRate},
		{PerSecond(1), []Option{WithShards(3)}, ErrInvalidOption},
	} {
		if _, err := NewFixedWindow(tc.rate, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("NewFixedWindow(%v): %v, want %v", tc.rate, err, tc.want)
		}
	}
	if _, err := NewFixedWindow(Per(math.MaxInt64, time.Duration(maxSpan))); err != nil {
		t.Errorf("NewFixedWindow at the extremes: %v", err)
	}
}

func TestFixedWindowExtremes(t *testing.T) {
	fw, clock := newTestFixedWindow(t, Per(math.MaxInt64, time.Duration(maxSpan)), winT0)
	checkExtremes(t, fw, clock, math.MaxInt)
}

// fwOracle counts allowed events per window index in a map.
type fwOracle struct {
	limit int
	w     int64
	count map[string]map[int64]int
}

func newFWOracle(limit int, w int64) *fwOracle {
	return &fwOracle{limit: limit, w: w, count: map[string]map[int64]int{}}
}

func (o *fwOracle) allowN(key string, t int64, n int) Decision {
	if o.count[key] == nil {
		o.count[key] = map[int64]int{}
	}
	k := t / o.w
	if t%o.w < 0 {
		k--
	}
	end := (k + 1) * o.w
	d := Decision{Limit: o.limit, Allowed: o.count[key][k]+n <= o.limit}
	if d.Allowed {
		o.count[key][k] += n
	} else {
		d.RetryAfter = time.Duration(end - t) // the next window
	}
	d.Remaining = o.limit - o.count[key][k]
	if o.count[key][k] > 0 {
		d.ResetAfter = time.Duration(end - t)
	}
	return d
}

// Whatever the mix of Allow, AllowN, Reserve and Cancel, and however the
// clock jumps back, no window ever holds more than L events that happen.
func TestFixedWindowNeverExceeds(t *testing.T) {
	const limit, w = 5, int64(1000)
	for _, seed := range winSeeds {
		rng := winRand(seed)
		fw, clock := newTestFixedWindow(t, Per(limit, time.Duration(w)), winT0)
		events := playMixed(t, fw, clock, winTrace(rng, 3000, winT0.UnixNano(), w, limit), w, rng)
		perWindow := map[string]map[int64]int{}
		for _, e := range events {
			if perWindow[e.key] == nil {
				perWindow[e.key] = map[int64]int{}
			}
			k := windowStart(e.t, w)
			if perWindow[e.key][k] += e.n; perWindow[e.key][k] > limit {
				t.Fatalf("seed %d: key %q: %d events in window [%d, %d)", seed, e.key, perWindow[e.key][k], k, k+w)
			}
		}
	}
}

// playMixed plays trace with a random mix of Allow, AllowN, Reserve and
// Cancel, with the clock sometimes moved back by up to two windows, and
// returns the events that happen: those allowed, and those booked and not
// cancelled before their time.
func playMixed(t *testing.T, lim winLimiter, clock *ManualClock, trace []winEvent, w int64, rng interface{ IntN(int) int }) []winEvent {
	t.Helper()
	ctx := context.Background()
	type booking struct {
		r  *Reservation
		ev winEvent
	}
	var happened []winEvent
	var pending []booking
	backwards := 0
	for _, ev := range trace {
		now := ev.t
		if rng.IntN(20) == 0 {
			now -= int64(rng.IntN(int(2 * w)))
			backwards++
		}
		clock.Set(time.Unix(0, now))
		switch p := rng.IntN(10); {
		case p < 4:
			if d, _ := lim.AllowN(ctx, ev.key, ev.n); d.Allowed && ev.n > 0 {
				happened = append(happened, winEvent{t: now, key: ev.key, n: ev.n})
			}
		case p < 6:
			if lim.Allow(ev.key) {
				happened = append(happened, winEvent{t: now, key: ev.key, n: 1})
			}
		case p < 9:
			r, err := lim.Reserve(ctx, ev.key, ev.n)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK() && ev.n > 0 {
				pending = append(pending, booking{r, winEvent{t: r.TimeToAct().UnixNano(), key: ev.key, n: ev.n}})
			}
		default:
			if len(pending) > 0 {
				j := rng.IntN(len(pending))
				b := pending[j]
				if b.r.TimeToAct().UnixNano() < now { // due: it happened
					happened = append(happened, b.ev)
				}
				b.r.Cancel()
				pending = append(pending[:j], pending[j+1:]...)
			}
		}
	}
	for _, b := range pending {
		happened = append(happened, b.ev)
	}
	if backwards == 0 || len(happened) < len(trace)/4 {
		t.Fatalf("trace too tame: %d steps back, %d of %d events happened", backwards, len(happened), len(trace))
	}
	return happened
}
