package ratelimit

// Helpers shared by the tests of FixedWindow, SlidingLog and
// SlidingWindowCounter: a timeline runner, random traces, and the checks
// that every one of the three must pass (exact RetryAfter, lossless
// eviction, concurrency on one key, WaitN).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// winT0 is midnight of a day: windows of a second, a minute, an hour or a
// day all start there.
var winT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// winLimiter is what the three window algorithms offer beyond Limiter.
type winLimiter interface {
	Limiter
	Limit() int
	Sweep()
	Stats() Stats
}

type winOp int

const (
	winAllowN  winOp = iota // AllowN(ctx, key, n); want is the Decision
	winAllow                // Allow(key); want.Allowed is the answer
	winReserve              // Reserve(ctx, key, n); ok is OK, want the Decision, want.RetryAfter also the Delay
	winCancel               // Cancel the res-th reservation of the timeline
)

// winRow is one row of a timeline: at at (since t0), do op.
type winRow struct {
	at   time.Duration
	op   winOp
	key  string
	n    int
	res  int      // winCancel: which reservation, counting from 0
	ok   bool     // winReserve: want OK
	want Decision // Limit 0 means the limiter's limit
}

// runWinTimeline plays rows on lim, whose clock is clock, from t0.
func runWinTimeline(t *testing.T, lim winLimiter, clock *ManualClock, t0 time.Time, rows []winRow) {
	t.Helper()
	ctx := context.Background()
	var rs []*Reservation
	for i, r := range rows {
		clock.Set(t0.Add(r.at))
		want := r.want
		if want.Limit == 0 {
			want.Limit = lim.Limit()
		}
		switch r.op {
		case winAllowN:
			d, err := lim.AllowN(ctx, r.key, r.n)
			if err != nil {
				t.Fatalf("row %d (t0+%v): AllowN(%q, %d): %v", i, r.at, r.key, r.n, err)
			}
			if d != want {
				t.Errorf("row %d (t0+%v): AllowN(%q, %d) = %+v, want %+v", i, r.at, r.key, r.n, d, want)
			}
		case winAllow:
			if got := lim.Allow(r.key); got != want.Allowed {
				t.Errorf("row %d (t0+%v): Allow(%q) = %v, want %v", i, r.at, r.key, got, want.Allowed)
			}
		case winReserve:
			res, err := lim.Reserve(ctx, r.key, r.n)
			if err != nil {
				t.Fatalf("row %d (t0+%v): Reserve(%q, %d): %v", i, r.at, r.key, r.n, err)
			}
			if res.OK() != r.ok || res.Decision() != want {
				t.Errorf("row %d (t0+%v): Reserve(%q, %d) = OK %v %+v, want OK %v %+v", i, r.at, r.key, r.n, res.OK(), res.Decision(), r.ok, want)
			}
			if r.ok && res.Delay() != want.RetryAfter {
				t.Errorf("row %d (t0+%v): Reserve(%q, %d).Delay() = %v, want %v", i, r.at, r.key, r.n, res.Delay(), want.RetryAfter)
			}
			rs = append(rs, res)
		case winCancel:
			rs[r.res].Cancel()
		}
	}
}

// winEvent is one request of a random trace.
type winEvent struct {
	t   int64 // Unix nanoseconds
	key string
	n   int
}

// winTrace returns count requests on a few keys from start on, at
// irregular non-decreasing instants: often equal, often close, sometimes a
// window or more apart, sometimes exactly on a window boundary or a window
// after an earlier request (the edges where off-by-one errors live).
func winTrace(rng *rand.Rand, count int, start, w int64, limit int) []winEvent {
	keys := []string{"a", "b", "c"}
	evs := make([]winEvent, 0, count)
	t := start
	for range count {
		switch p := rng.IntN(100); {
		case p < 25: // same instant
		case p < 55:
			t += rng.Int64N(w/8 + 1)
		case p < 75:
			t += rng.Int64N(w) + 1
		case p < 82:
			t += w + rng.Int64N(2*w)
		case p < 88: // the next window boundary, or just before it
			t = windowStart(t, w) + w - rng.Int64N(2)
		case p < 95: // exactly a window after an earlier request
			if len(evs) > 0 {
				t = max(t, evs[rng.IntN(len(evs))].t+w)
			}
		default:
			t += rng.Int64N(5*w) + 1
		}
		n := 1
		switch p := rng.IntN(100); {
		case p < 8:
			n = 0
		case p < 30:
			n = rng.IntN(limit) + 1
		}
		evs = append(evs, winEvent{t: t, key: keys[rng.IntN(len(keys))], n: n})
	}
	return evs
}

// winTraceStarts are the instants traces start from: now-ish, and the
// epoch, the earliest instant a limiter sees.
func winTraceStarts(w int64) []int64 {
	return []int64{winT0.UnixNano() + 12345, 0}
}

// winOracle is a test's simple model of an algorithm. allowN decides n
// events for key at t (non-decreasing) and records them if allowed.
type winOracle interface {
	allowN(key string, t int64, n int) Decision
}

// checkWinOracle plays trace on lim and compares every decision with the
// oracle's. Some requests of one event go through Allow, the hot path.
func checkWinOracle(t *testing.T, lim winLimiter, clock *ManualClock, oracle winOracle, trace []winEvent, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	for i, ev := range trace {
		clock.Set(time.Unix(0, ev.t))
		want := oracle.allowN(ev.key, ev.t, ev.n)
		if ev.n == 1 && rng.IntN(4) == 0 {
			if got := lim.Allow(ev.key); got != want.Allowed {
				t.Fatalf("event %d %+v: Allow = %v, oracle %v", i, ev, got, want.Allowed)
			}
			continue
		}
		d, err := lim.AllowN(ctx, ev.key, ev.n)
		if err != nil {
			t.Fatalf("event %d %+v: %v", i, ev, err)
		}
		if d != want {
			t.Fatalf("event %d %+v:\n got    %+v\n oracle %+v", i, ev, d, want)
		}
	}
}

// checkRetryExact plays trace on lim and, after every denial, retries 1ns
// before RetryAfter (which must be denied) and at RetryAfter (which must
// be allowed).
func checkRetryExact(t *testing.T, lim winLimiter, clock *ManualClock, trace []winEvent) {
	t.Helper()
	ctx := context.Background()
	last := int64(-1 << 63)
	denials := 0
	for i, ev := range trace {
		now := max(ev.t, last)
		clock.Set(time.Unix(0, now))
		d, err := lim.AllowN(ctx, ev.key, ev.n)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		last = now
		if d.Allowed {
			continue
		}
		denials++
		retry := now + int64(d.RetryAfter)
		clock.Set(time.Unix(0, retry-1))
		if d1, _ := lim.AllowN(ctx, ev.key, ev.n); d1.Allowed || d1.RetryAfter != 1 {
			t.Fatalf("event %d %+v: denied with RetryAfter %v; 1ns before that: %+v, want denied with RetryAfter 1ns", i, ev, d.RetryAfter, d1)
		}
		clock.Set(time.Unix(0, retry))
		if d2, _ := lim.AllowN(ctx, ev.key, ev.n); !d2.Allowed {
			t.Fatalf("event %d %+v: denied with RetryAfter %v; at that time: %+v, want allowed", i, ev, d.RetryAfter, d2)
		}
		last = retry
	}
	if denials < len(trace)/20 {
		t.Fatalf("only %d denials in %d events: the trace does not exercise RetryAfter", denials, len(trace))
	}
}

// checkLossless plays the same operations on two limiters sharing a clock,
// one of which drops every key at rest after every operation, and requires
// identical decisions: dropping a key at rest changes nothing.
func checkLossless(t *testing.T, kept, swept winLimiter, clock *ManualClock, trace []winEvent, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	type pair struct{ a, b *Reservation }
	var pending []pair
	for i, ev := range trace {
		clock.Set(time.Unix(0, ev.t))
		switch p := rng.IntN(10); {
		case p < 6:
			da, _ := kept.AllowN(ctx, ev.key, ev.n)
			db, _ := swept.AllowN(ctx, ev.key, ev.n)
			if da != db {
				t.Fatalf("event %d %+v: AllowN: kept %+v, swept %+v", i, ev, da, db)
			}
		case p < 7:
			if a, b := kept.Allow(ev.key), swept.Allow(ev.key); a != b {
				t.Fatalf("event %d %+v: Allow: kept %v, swept %v", i, ev, a, b)
			}
		case p < 9:
			ra, _ := kept.Reserve(ctx, ev.key, ev.n)
			rb, _ := swept.Reserve(ctx, ev.key, ev.n)
			if ra.OK() != rb.OK() || ra.Decision() != rb.Decision() {
				t.Fatalf("event %d %+v: Reserve: kept %v %+v, swept %v %+v", i, ev, ra.OK(), ra.Decision(), rb.OK(), rb.Decision())
			}
			pending = append(pending, pair{ra, rb})
		default:
			if len(pending) > 0 {
				j := rng.IntN(len(pending))
				if rng.IntN(2) == 0 {
					j = len(pending) - 1 // the newest: most likely not yet due
				}
				pending[j].a.Cancel()
				pending[j].b.Cancel()
				pending = append(pending[:j], pending[j+1:]...)
			}
		}
		swept.Sweep()
	}
	if st := swept.Stats(); st.EvictedAtRest == 0 {
		t.Fatalf("no key was ever at rest: the test proves nothing (%+v)", st)
	}
}

// checkOneKeyConcurrent lets goroutines race for one key on a frozen
// clock: exactly the limit is allowed, however the calls interleave.
func checkOneKeyConcurrent(t *testing.T, lim winLimiter) {
	t.Helper()
	const goroutines, calls = 8, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := 0
			for i := range calls {
				if (g+i)%2 == 0 {
					if lim.Allow("k") {
						mine++
					}
				} else if d, _ := lim.AllowN(context.Background(), "k", 1); d.Allowed {
					mine++
				}
			}
			mu.Lock()
			allowed += mine
			mu.Unlock()
		}()
	}
	wg.Wait()
	if allowed != lim.Limit() {
		t.Fatalf("%d allowed on a frozen clock, want the limit %d", allowed, lim.Limit())
	}
}

// checkInvalidN checks the errors for n < 0 and n > limit, and that they
// consume nothing.
func checkInvalidN(t *testing.T, lim winLimiter) {
	t.Helper()
	ctx := context.Background()
	l := lim.Limit()
	if _, err := lim.AllowN(ctx, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("AllowN(-1): %v, want ErrNegativeN", err)
	}
	if _, err := lim.AllowN(ctx, "k", l+1); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("AllowN(limit+1): %v, want ErrExceedsLimit", err)
	}
	if _, err := lim.Reserve(ctx, "k", l+1); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("Reserve(limit+1): %v, want ErrExceedsLimit", err)
	}
	if err := lim.WaitN(ctx, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("WaitN(-1): %v, want ErrNegativeN", err)
	}
	if d, err := lim.AllowN(ctx, "k", l); err != nil || !d.Allowed {
		t.Errorf("AllowN(limit) after invalid calls = %+v, %v; want allowed", d, err)
	}
}

// checkWaitN checks that WaitN blocks until its booking is due, and that a
// wait ended by its context gives the booking back.
func checkWaitN(t *testing.T, lim winLimiter, clock *ManualClock) {
	t.Helper()
	ctx := context.Background()
	l := lim.Limit()
	if d, _ := lim.AllowN(ctx, "w", l); !d.Allowed {
		t.Fatalf("AllowN(limit) on a new key = %+v", d)
	}
	d, _ := lim.AllowN(ctx, "w", 1)
	if d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("AllowN(1) on a full key = %+v, want denied", d)
	}
	full, _ := lim.AllowN(ctx, "w", 0)

	// A wait whose context ends gives its booking back.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- lim.WaitN(cctx, "w", 1) }()
	for clock.Timers() == 0 {
		runtime.Gosched() // until the goroutine waits on its timer
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled WaitN = %v, want context.Canceled", err)
	}
	if d2, _ := lim.AllowN(ctx, "w", 0); d2 != full {
		t.Fatalf("after a cancelled wait the key reads %+v, want %+v as before the wait", d2, full)
	}

	// A wait that is not ended returns when the clock reaches its booking.
	go func() { done <- lim.WaitN(ctx, "w", 1) }()
	for clock.Timers() == 0 {
		runtime.Gosched()
	}
	clock.Advance(d.RetryAfter - 1)
	select {
	case err := <-done:
		t.Fatalf("WaitN returned %v 1ns before its booking", err)
	default:
	}
	clock.Advance(1)
	if err := <-done; err != nil {
		t.Fatalf("WaitN = %v", err)
	}

	// A wait longer than the deadline fails at once, consuming nothing. The
	// deadline is real time; the wait needed is at least a window of the
	// manual clock.
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	before, _ := lim.AllowN(ctx, "w", 0)
	err := lim.WaitN(dctx, "w", l)
	if !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitN past the deadline = %v, want ErrLimited and DeadlineExceeded", err)
	}
	if after, _ := lim.AllowN(ctx, "w", 0); after != before {
		t.Fatalf("a refused WaitN changed the key: %+v, then %+v", before, after)
	}
}

// winSeeds are the seeds of the property tests: fixed, so failures repeat.
var winSeeds = []uint64{1, 2, 3, 42, 2026}

func winRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func winName(limit int, w int64, start int64) string {
	return fmt.Sprintf("L=%d/W=%v/start=%d", limit, time.Duration(w), start)
}

// checkExtremes books n events again and again on limiters whose clock
// reads 2026, 1970 and 2116 (the ends of the range a limiter sees): no
// overflow, every booking at most 36 years ahead, then a refusal.
func checkExtremes(t *testing.T, lim winLimiter, clock *ManualClock, n int) {
	t.Helper()
	ctx := context.Background()
	for i, at := range []time.Time{winT0, time.Unix(0, minNanos), time.Unix(0, maxNanos)} {
		clock.Set(at)
		key := fmt.Sprint("extreme", i)
		if d, _ := lim.AllowN(ctx, key, n); !d.Allowed {
			t.Fatalf("at %v: AllowN(%d) on a new key = %+v", at, n, d)
		}
		prev := time.Duration(-1)
		for j := 0; ; j++ {
			r, err := lim.Reserve(ctx, key, n)
			if err != nil {
				t.Fatal(err)
			}
			d := r.Decision()
			if d.Remaining < 0 || d.Remaining > d.Limit || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("at %v: booking %d: %+v", at, j, d)
			}
			if !r.OK() {
				if d.RetryAfter <= time.Duration(maxSpan) {
					t.Fatalf("at %v: booking %d refused with RetryAfter %v, within 36 years", at, j, d.RetryAfter)
				}
				break
			}
			if r.Delay() <= prev || r.Delay() > time.Duration(maxSpan) || j > 4 {
				t.Fatalf("at %v: booking %d: delay %v after %v", at, j, r.Delay(), prev)
			}
			prev = r.Delay()
		}
	}
}

// windowSuite is what the window suite needs of a window algorithm, beside
// its entry in the registry (algorithms_test.go); each one's own semantics
// are pinned in its own _test.go file.
type windowSuite struct {
	oracle func(limit int, w int64) winOracle
	// oracleRates are the (limit, window in ns) pairs of the oracle test.
	oracleRates [][2]int64
	// storm is what the wait storm (hardening_test.go) holds the
	// successes of many waiters on one key to.
	storm windowStorm
}

// windowStorm is a window algorithm's bound on the waiters of one key that
// succeed.
type windowStorm struct {
	fixed bool                         // at most L per window aligned to the epoch
	slide func(limit int, w int64) int // at most this many in any interval of length W
	fifo  bool                         // successes in order of arrival
}

// newWindow builds the window algorithm alg at rate with opts.
func (alg algorithm) newWindow(rate Rate, opts ...Option) (winLimiter, error) {
	l, err := alg.build(rate, 0, opts...)
	if err != nil {
		return nil, err
	}
	return l.(winLimiter), nil
}

func newTestWindow(t *testing.T, build func(Rate, ...Option) (winLimiter, error), rate Rate, start time.Time, opts ...Option) (winLimiter, *ManualClock) {
	t.Helper()
	clock := NewManualClock(start)
	lim, err := build(rate, append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, clock
}

func TestWindows(t *testing.T) {
	for _, alg := range windowAlgorithms() {
		t.Run(alg.name, func(t *testing.T) {
			t.Run("InvalidN", func(t *testing.T) {
				lim, _ := newTestWindow(t, alg.newWindow, PerSecond(3), winT0)
				checkInvalidN(t, lim)
			})
			t.Run("WaitN", func(t *testing.T) {
				lim, clock := newTestWindow(t, alg.newWindow, PerSecond(3), winT0.Add(250*time.Millisecond))
				checkWaitN(t, lim, clock)
			})
			t.Run("OneKeyConcurrent", func(t *testing.T) {
				lim, _ := newTestWindow(t, alg.newWindow, PerSecond(37), winT0)
				checkOneKeyConcurrent(t, lim)
			})
			t.Run("Oracle", func(t *testing.T) {
				for _, p := range alg.window.oracleRates {
					limit, w := int(p[0]), p[1]
					for _, start := range winTraceStarts(w) {
						t.Run(winName(limit, w, start), func(t *testing.T) {
							for _, seed := range winSeeds[:3] {
								rng := winRand(seed)
								lim, clock := newTestWindow(t, alg.newWindow, Per(int64(limit), time.Duration(w)), time.Unix(0, start))
								checkWinOracle(t, lim, clock, alg.window.oracle(limit, w), winTrace(rng, 2000, start, w, limit), rng)
							}
						})
					}
				}
			})
			t.Run("RetryAfterExact", func(t *testing.T) {
				const w = int64(1000)
				for _, seed := range winSeeds {
					rng := winRand(seed)
					lim, clock := newTestWindow(t, alg.newWindow, Per(4, time.Duration(w)), winT0)
					checkRetryExact(t, lim, clock, winTrace(rng, 2000, winT0.UnixNano(), w, 4))
				}
			})
			t.Run("Lossless", func(t *testing.T) {
				const w = int64(1000)
				for _, limit := range []int{1, 4} {
					for _, seed := range winSeeds {
						rng := winRand(seed)
						clock := NewManualClock(winT0)
						rate := Per(int64(limit), time.Duration(w))
						kept, err := alg.newWindow(rate, WithClock(clock))
						if err != nil {
							t.Fatal(err)
						}
						swept, err := alg.newWindow(rate, WithClock(clock), WithShards(1))
						if err != nil {
							t.Fatal(err)
						}
						checkLossless(t, kept, swept, clock, winTrace(rng, 2000, winT0.UnixNano(), w, limit), rng)
					}
				}
			})
		})
	}
}
