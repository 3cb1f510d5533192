package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"
)

func newTestSlidingCounter(t *testing.T, rate Rate, start time.Time, opts ...Option) (*SlidingWindowCounter, *ManualClock) {
	t.Helper()
	clock := NewManualClock(start)
	sc, err := NewSlidingWindowCounter(rate, append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return sc, clock
}

// With L = 10 per second and 10 events in [0, 1s), the previous window
// weighs 10·(1−e) at e into [1s, 2s): room for ⌊10·e⌋ − cur.
func TestSlidingCounterWeighting(t *testing.T) {
	const ms, ns = time.Millisecond, time.Nanosecond
	sc, clock := newTestSlidingCounter(t, PerSecond(10), winT0)
	runWinTimeline(t, sc, clock, winT0, []winRow{
		{at: 0, key: "k", n: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		// e = 0: the previous window weighs all 10. One event fits once
		// its weight is 9: at e = 0.1s.
		{at: time.Second, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: time.Second}},
		{at: time.Second, key: "k", n: 1, want: Decision{RetryAfter: 100 * ms, ResetAfter: time.Second}},
		{at: 1100*ms - ns, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: 1100 * ms, key: "k", op: winAllow, want: Decision{Allowed: true}},
		// e = 1/4: weight 7.5, so room for 10 − 1 − ⌈7.5⌉ = 1.
		{at: 1250 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 1750 * ms}},
		{at: 1250 * ms, key: "k", n: 2, want: Decision{Remaining: 1, RetryAfter: 50 * ms, ResetAfter: 1750 * ms}},
		{at: 1250 * ms, key: "k", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1750 * ms}},
		// e = 1/2: weight 5: room for 10 − 2 − 5 = 3.
		{at: 1500 * ms, key: "k", n: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		// e = 0.9: weight 1: room for 10 − 5 − 1 = 4.
		{at: 1900 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 4, ResetAfter: 1100 * ms}},
		// e = 0.9 + 1ns: weight 1 − 10ns/s, still rounded up to a whole 1.
		{at: 1900*ms + ns, key: "k", n: 5, want: Decision{Remaining: 4, RetryAfter: 100*ms - ns, ResetAfter: 1100*ms - ns}},
		{at: 1900*ms + ns, key: "k", n: 4, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1100*ms - ns}},
		// [1s, 2s) counted 9, the previous window of [2s, 3s): weight 9·(1−e).
		{at: 2 * time.Second, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		{at: 2500 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 5, ResetAfter: 500 * ms}},
		// Two windows after the last event the key is at rest.
		{at: 3 * time.Second, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 10}},

		// A window filled early (no previous) makes the next one wait:
		// 1 more fits once [0, 1s)'s weight is 9, at 1.1s.
		{at: 0, key: "q", n: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		{at: 500 * ms, key: "q", n: 1, want: Decision{RetryAfter: 600 * ms, ResetAfter: 1500 * ms}},
		{at: 1100*ms - ns, key: "q", n: 1, want: Decision{RetryAfter: ns, ResetAfter: 900*ms + ns}},
		{at: 1100 * ms, key: "q", n: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1900 * ms}},
	})
}

func TestSlidingCounterReserveCancel(t *testing.T) {
	const ms = time.Millisecond
	sc, clock := newTestSlidingCounter(t, PerSecond(10), winT0)
	runWinTimeline(t, sc, clock, winT0, []winRow{
		{at: 0, key: "k", n: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		// Reservation 0: 5 do not fit in [0, 1s); in [1s, 2s) they fit
		// once the weight of [0, 1s) is 5, at 1.5s.
		{at: 500 * ms, key: "k", n: 5, op: winReserve, ok: true, want: Decision{RetryAfter: time.Second, ResetAfter: 2500 * ms}},
		// Behind it: 1 more fits at 1.6s. [0, 1s) is closed.
		{at: 500 * ms, key: "k", n: 1, want: Decision{RetryAfter: 1100 * ms, ResetAfter: 2500 * ms}},
		{at: 600 * ms, key: "k", n: 1, op: winReserve, ok: true, want: Decision{RetryAfter: time.Second, ResetAfter: 2400 * ms}},
		// Cancelling reservation 0 takes its 5 off [1s, 2s); reservation 1
		// keeps its place.
		{at: 700 * ms, op: winCancel, res: 0},
		{at: 700 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2300 * ms}},
		{at: 700 * ms, key: "k", n: 4, want: Decision{RetryAfter: 800 * ms, ResetAfter: 2300 * ms}},
		// Cancelled at its very instant, reservation 1 is given back too.
		{at: 1600 * ms, op: winCancel, res: 1},
		{at: 1600 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 6, ResetAfter: 400 * ms}},

		// A booking in the next window moves the key there; cancelling one
		// made before it, in the window before, takes it off that
		// window's count, now the previous one.
		{at: 0, key: "p", n: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		{at: time.Second, key: "p", n: 2, op: winReserve, ok: true, want: Decision{RetryAfter: 200 * ms, ResetAfter: 2 * time.Second}},
		{at: time.Second, key: "p", n: 9, op: winReserve, ok: true, want: Decision{RetryAfter: 1500 * ms, ResetAfter: 3 * time.Second}},
		{at: 1100 * ms, op: winCancel, res: 2},
		{at: 1100 * ms, key: "p", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2900 * ms}},
		// At 2s, [1s, 2s) counts nothing: 10 − 9 = 1 fits (not 10 − 9 − 2).
		{at: 2 * time.Second, key: "p", n: 0, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}},

		// Cancelling after the booked instant gives nothing back.
		{at: 0, key: "c", n: 4, op: winReserve, ok: true, want: Decision{Allowed: true, Remaining: 6, ResetAfter: 2 * time.Second}},
		{at: 1, op: winCancel, res: 4},
		{at: 1, key: "c", n: 0, want: Decision{Allowed: true, Remaining: 6, ResetAfter: 2*time.Second - 1}},
	})
}

func TestSlidingCounterBackwardsClock(t *testing.T) {
	const ms = time.Millisecond
	sc, clock := newTestSlidingCounter(t, PerSecond(10), winT0)
	runWinTimeline(t, sc, clock, winT0, []winRow{
		{at: 1500 * ms, key: "k", n: 4, want: Decision{Allowed: true, Remaining: 6, ResetAfter: 1500 * ms}},
		// Back into [0, 1s): the key's window is [1s, 2s); nothing
		// conforms before it opens.
		{at: 500 * ms, key: "k", n: 1, want: Decision{RetryAfter: 500 * ms, ResetAfter: 2500 * ms}},
		{at: 500 * ms, key: "k", op: winAllow, want: Decision{Allowed: false}},
		{at: 500 * ms, key: "k", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2500 * ms}},

		// Back within a window: the previous window weighs more at the
		// earlier instant, so less fits, never more.
		{at: 500 * ms, key: "w", n: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{at: 1900 * ms, key: "w", n: 9, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1100 * ms}},
		{at: 1200 * ms, key: "w", n: 0, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 1800 * ms}},
		{at: 1200 * ms, key: "w", n: 1, want: Decision{RetryAfter: 800 * ms, ResetAfter: 1800 * ms}},
		{at: 1200 * ms, key: "w", op: winAllow, want: Decision{Allowed: false}},
	})
}

// The worst case of the approximation: L events in the last nanosecond of
// a window whose predecessor was empty, then L − ⌈2L/W⌉ more by 2ns before
// the end of the next window. The interval (t−W, t] ending there holds
// 2L − ⌈2L/W⌉ events: the documented bound, reached.
func TestSlidingCounterWorstCaseReached(t *testing.T) {
	ctx := context.Background()
	for _, p := range []struct {
		limit int
		w     int64
	}{{10, int64(time.Second)}, {100, int64(time.Minute)}, {4, 3}, {5, 7}, {3, 2}, {7, 10}, {1, 5}, {6, 1}} {
		t.Run(fmt.Sprintf("L=%d/W=%d", p.limit, p.w), func(t *testing.T) {
			w, limit := p.w, int64(p.limit)
			bound := swcBound(p.limit, w)
			start := windowStart(winT0.UnixNano(), w) + 5*w
			sc, clock := newTestSlidingCounter(t, Per(limit, time.Duration(w)), time.Unix(0, start))
			var events []winEvent
			allow := func(at int64, n int) {
				t.Helper()
				clock.Set(time.Unix(0, at))
				if d, _ := sc.AllowN(ctx, "k", n); !d.Allowed {
					t.Fatalf("AllowN(%d) at %d: %+v", n, at, d)
				}
				events = append(events, winEvent{t: at, key: "k", n: n})
			}
			t1 := start + w - 1
			allow(t1, p.limit)
			if w >= 2 {
				t2 := t1 + w - 1
				m := p.limit - (2*p.limit+int(w)-1)/int(w) // L − ⌈2L/W⌉
				allow(t2, m)
				if d, _ := sc.AllowN(ctx, "k", 1); d.Allowed {
					t.Fatalf("AllowN(1) at %d after %d: allowed beyond the estimate", t2, m)
				}
			}
			if got := winMaxInWindow(events, w)["k"]; got != bound {
				t.Fatalf("%d events in an interval of length W, want the bound %d", got, bound)
			}
		})
	}
}

// swcBound is the documented bound: at most 2L − ⌈2L/W⌉ events in any
// interval of length W (L when W is 1ns).
func swcBound(limit int, w int64) int {
	if w < 2 {
		return limit
	}
	return 2*limit - int((2*int64(limit)+w-1)/w)
}

// A greedy adversary takes every event the counter will allow, at
// instants chosen to bunch them at window edges; however it plays, no
// interval of length W holds more than the bound.
func TestSlidingCounterWorstCaseNeverExceeded(t *testing.T) {
	ctx := context.Background()
	for _, p := range []struct {
		limit int
		w     int64
	}{{10, 1000}, {4, 3}, {5, 7}, {3, 2}, {7, 10}, {1, 5}, {6, 1}, {9, 50}} {
		t.Run(fmt.Sprintf("L=%d/W=%d", p.limit, p.w), func(t *testing.T) {
			w := p.w
			bound := swcBound(p.limit, w)
			reached := false
			for _, seed := range winSeeds {
				rng := winRand(seed)
				at := windowStart(winT0.UnixNano(), w)
				sc, clock := newTestSlidingCounter(t, Per(int64(p.limit), time.Duration(w)), time.Unix(0, at))
				var events []winEvent
				for range 3000 {
					switch r := rng.IntN(10); {
					case r < 3: // the last instant of this window or the next
						at = windowStart(at, w) + w - 1 + w*rng.Int64N(2)
					case r < 5: // 2ns before the end of this window or the next
						at = max(at, windowStart(at, w)+w-2+w*rng.Int64N(2))
					case r < 7:
						at += rng.Int64N(w + 1)
					case r < 8: // skip a window, emptying the previous one
						at += 2 * w
					}
					clock.Set(time.Unix(0, at))
					peek, _ := sc.AllowN(ctx, "k", 0)
					if peek.Remaining == 0 {
						continue
					}
					n := peek.Remaining
					if rng.IntN(3) == 0 {
						n = rng.IntN(n) + 1
					}
					if d, _ := sc.AllowN(ctx, "k", n); !d.Allowed {
						t.Fatalf("AllowN(%d) denied after a peek saying %+v", n, peek)
					}
					events = append(events, winEvent{t: at, key: "k", n: n})
				}
				got := winMaxInWindow(events, w)["k"]
				if got > bound {
					t.Fatalf("seed %d: %d events in an interval of length W, above the bound %d", seed, got, bound)
				}
				reached = reached || got == bound
			}
			if !reached {
				t.Errorf("the adversary never reached the bound %d: is the bound tight, or the adversary weak?", bound)
			}
		})
	}
}

func TestNewSlidingCounterErrors(t *testing.T) {
	for _, tc := range []struct {
		rate Rate
		want error
	}{
		{Rate{}, ErrInvalidRate},
		{Per(0, time.Second), ErrInvalidRate},
		{Per(1, 0), ErrInvalidRate},
		{Per(-5, -time.Second), ErrInvalidRate},
		{Per(1, time.Duration(maxSpan)+1), ErrInvalidRate},
	} {
		if _, err := NewSlidingWindowCounter(tc.rate); !errors.Is(err, tc.want) {
			t.Errorf("NewSlidingWindowCounter(%v): %v, want %v", tc.rate, err, tc.want)
		}
	}
	if _, err := NewSlidingWindowCounter(PerSecond(1), WithMaxKeys(-1)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewSlidingWindowCounter(WithMaxKeys(-1)): %v, want ErrInvalidOption", err)
	}
}

// At the largest limit and window the 128-bit products neither overflow
// nor lose a unit.
func TestSlidingCounterExtremes(t *testing.T) {
	ctx := context.Background()
	w := maxSpan
	start := windowStart(winT0.UnixNano(), w) + w // the start of a window
	sc, clock := newTestSlidingCounter(t, Per(math.MaxInt64, time.Duration(w)), time.Unix(0, start-1))
	if d, _ := sc.AllowN(ctx, "k", math.MaxInt); !d.Allowed {
		t.Fatalf("AllowN(MaxInt) = %+v", d)
	}
	// At the start of the next window the previous one weighs all L:
	// nothing fits. 1ns in, it weighs L·(W−1)/W = L − 7.99…, so 7 fit:
	// 7·W <= L < 8·W.
	clock.Set(time.Unix(0, start))
	if d, _ := sc.AllowN(ctx, "k", 1); d.Allowed || d.Remaining != 0 || d.RetryAfter != 1 {
		t.Fatalf("at the start of the next window: %+v, want denied, RetryAfter 1ns", d)
	}
	clock.Set(time.Unix(0, start+1))
	if d, _ := sc.AllowN(ctx, "k", 0); d.Remaining != 7 {
		t.Fatalf("1ns into the next window: %+v, want Remaining 7", d)
	}
	if d, _ := sc.AllowN(ctx, "k", 7); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(7) 1ns into the next window: %+v, want allowed", d)
	}
	if d, _ := sc.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatalf("an 8th event 1ns into the next window: %+v, want denied", d)
	}
	checkExtremes(t, sc, clock, math.MaxInt)
}

// swcOracle counts allowed events per window in a map and evaluates the
// weighted estimate with math/big.
type swcOracle struct {
	limit int
	w     int64
	count map[string]map[int64]int
}

func newSWCOracle(limit int, w int64) *swcOracle {
	return &swcOracle{limit: limit, w: w, count: map[string]map[int64]int{}}
}

func (o *swcOracle) window(t int64) int64 {
	k := t / o.w
	if t%o.w < 0 {
		k--
	}
	return k
}

// fits reports whether n more events for key fit at t:
// prev·(W−e) + (cur+n)·W <= L·W.
func (o *swcOracle) fits(key string, t int64, n int) bool {
	k := o.window(t)
	e := t - k*o.w
	lhs := new(big.Int).Mul(big.NewInt(int64(o.count[key][k-1])), big.NewInt(o.w-e))
	lhs.Add(lhs, new(big.Int).Mul(big.NewInt(int64(o.count[key][k]+n)), big.NewInt(o.w)))
	rhs := new(big.Int).Mul(big.NewInt(int64(o.limit)), big.NewInt(o.w))
	return lhs.Cmp(rhs) <= 0
}

func (o *swcOracle) allowN(key string, t int64, n int) Decision {
	if o.count[key] == nil {
		o.count[key] = map[int64]int{}
	}
	k := o.window(t)
	d := Decision{Limit: o.limit, Allowed: o.fits(key, t, n)}
	if d.Allowed {
		o.count[key][k] += n
	} else {
		// Within a window the estimate only falls: binary search the
		// first instant that fits in this window, then in the next; two
		// windows on, nothing weighs.
		d.RetryAfter = time.Duration((k+2)*o.w - t)
		for _, lo := range []int64{t, (k + 1) * o.w} {
			hi := o.window(lo)*o.w + o.w
			if !o.fits(key, hi-1, n) {
				continue
			}
			for lo < hi-1 {
				mid := lo + (hi-1-lo)/2
				if o.fits(key, mid, n) {
					hi = mid + 1
				} else {
					lo = mid + 1
				}
			}
			d.RetryAfter = time.Duration(lo - t)
			break
		}
	}
	for m := o.limit; m >= 0; m-- {
		if o.fits(key, t, m) {
			d.Remaining = m
			break
		}
	}
	switch {
	case o.count[key][k] > 0:
		d.ResetAfter = time.Duration((k+2)*o.w - t)
	case o.count[key][k-1] > 0:
		d.ResetAfter = time.Duration((k+1)*o.w - t)
	}
	return d
}

// Whatever the mix of Allow, AllowN, Reserve and Cancel, and however the
// clock jumps back, no interval of length W holds more than the bound.
func TestSlidingCounterNeverExceeds(t *testing.T) {
	const limit, w = 5, int64(1000)
	for _, seed := range winSeeds {
		rng := winRand(seed)
		sc, clock := newTestSlidingCounter(t, Per(limit, time.Duration(w)), winT0)
		events := playMixed(t, sc, clock, winTrace(rng, 3000, winT0.UnixNano(), w, limit), w, rng)
		for key, in := range winMaxInWindow(events, w) {
			if in > swcBound(limit, w) {
				t.Fatalf("seed %d: key %q: %d events within %dns, above the bound %d", seed, key, in, w, swcBound(limit, w))
			}
		}
	}
}
