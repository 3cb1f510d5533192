package ratelimit

import (
	"context"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

// Long runs: every algorithm, 10⁷ events on a fake time line at four rates
// (10 per 13 s, 1 per day, 10⁶ per second, 3 per second), driven through
// each algorithm's pure step (no clock, no store, no locks: 10⁷ steps take
// a fraction of a second). Each scenario states, as closed forms in the
// event's rank k and the parameters:
//   - due(k), the earliest instant at which the k-th acceptance (from 0)
//     may happen: every arrival before it must be refused, every arrival at
//     or after it accepted (until the k-th is);
//   - the instant the k-th accepted event acts at;
//   - the number of events accepted by an instant.
//
// Every arrival is checked against the first two and the count at regular
// checkpoints and at the end, so a drift of one nanosecond or one event
// anywhere in the run fails. The expected values never come from replaying
// the algorithm: each builder's comment works out its formulas.
//
// Demand is saturating: after a burst at T0 (2026-01-01), arrivals come one
// at a time with gaps no longer than the rate's interval P/N (capped so
// that 10⁷ gaps stay within the limiter's clock range, which ends in 2116),
// and the run ends with another burst. Half the gaps are random; the other
// half, when the next acceptance is due within reach, land 1 ns before it
// and exactly on it, so that every boundary is tried to the nanosecond.
// With gaps that short every acceptance that falls due is taken by the next
// arrival, before the next one falls due, which is what makes the closed
// forms exact. Two scenarios use a regular grid of arrivals instead, on
// which the algorithm's count depends on the grid.
//
// The Allow and Reserve scenarios run a second time through the limiter's
// own methods (Allow is a hand-written hot path), with its store and a
// ManualClock, on fewer events, against the same closed forms.
//
// Size: 10⁷ events for one mode of each algorithm at each rate, 10⁶ for
// the others (but 10⁷ for the windows at 10⁶ per second, whose bursts alone
// take 10⁶), 2·10⁵ through the limiter's methods: about 10 s of CPU, half
// that on two cores. Under the race detector or with -short, a tenth of
// that, and the windows at 10⁶ per second are left out, so that the file
// takes about 15 s under -race on two cores (raceEnabled is set by
// race_test.go and norace_test.go).

func longRunEvents() (pure, api int64) {
	if raceEnabled || testing.Short() {
		return 1_000_000, 20_000
	}
	return 10_000_000, 200_000
}

// lrT0 is where every long run starts.
var lrT0 = epoch.UnixNano()

// lrMaxGap caps the gap between arrivals, so that 10⁷ of them (1.5·10¹⁸ ns,
// 47 years, at most) end within the clock's range.
const lrMaxGap = 150 * int64(time.Second)

// lrRates are the rates of the long runs, each with the capacity of the
// buckets. The closed forms of the buckets need a capacity of at least 2
// (see lrTokenBucket).
var lrRates = []struct {
	name     string
	rate     Rate
	capacity int64
}{
	{"10per13s", Per(10, 13*time.Second), 3},
	{"1perday", PerDay(1), 2},
	{"1e6pers", PerSecond(1_000_000), 1000},
	{"3pers", PerSecond(3), 5},
}

// lrScenario is one algorithm in one mode under one demand, with the closed
// forms that predict it.
type lrScenario struct {
	name    string
	maxWait int64 // 0: Allow; > 0: Wait with a deadline maxWait away; < 0: Reserve
	// Arrivals: burst0 at T0, then instants separated by gaps of at most
	// gap (exactly gap if fixed), per arrivals at each, then burstEnd more
	// at the last instant.
	burst0, burstEnd, per int64
	gap                   int64
	fixed                 bool
	// due returns the earliest instant at which the k-th acceptance (from
	// 0) may happen; lrLongAgo if it may happen at any instant of the run.
	due func(k int64) int64
	// act returns the instant at which the k-th accepted event acts,
	// accepted at now, and false if it should not have been accepted then
	// for a reason due does not cover.
	act func(k, now int64) (act int64, ok bool)
	// count returns how many events are accepted by the end of the instant
	// E after T0: after every instant if anytime, else after the last one.
	count   func(E int64) int64
	anytime bool
	// horizon is how far after the last instant the algorithm may book.
	horizon int64
	pure    func() lrDriver
	// api builds the limiter on clk for the run through its Allow or
	// Reserve method; nil if this mode has no such run.
	api func(t *testing.T, clk *ManualClock) lrDriver
}

// lrLongAgo is a due instant before the run.
const lrLongAgo = minNanos

// lrDriver makes one event happen at now and says when it acts, if at all.
type lrDriver interface {
	step(now, maxWait int64) (act int64, ok bool)
}

type lrPure struct{ s fuzzStepper }

func (p lrPure) step(now, maxWait int64) (int64, bool) {
	_, b, ok := p.s.step(now, 1, maxWait)
	return b.act, ok
}

// lrAllow runs Allow on one key of a limiter on a ManualClock.
type lrAllow struct {
	clk   *ManualClock
	allow func(key string) bool
}

func (d lrAllow) step(now, _ int64) (int64, bool) {
	if d.clk.Now().UnixNano() != now {
		d.clk.Set(time.Unix(0, now))
	}
	return now, d.allow("k")
}

// lrReserve runs Reserve on one key of a limiter on a ManualClock.
type lrReserve struct {
	clk *ManualClock
	lim Limiter
}

func (d lrReserve) step(now, _ int64) (int64, bool) {
	if d.clk.Now().UnixNano() != now {
		d.clk.Set(time.Unix(0, now))
	}
	r, err := d.lim.Reserve(context.Background(), "k", 1)
	if err != nil {
		panic(err)
	}
	return r.TimeToAct().UnixNano(), r.OK()
}

// lrFloor returns ⌊a·b/c⌋ and lrCeil ⌈a·b/c⌉, for a, b >= 0 and c > 0, in
// 128 bits: the products of the long runs pass 2⁶³.
func lrFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

func lrCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r > 0 {
		q++
	}
	return int64(q)
}

// lrTokenBucket: a token bucket of capacity C ≥ 2 at interval I = P/N, each
// arrival asking for one token with a wait of at most M (M = 0: Allow).
//
// Closed forms. While the bucket's theoretical arrival time TAT is not
// before any arrival, TAT = T0 + k·I after k acceptances, and the k-th
// (from 0) conforms by t + M iff T0 + (k+1−C)·I <= t + M: it is due at
// T0 − M + ⌈(k+1−C)·I⌉ and acts at max(t, T0 + ⌈(k+1−C)·I⌉). These
// instants are I apart and arrivals at most I apart, so each is taken
// before the next falls due, and after the arrival at T0 + E the count is
// C + ⌊(E+M)·N/P⌋, at every instant; the first burst takes the
// C + ⌊M·N/P⌋ acceptances due by T0.
//
// Why TAT is not before an arrival t: after an acceptance at t',
// TAT >= t' + I >= t; after a refusal TAT > t' + (C−1)·I + M >= t' + I >= t,
// for C >= 2. (With C = 1 a refusal shows only TAT > t': the bucket may
// sit full between arrivals and waste what it would have refilled.)
func lrTokenBucket(rate Rate, capacity, maxWait int64) lrScenario {
	p, n, c, m := int64(rate.Period), rate.N, capacity, maxWait
	alg, err := newTBParams(rate, int(capacity))
	if err != nil {
		panic(err) // the rates above are valid
	}
	sc := lrScenario{
		maxWait:  m,
		burst0:   c + lrFloor(m, n, p) + 1,
		burstEnd: c,
		per:      1,
		gap:      min(p/n, lrMaxGap),
		due: func(k int64) int64 {
			if j := k + 1 - c; j > 0 {
				return lrT0 - m + lrCeil(j, p, n)
			}
			return lrLongAgo
		},
		act: func(k, now int64) (int64, bool) {
			if j := k + 1 - c; j > 0 {
				return max(now, lrT0+lrCeil(j, p, n)), true
			}
			return now, true
		},
		count:   func(e int64) int64 { return c + lrFloor(e+m, n, p) },
		anytime: true,
		horizon: m,
		pure:    func() lrDriver { return lrPure{&stateStepper[tbState]{a: alg, fresh: true}} },
	}
	if m == 0 {
		sc.name = "TokenBucket/Allow"
		sc.api = func(t *testing.T, clk *ManualClock) lrDriver {
			tb, err := NewTokenBucket(rate, int(capacity), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrAllow{clk, tb.Allow}
		}
	} else {
		sc.name = "TokenBucket/Wait"
	}
	return sc
}

// lrLeakyBucket: a leaky bucket (a queue of C ≥ 2 slots of I = P/N), each
// arrival booking one slot by Wait with a deadline M away, or by Reserve
// (M < 0: no bound).
//
// Closed forms. While the queue's end Q is not before any arrival,
// Q = T0 + k·I after k bookings, and the k-th (from 0) acts at exactly
// T0 + ⌈k·I⌉. It is booked at the first arrival t at which it fits in the
// queue, T0 + (k+1)·I <= t + C·I, and its slot starts within the wait,
// T0 + k·I <= t + M: it is due at T0 + max(⌈(k+1−C)·I⌉, ⌈k·I⌉ − M) (the
// first term alone for Reserve). These instants are I apart, so after the
// arrival at T0 + E the count is min(C + ⌊E·N/P⌋, 1 + ⌊(E+M)·N/P⌋): the
// token bucket's admission when the wait is long enough.
//
// Why Q is not before an arrival t: after a booking at t', Q >= t' + I >= t;
// after a refusal for want of places, Q > t' + (C−1)·I >= t for C >= 2;
// after a refusal for the wait, Q > t' + M >= t for M at least the longest
// gap.
func lrLeakyBucket(rate Rate, capacity, maxWait int64) lrScenario {
	p, n, c, m := int64(rate.Period), rate.N, capacity, maxWait
	alg, err := newTBParams(rate, int(capacity))
	if err != nil {
		panic(err) // the rates above are valid
	}
	burst := c
	if m >= 0 {
		burst = min(c, 1+lrFloor(m, n, p))
	}
	sc := lrScenario{
		maxWait:  m,
		burst0:   burst + 1,
		burstEnd: c,
		per:      1,
		gap:      min(p/n, lrMaxGap),
		due: func(k int64) int64 {
			due := int64(lrLongAgo)
			if j := k + 1 - c; j > 0 {
				due = lrT0 + lrCeil(j, p, n)
			}
			if m >= 0 {
				due = max(due, lrT0+lrCeil(k, p, n)-m)
			}
			return due
		},
		act: func(k, now int64) (int64, bool) { return lrT0 + lrCeil(k, p, n), true },
		count: func(e int64) int64 {
			k := c + lrFloor(e, n, p)
			if m >= 0 {
				k = min(k, 1+lrFloor(e+m, n, p))
			}
			return k
		},
		anytime: true,
		horizon: max(m, c*(p/n+1)),
		pure:    func() lrDriver { return lrPure{&stateStepper[lbState]{a: (*lbParams)(alg), fresh: true}} },
	}
	if m < 0 {
		sc.name = "LeakyBucket/Reserve"
		sc.api = func(t *testing.T, clk *ManualClock) lrDriver {
			lb, err := NewLeakyBucket(rate, int(capacity), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrReserve{clk, lb}
		}
	} else {
		sc.name = "LeakyBucket/Wait"
	}
	return sc
}

// lrLeakyAllow: a leaky bucket's Allow on a regular grid of arrivals g
// apart, g = ⌊(⌈I⌉−1)/3⌋ for a slot I = P/N (or lrMaxGap): at these rates
// the third grid point after a success is 1 ns before the slot ends.
//
// Closed forms. Allow succeeds only on an empty queue, and then books the
// slot [t, t + I): the next success is at the first grid point at or after
// t + I, which is t + ⌈I/g⌉·g. The k-th success is due, and happens, at
// T0 + k·⌈P/(N·g)⌉·g, and after the arrival at T0 + E there have been
// 1 + ⌊E / (⌈P/(N·g)⌉·g)⌋. (Allow wastes the part of each slot before the
// next grid point: Wait is for that.) The capacity plays no part.
func lrLeakyAllow(rate Rate, capacity int64) lrScenario {
	p, n := int64(rate.Period), rate.N
	alg, err := newTBParams(rate, int(capacity))
	if err != nil {
		panic(err) // the rates above are valid
	}
	g := min((lrCeil(p, 1, n)-1)/3, lrMaxGap)
	period := lrCeil(p, 1, n*g) * g
	return lrScenario{
		name:     "LeakyBucket/AllowGrid",
		burst0:   2,
		burstEnd: 2,
		per:      1,
		gap:      g,
		fixed:    true,
		due:      func(k int64) int64 { return lrT0 + k*period },
		act:      func(k, now int64) (int64, bool) { return now, true },
		count:    func(e int64) int64 { return 1 + e/period },
		anytime:  true,
		horizon:  p / n,
		pure:     func() lrDriver { return lrPure{&stateStepper[lbState]{a: (*lbParams)(alg), fresh: true}} },
		api: func(t *testing.T, clk *ManualClock) lrDriver {
			lb, err := NewLeakyBucket(rate, int(capacity), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrAllow{clk, lb.Allow}
		},
	}
}

// lrFixedWindow: a fixed window of L = N events per window W = P, each
// arrival asking for one event with a wait of at most M (M = 0: Allow).
//
// Closed forms. Windows are [S_g, S_g + W) with S_g = (w0+g)·W,
// w0 = ⌊T0/W⌋. Under this demand every window takes exactly L events, in
// order: the k-th accepted (from 0) is in window g = ⌊k/L⌋, due at S_g − M
// (its booking must conform within the wait), and acts at max(t, S_g). The
// first burst fills every window with S_g <= T0 + M. After that, window g
// starts to fill at the first arrival at or after S_g − M (window g−1 is
// full by then) and, arrivals being at most W/L apart, has its L events by
// S_g − M + W, before it ends: no window is skipped or left part-empty. At
// the last instant T0 + E at most one window with S_g <= T0 + E + M is not
// yet full, and the closing burst of L fills it, so the count is
// L·(⌊(T0+E+M)/W⌋ − w0 + 1).
func lrFixedWindow(rate Rate, maxWait int64) lrScenario {
	l, w, m := rate.N, int64(rate.Period), maxWait
	w0 := lrT0 / w
	sc := lrScenario{
		maxWait:  m,
		burst0:   l*((lrT0+m)/w-w0+1) + 1,
		burstEnd: l + 1,
		per:      1,
		gap:      min(w/l, lrMaxGap),
		due:      func(k int64) int64 { return (w0+k/l)*w - m },
		act: func(k, now int64) (int64, bool) {
			s := (w0 + k/l) * w
			return max(now, s), now < s+w
		},
		count:   func(e int64) int64 { return l * ((lrT0+e+m)/w - w0 + 1) },
		horizon: m + w,
		pure: func() lrDriver {
			return lrPure{&stateStepper[fwState]{a: &fwParams{limit: l, window: w}, fresh: true}}
		},
	}
	if m == 0 {
		sc.name = "FixedWindow/Allow"
		sc.api = func(t *testing.T, clk *ManualClock) lrDriver {
			fw, err := NewFixedWindow(rate, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrAllow{clk, fw.Allow}
		}
	} else {
		sc.name = "FixedWindow/Wait"
	}
	return sc
}

// lrSlidingLog: a sliding log of L = N events per W = P, each arrival
// asking for one event with a wait of at most M >= W.
//
// Closed forms. The events go in groups of L: the k-th accepted (from 0)
// acts at A_g = T0 + g·W, g = ⌊k/L⌋, when the L-th event before it leaves
// the window, and is due at A_g − M. The first burst books group 0 at T0.
// Group g starts to be booked at the first arrival at or after A_g − M
// (group g−1 is complete by then) and, arrivals being at most W/L apart, is
// complete before A_g − M + W <= A_g: every booking is made before the
// instant it acts at, so it lands exactly on A_g. The closing burst
// completes the groups with T0 + E < A_g <= T0 + E + M (at most ⌈M/W⌉ of
// them), so the count is L·(1 + ⌊(E+M)/W⌋).
func lrSlidingLog(rate Rate, maxWait int64) lrScenario {
	l, w, m := rate.N, int64(rate.Period), maxWait
	return lrScenario{
		name:     "SlidingLog/Wait",
		maxWait:  m,
		burst0:   l + 1,
		burstEnd: l*((m+w-1)/w) + 1,
		per:      1,
		gap:      min(w/l, lrMaxGap),
		due:      func(k int64) int64 { return lrT0 + k/l*w - m },
		act:      func(k, now int64) (int64, bool) { return lrT0 + k/l*w, true },
		count:    func(e int64) int64 { return l * (1 + (e+m)/w) },
		horizon:  m + w,
		pure: func() lrDriver {
			return lrPure{&stateStepper[slState]{a: &slParams{limit: l, window: w}, fresh: true}}
		},
	}
}

// lrSlidingLogAllow: a sliding log's Allow on a regular grid, with L+1
// arrivals at each grid point, g = ⌊(W−1)/3⌋ apart for a window W = P (or
// lrMaxGap): at these rates the third grid point after the first burst is
// 1 ns before it leaves the window, except at 1 per day, where a grid point
// falls on the instant it leaves.
//
// Closed forms. At T0 the log takes L events and refuses the next; nothing
// more fits until those L leave the window (t−W, t], at t = T0 + W, and the
// first grid point then is T0 + ⌈W/g⌉·g, where L more are taken at once.
// The k-th success is due, and happens, at T0 + ⌊k/L⌋·⌈W/g⌉·g, and after
// the grid point at T0 + E there have been L·(1 + ⌊E / (⌈W/g⌉·g)⌋).
func lrSlidingLogAllow(rate Rate) lrScenario {
	l, w := rate.N, int64(rate.Period)
	g := min((w-1)/3, lrMaxGap)
	period := (w + g - 1) / g * g
	return lrScenario{
		name:     "SlidingLog/AllowGrid",
		burst0:   l + 1,
		burstEnd: l + 1,
		per:      l + 1,
		gap:      g,
		fixed:    true,
		due:      func(k int64) int64 { return lrT0 + k/l*period },
		act:      func(k, now int64) (int64, bool) { return now, true },
		count:    func(e int64) int64 { return l * (1 + e/period) },
		anytime:  true,
		horizon:  w,
		pure: func() lrDriver {
			return lrPure{&stateStepper[slState]{a: &slParams{limit: l, window: w}, fresh: true}}
		},
		api: func(t *testing.T, clk *ManualClock) lrDriver {
			sl, err := NewSlidingLog(rate, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrAllow{clk, sl.Allow}
		},
	}
}

// lrSlidingCounter: a sliding window counter's Allow, L = N events per
// W = P (with L <= W), under the saturating demand.
//
// Closed forms. Windows are [S_g, S_g + W) with S_g = (w0+g)·W. In a window
// whose predecessor counted p > 0, the (c+1)-th event is allowed e ns into
// it iff p·(W−e) + (c+1)·W <= L·W, that is at e >= W·(c+1+p−L)/p. The last
// event that fits before the window ends is the (L − ⌈p/W⌉)-th, so a window
// after a full one ends with L−1 (for p <= W), and so does every window
// after that: the approximation's steady state is L−1 per window, not L.
// Window 0 takes its L from the first burst. In window 1 (p = L) the j-th
// event (from 0) is due at e = ⌈(j+1)·W/L⌉; in window g >= 2 (p = L−1) at
// e = ⌈j·W/(L−1)⌉, for j < L−1. These are at least W/L apart, and arrivals
// at most, so each is taken before the next falls due, and before the
// window ends. After the arrival e ns into window m the count is L for
// m = 0; L + min(L−1, ⌊e·L/W⌋) for m = 1; and
// L + (L−1)·(m−1) + min(L−1, 1 + ⌊e·(L−1)/W⌋) for m >= 2.
//
// For L = 1 the windows alternate: p = 1 shuts a window entirely and p = 0
// lets the first arrival in, so the k-th event is due at the start of
// window 2k, and the count is 1 + ⌊m/2⌋.
func lrSlidingCounter(rate Rate) lrScenario {
	l, w := rate.N, int64(rate.Period)
	w0 := lrT0 / w
	// at returns the window and the least e into it at which the k-th
	// event (k >= L) may go; e = W if never.
	at := func(k int64) (g, e int64) {
		if l == 1 {
			return 2 * k, 0
		}
		g, j := 1+(k-l)/(l-1), (k-l)%(l-1)
		switch {
		case j >= l-1:
			return g, w
		case g == 1:
			return g, lrCeil(j+1, w, l)
		default:
			return g, lrCeil(j, w, l-1)
		}
	}
	return lrScenario{
		name:     "SlidingWindowCounter/Allow",
		burst0:   l + 1,
		burstEnd: 2,
		per:      1,
		gap:      min(w/l, lrMaxGap),
		due: func(k int64) int64 {
			if k < l {
				return lrLongAgo
			}
			g, e := at(k)
			return (w0+g)*w + e
		},
		act: func(k, now int64) (int64, bool) {
			if k < l {
				return now, now == lrT0
			}
			// Taken before the next one falls due, in the same window.
			g, _ := at(k)
			end := (w0 + g + 1) * w
			if l > 1 && (k-l)%(l-1) < l-2 {
				g1, e1 := at(k + 1)
				end = (w0+g1)*w + e1
			}
			return now, now < end
		},
		count: func(e int64) int64 {
			t := lrT0 + e
			m, into := t/w-w0, t%w // window m, into ns in
			switch {
			case l == 1:
				return 1 + m/2
			case m == 0:
				return l
			case m == 1:
				return l + min(l-1, lrFloor(into, l, w))
			default:
				return l + (l-1)*(m-1) + min(l-1, 1+lrFloor(into, l-1, w))
			}
		},
		anytime: true,
		horizon: 2 * w,
		pure: func() lrDriver {
			a := &swcParams{limit: l, window: w}
			return lrPure{&stateStepper[swcState]{a: a, fresh: true}}
		},
		api: func(t *testing.T, clk *ManualClock) lrDriver {
			sc, err := NewSlidingWindowCounter(rate, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return lrAllow{clk, sc.Allow}
		},
	}
}

// lrRun is a long run of one algorithm's entry in the registry
// (algorithms_test.go). One mode of each algorithm takes the full count of
// events (full); the other modes a tenth of it, to keep the file fast.
type lrRun struct {
	lrScenario
	full bool
}

func lrTokenBucketRuns(rate Rate, capacity int64) []lrRun {
	slot := int64(rate.Period) / rate.N
	return []lrRun{
		{lrTokenBucket(rate, capacity, 0), true},
		{lrTokenBucket(rate, capacity, 5*slot/2), false},
	}
}

func lrLeakyBucketRuns(rate Rate, capacity int64) []lrRun {
	slot := int64(rate.Period) / rate.N
	return []lrRun{
		{lrLeakyBucket(rate, capacity, -1), true},
		{lrLeakyBucket(rate, capacity, 5*slot/2), false},
		{lrLeakyAllow(rate, capacity), false},
	}
}

func lrFixedWindowRuns(rate Rate, _ int64) []lrRun {
	win := int64(rate.Period)
	return []lrRun{
		{lrFixedWindow(rate, 0), true},
		{lrFixedWindow(rate, 4*win/3), false},
	}
}

func lrSlidingLogRuns(rate Rate, _ int64) []lrRun {
	win := int64(rate.Period)
	return []lrRun{
		{lrSlidingLog(rate, 4*win/3), true},
		{lrSlidingLogAllow(rate), false},
	}
}

func lrSlidingCounterRuns(rate Rate, _ int64) []lrRun {
	return []lrRun{{lrSlidingCounter(rate), true}}
}

func TestLongRun(t *testing.T) {
	pureEvents, apiEvents := longRunEvents()
	for _, r := range lrRates {
		var scenarios []lrRun
		for _, alg := range algorithms {
			scenarios = append(scenarios, alg.longRuns(r.rate, r.capacity)...)
		}
		for _, sc := range scenarios {
			t.Run(sc.name+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				events := pureEvents
				if !sc.full {
					events /= 10
				}
				// A run must span several bursts' worth of arrivals to mean
				// anything: the windows at 10⁶ per second need 10⁶ events per
				// window. Such runs take the full count, or are left out
				// under the race detector.
				bursts := sc.burst0 + sc.burstEnd
				if 4*bursts > events {
					if raceEnabled || testing.Short() {
						t.Skipf("%d events per burst: too many for a short run", bursts)
					}
					events = max(events, pureEvents)
				}
				runLongRun(t, sc.lrScenario, sc.pure(), events)
				if sc.api == nil {
					return
				}
				// Through the limiter's methods, a few times slower, the
				// windows at 10⁶ per second are left out.
				events = max(apiEvents, 4*bursts)
				if events > 10*apiEvents {
					t.Logf("not run through the limiter's methods: %d events per burst", bursts)
					return
				}
				clk := NewManualClock(time.Unix(0, lrT0))
				runLongRun(t, sc.lrScenario, sc.api(t, clk), events)
			})
		}
	}
}

// runLongRun plays sc's demand, about events arrivals, through d and checks
// every arrival and the counts against sc's closed forms.
func runLongRun(t *testing.T, sc lrScenario, d lrDriver, events int64) {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(events)))
	// The bursts are part of the events, but at least half are spread out.
	spread := max(events-sc.burst0-sc.burstEnd, events/2)
	if end := lrT0 + spread*sc.gap + sc.horizon; end > maxNanos || end < lrT0 {
		t.Fatalf("the run could reach %v, past the clock's range", time.Unix(0, end))
	}
	var accepted, refused, arrivals, onTime int64
	arrive := func(now, k int64) {
		for range k {
			act, ok := d.step(now, sc.maxWait)
			arrivals++
			if due := sc.due(accepted); ok != (now >= due) {
				t.Fatalf("arrival %d at T0%+dns: accepted %v; acceptance %d is due at T0%+dns",
					arrivals, now-lrT0, ok, accepted, due-lrT0)
			}
			if !ok {
				refused++
				continue
			}
			if want, good := sc.act(accepted, now); !good || act != want {
				t.Fatalf("acceptance %d at T0%+dns acts at T0%+dns; want T0%+dns (and accepted then: %v)",
					accepted, now-lrT0, act-lrT0, want-lrT0, good)
			}
			accepted++
		}
	}
	check := func(now int64) {
		if want := sc.count(now - lrT0); accepted != want {
			t.Fatalf("after %d arrivals, at T0+%v: %d accepted, want %d", arrivals, time.Duration(now-lrT0), accepted, want)
		}
	}
	now := lrT0
	arrive(now, sc.burst0)
	for i := 0; arrivals < sc.burst0+spread; i++ {
		switch due := sc.due(accepted); {
		case sc.fixed:
			now += sc.gap
		case due > now && due-now <= sc.gap && rng.IntN(2) == 0:
			// Try the boundary: 1 ns early, then on time.
			if due-1 > now {
				arrive(due-1, 1)
			}
			now = due
			onTime++
		default:
			now += rng.Int64N(sc.gap + 1)
		}
		arrive(now, sc.per)
		if sc.anytime && i%1024 == 0 {
			check(now)
		}
	}
	arrive(now, sc.burstEnd)
	check(now)
	// A test that cannot fail is no test: both outcomes must have happened,
	// well beyond the bursts, and the boundaries must have been tried.
	if refused == 0 || accepted <= sc.burst0+sc.burstEnd || !sc.fixed && onTime < 2 {
		t.Fatalf("demand too tame: %d accepted, %d refused of %d, %d arrivals on a due instant",
			accepted, refused, arrivals, onTime)
	}
	t.Logf("%d arrivals over %v: %d accepted (%d on the instant due), %d refused",
		arrivals, time.Duration(now-lrT0), accepted, onTime, refused)
}
