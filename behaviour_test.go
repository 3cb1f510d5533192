package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file is the behaviour suite: what every algorithm shares, run over
// the registry of algorithms (algorithms_test.go). Each algorithm's own
// semantics are pinned in its own _test.go file.

const (
	suiteLimit  = 4
	suitePeriod = time.Second
)

// suiteT0 is where the suite's clocks start: on a whole second, so that
// windows aligned to the epoch start there too.
var suiteT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBehaviour(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, alg algorithm)
	}{
		{"KeysIndependent", testKeysIndependent},
		{"InvalidN", testInvalidN},
		{"Peek", testPeek},
		{"PeekLeavesNoTrace", testPeekLeavesNoTrace},
		{"WaitCancelledContext", testWaitCancelledContext},
		{"WaitDeadlineTooShort", testWaitDeadlineTooShort},
		{"WaitCancelledWhileWaiting", testWaitCancelledWhileWaiting},
		{"WaitCompletes", testWaitCompletes},
		{"ReserveCancel", testReserveCancel},
		{"CancelWhenDue", testCancelWhenDue},
		{"AllowMatchesAllowN", testAllowMatchesAllowN},
		{"ConcurrentOneKey", testConcurrentOneKey},
		{"ConcurrentKeysWithSweep", testConcurrentKeysWithSweep},
		{"EvictionLossless", testEvictionLossless},
		{"EvictionAtCap", testEvictionAtCap},
		{"InvalidConstructor", testInvalidConstructor},
		{"BackwardsClock", testBackwardsClock},
		{"BackwardsClockRandom", func(t *testing.T, alg algorithm) { testBackwardsClockRandom(t, alg, false) }},
		{"BackwardsClockRandomSwept", func(t *testing.T, alg algorithm) { testBackwardsClockRandom(t, alg, true) }},
		{"BackwardsClockAfterEviction", testBackwardsClockAfterEviction},
		{"NoAllocations", testNoAllocations},
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, alg) })
			}
		})
	}
}

func newSuiteLimiter(t *testing.T, alg algorithm, opts ...Option) (testLimiter, *ManualClock) {
	t.Helper()
	return newLimiterAt(t, alg, suiteLimit, opts...)
}

// newLimiterAt builds alg allowing limit per suitePeriod on a manual clock
// at suiteT0 (a whole second, so windows start there), closed at cleanup.
func newLimiterAt(t *testing.T, alg algorithm, limit int, opts ...Option) (testLimiter, *ManualClock) {
	t.Helper()
	clk := NewManualClock(suiteT0)
	lim, err := alg.new(limit, suitePeriod, clk, opts...)
	if err != nil {
		t.Fatalf("new %s: %v", alg.name, err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim, clk
}

func suiteAllowN(t *testing.T, lim Limiter, key string, n int) Decision {
	t.Helper()
	d, err := lim.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

func suitePeek(t *testing.T, lim Limiter, key string) Decision {
	t.Helper()
	return suiteAllowN(t, lim, key, 0)
}

func suiteReserve(t *testing.T, lim Limiter, key string, n int) *Reservation {
	t.Helper()
	r, err := lim.Reserve(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Reserve(%q, %d): %v", key, n, err)
	}
	return r
}

// makeBusy uses key so that one more event must wait but can be booked:
// the whole limit, or for a shaper one event (its successor waits 1/r).
func makeBusy(t *testing.T, alg algorithm, lim Limiter, key string) {
	t.Helper()
	n := suiteLimit
	if alg.shaper {
		n = 1
	}
	if d := suiteAllowN(t, lim, key, n); !d.Allowed {
		t.Fatalf("AllowN(%q, %d) on a fresh key: %+v", key, n, d)
	}
}

// promptly runs f, which must not block, and fails the test if it has not
// returned within a generous real-time bound (a guard against hangs, not a
// measure of time).
func promptly(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
		return nil
	}
}

// fakeDeadline is a context that reports a deadline but never ends: it
// tests the refusal of waits that cannot fit. A deadline is real time (what
// is left of it is measured by the time package, whatever the limiter's
// clock), so tests give it a margin of real time where a wait must fit.
func fakeDeadline(d time.Time) context.Context {
	return deadlineCtx{Context: context.Background(), deadline: d}
}

type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func testKeysIndependent(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	if d := suiteAllowN(t, lim, "a", suiteLimit); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a: AllowN(limit): %+v", d)
	}
	if lim.Allow("a") {
		t.Fatal("a: Allow after the limit: allowed")
	}
	for _, key := range []string{"b", "", "a ", "A", string(make([]byte, 1<<16))} {
		if d := suitePeek(t, lim, key); d.Remaining != suiteLimit {
			t.Errorf("%.8q: peek %+v; want the full limit", key, d)
		}
		if d := suiteAllowN(t, lim, key, suiteLimit); !d.Allowed {
			t.Errorf("%.8q: AllowN(limit): %+v", key, d)
		}
	}
	if got := lim.Stats().Keys; got != 6 {
		t.Errorf("Stats.Keys = %d, want 6", got)
	}
}

func testInvalidN(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	ctx := context.Background()
	for _, n := range []int{-1, -1 << 62, suiteLimit + 1, 1 << 62} {
		want := ErrExceedsLimit
		if n < 0 {
			want = ErrNegativeN
		}
		if d, err := lim.AllowN(ctx, "k", n); !errors.Is(err, want) || d != (Decision{}) {
			t.Errorf("AllowN(%d): %+v, %v; want %v", n, d, err, want)
		}
		if r, err := lim.Reserve(ctx, "k", n); !errors.Is(err, want) || r != nil {
			t.Errorf("Reserve(%d): %v, %v; want %v", n, r, err, want)
		}
		err := promptly(t, "WaitN", func() error { return lim.WaitN(ctx, "k", n) })
		if !errors.Is(err, want) {
			t.Errorf("WaitN(%d): %v; want %v", n, err, want)
		}
	}
	if s := lim.Stats(); s.Keys != 0 || s.Inserts != 0 {
		t.Errorf("invalid n created keys: %+v", s)
	}
	if d := suiteAllowN(t, lim, "k", suiteLimit); !d.Allowed {
		t.Errorf("AllowN(limit) after the errors: %+v", d)
	}
}

func testPeek(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	ctx := context.Background()
	want := Decision{Allowed: true, Limit: suiteLimit, Remaining: suiteLimit}
	if d := suitePeek(t, lim, "k"); d != want {
		t.Errorf("fresh key: peek %+v, want %+v", d, want)
	}
	if r := suiteReserve(t, lim, "k", 0); !r.OK() || r.Delay() != 0 {
		t.Errorf("fresh key: Reserve(0): OK=%v Delay %v", r.OK(), r.Delay())
	}
	if err := promptly(t, "WaitN(0)", func() error { return lim.WaitN(ctx, "k", 0) }); err != nil {
		t.Errorf("fresh key: WaitN(0): %v", err)
	}
	if s := lim.Stats(); s.Keys != 0 || s.Inserts != 0 {
		t.Errorf("peeks created a key: %+v", s)
	}
	d1 := suiteAllowN(t, lim, "k", 1)
	p1, p2 := suitePeek(t, lim, "k"), suitePeek(t, lim, "k")
	if p1 != p2 || p1.Remaining != suiteLimit-1 || !p1.Allowed || p1.RetryAfter != 0 || p1.ResetAfter <= 0 {
		t.Errorf("after one event (%+v): peeks %+v, %+v; want equal, Remaining %d",
			d1, p1, p2, suiteLimit-1)
	}
}

// testPeekLeavesNoTrace: a peek changes no state, which shows even when the
// clock then steps back: a key peeked at and a twin that was not answer
// alike at every instant, before and after the peek's time.
func testPeekLeavesNoTrace(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	suiteAllowN(t, lim, "k", 1)
	suiteAllowN(t, lim, "twin", 1)
	for _, at := range []time.Duration{3 * suitePeriod, suitePeriod / 3, 3 * suitePeriod / 2, 0, suitePeriod / 7, 1} {
		clk.Set(suiteT0.Add(at))
		suitePeek(t, lim, "k")
		for _, back := range []time.Duration{1, suitePeriod / 5, suitePeriod} {
			clk.Set(suiteT0.Add(at - back))
			if p, q := suitePeek(t, lim, "k"), suitePeek(t, lim, "twin"); p != q {
				t.Fatalf("peeked at t0+%v, then at t0+%v: %+v; the twin not peeked: %+v", at, at-back, p, q)
			}
		}
	}
}

func testWaitCancelledContext(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, key := range []string{"fresh", "used"} {
		if key == "used" {
			suiteAllowN(t, lim, key, 1)
		}
		before := suitePeek(t, lim, key)
		err := promptly(t, "Wait", func() error { return lim.Wait(ctx, key) })
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrLimited) {
			t.Errorf("%s: Wait(cancelled ctx): %v, want context.Canceled", key, err)
		}
		if after := suitePeek(t, lim, key); after != before {
			t.Errorf("%s: Wait(cancelled ctx) consumed: %+v, then %+v", key, before, after)
		}
	}
	if got := lim.Stats().Keys; got != 1 {
		t.Errorf("Stats.Keys = %d, want 1: the cancelled wait created a key", got)
	}
}

func testWaitDeadlineTooShort(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	makeBusy(t, alg, lim, "k")
	before := suitePeek(t, lim, "k")
	makeBusy(t, alg, lim, "twin") // the needed delay, from a twin key
	twin := suiteReserve(t, lim, "twin", 1)
	need := twin.Delay()
	if !twin.OK() || need <= 0 {
		t.Fatalf("twin key: Reserve(1) after makeBusy: OK=%v Delay %v; want a positive delay", twin.OK(), need)
	}
	ctx := fakeDeadline(time.Now().Add(need - 1))
	err := promptly(t, "Wait", func() error { return lim.Wait(ctx, "k") })
	var le *LimitError
	if !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &le) {
		t.Fatalf("Wait with a deadline 1 ns short: %v; want ErrLimited and DeadlineExceeded", err)
	}
	if le.RetryAfter != need || !le.Deadline {
		t.Errorf("LimitError %+v; want RetryAfter %v, Deadline", le, need)
	}
	if after := suitePeek(t, lim, "k"); after != before {
		t.Errorf("the refused wait consumed: %+v, then %+v", before, after)
	}
	if n := clk.Timers(); n != 0 {
		t.Errorf("%d timers left", n)
	}
	// With a deadline past the needed delay, the wait is booked.
	done := make(chan error, 1)
	go func() { done <- lim.Wait(fakeDeadline(time.Now().Add(need+time.Minute)), "k") }()
	waitTimers(t, clk, 1)
	clk.Advance(need)
	if err := <-done; err != nil {
		t.Errorf("Wait with a deadline at the needed delay: %v", err)
	}
}

func testWaitCancelledWhileWaiting(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	makeBusy(t, alg, lim, "k")
	before := suitePeek(t, lim, "k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lim.Wait(ctx, "k") }()
	waitTimers(t, clk, 1)
	if during := suitePeek(t, lim, "k"); during == before {
		t.Errorf("the waiting booking does not show: %+v", during)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled while waiting: %v, want context.Canceled", err)
	}
	if after := suitePeek(t, lim, "k"); after != before {
		t.Errorf("the cancelled wait kept its booking: %+v, then %+v", before, after)
	}
	if n := clk.Timers(); n != 0 {
		t.Errorf("%d timers left", n)
	}
}

func testWaitCompletes(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	for _, key := range []string{"k", "twin"} {
		makeBusy(t, alg, lim, key)
	}
	twin := suiteReserve(t, lim, "twin", 1)
	need := twin.Delay()
	if !twin.OK() || need <= 0 {
		t.Fatalf("twin key: Reserve(1): OK=%v Delay %v", twin.OK(), need)
	}
	done := make(chan error, 1)
	go func() { done <- lim.Wait(context.Background(), "k") }()
	waitTimers(t, clk, 1)
	clk.Advance(need - 1)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v 1 ns before its time", err)
	default:
	}
	if n := clk.Timers(); n != 1 {
		t.Fatalf("%d timers 1 ns before the wait ends, want 1", n)
	}
	clk.Advance(1)
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// The wait consumed the booking: the same as the twin key's.
	if p, q := suitePeek(t, lim, "k"), suitePeek(t, lim, "twin"); p != q {
		t.Errorf("after the wait: %+v; the twin key booked by Reserve: %+v", p, q)
	}
}

func testReserveCancel(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	full := suitePeek(t, lim, "k")
	r := suiteReserve(t, lim, "k", 1)
	if !r.OK() || r.Delay() != 0 || !r.TimeToAct().Equal(clk.Now()) {
		t.Fatalf("fresh key: Reserve(1): OK=%v Delay %v", r.OK(), r.Delay())
	}
	if d := suitePeek(t, lim, "k"); d.Remaining != suiteLimit-1 {
		t.Fatalf("after Reserve(1): %+v", d)
	}
	r.Cancel()
	if d := suitePeek(t, lim, "k"); d != full {
		t.Fatalf("after Cancel: %+v, want %+v", d, full)
	}
	r.Cancel() // twice: nothing more
	if d := suitePeek(t, lim, "k"); d != full {
		t.Fatalf("after a second Cancel: %+v, want %+v", d, full)
	}

	suiteAllowN(t, lim, "k", suiteLimit)
	before := suitePeek(t, lim, "k")
	r = suiteReserve(t, lim, "k", 1)
	if !r.OK() {
		// A full leaky-bucket queue: nothing booked; Delay is RetryAfter.
		if r.Delay() <= 0 || r.Delay() != r.Decision().RetryAfter {
			t.Fatalf("refused Reserve: Delay %v, %+v", r.Delay(), r.Decision())
		}
		r.Cancel()
		if d := suitePeek(t, lim, "k"); d != before {
			t.Fatalf("Cancel of a refused reservation changed %+v to %+v", before, d)
		}
		return
	}
	delay := r.Delay()
	if delay <= 0 || r.Decision().RetryAfter != delay || !r.TimeToAct().Equal(clk.Now().Add(delay)) {
		t.Fatalf("Reserve(1) after the limit: Delay %v, %+v", delay, r.Decision())
	}
	clk.Advance(delay / 2)
	if got := r.Delay(); got != delay-delay/2 {
		t.Fatalf("Delay after %v: %v, want %v", delay/2, got, delay-delay/2)
	}
	act := r.TimeToAct()
	r.Cancel()
	if r2 := suiteReserve(t, lim, "k", 1); !r2.OK() || !r2.TimeToAct().Equal(act) {
		t.Fatalf("Reserve(1) after Cancel: OK=%v act %v; want the cancelled booking's time %v",
			r2.OK(), r2.TimeToAct(), act)
	}
}

// testCancelWhenDue: Cancel at the booking's time to act gives it back
// (that time has not passed); 1 ns later it gives nothing back. Both for a
// booking due at once and for one that had to wait.
func testCancelWhenDue(t *testing.T, alg algorithm) {
	for _, busy := range []bool{false, true} {
		for _, late := range []time.Duration{0, 1} {
			lim, clk := newSuiteLimiter(t, alg)
			if busy {
				makeBusy(t, alg, lim, "k")
				makeBusy(t, alg, lim, "twin") // the same history, minus the booking
			}
			r := suiteReserve(t, lim, "k", 1)
			if !r.OK() || (r.Delay() > 0) != busy {
				t.Fatalf("busy=%v: Reserve(1): OK=%v Delay %v", busy, r.OK(), r.Delay())
			}
			clk.Set(r.TimeToAct().Add(late))
			before := suitePeek(t, lim, "k")
			r.Cancel()
			after, twin := suitePeek(t, lim, "k"), suitePeek(t, lim, "twin")
			if late == 0 && after != twin {
				t.Errorf("busy=%v: Cancel at the time to act: %+v; want it given back: %+v", busy, after, twin)
			}
			if late > 0 && (after != before || after == twin) {
				t.Errorf("busy=%v: Cancel 1 ns late: %+v, then %+v; want nothing given back", busy, before, after)
			}
		}
	}
}

// testAllowMatchesAllowN drives one limiter with Allow and another with
// AllowN(1) on the same random trace, with times often exactly at, or 1 ns
// around, a RetryAfter or ResetAfter: the hot path and the step agree.
func testAllowMatchesAllowN(t *testing.T, alg algorithm) {
	clk := NewManualClock(suiteT0)
	var lims [2]testLimiter
	for i := range lims {
		lim, err := alg.new(suiteLimit, suitePeriod, clk)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = lim
	}
	rng := rand.New(rand.NewPCG(5, 8))
	keys := []string{"a", "b", ""}
	var retry time.Duration
	for i := range 4000 {
		key := keys[rng.IntN(len(keys))]
		switch rng.IntN(4) {
		case 0:
			clk.Advance(time.Duration(rng.Int64N(int64(suitePeriod / suiteLimit))))
		case 1:
			clk.Advance(max(retry+time.Duration(rng.IntN(3)-1), 0))
		case 2:
			reset := suitePeek(t, lims[1], key).ResetAfter
			clk.Advance(max(reset+time.Duration(rng.IntN(3)-1), 0))
		}
		got := lims[0].Allow(key)
		d := suiteAllowN(t, lims[1], key, 1)
		if got != d.Allowed {
			t.Fatalf("step %d at t0+%v: Allow(%q) = %v, AllowN(1) %+v", i, clk.Now().Sub(suiteT0), key, got, d)
		}
		if !d.Allowed {
			retry = d.RetryAfter
		}
		if p, q := suitePeek(t, lims[0], key), suitePeek(t, lims[1], key); p != q {
			t.Fatalf("step %d: after Allow %+v, after AllowN %+v", i, p, q)
		}
	}
}

func testConcurrentOneKey(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	const goroutines, calls = 8, 200
	run := func(f func() bool) int64 {
		var wg sync.WaitGroup
		var n atomic.Int64
		for range goroutines {
			wg.Go(func() {
				for range calls {
					if f() {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	want := int64(suiteLimit)
	if alg.shaper {
		want = 1
	}
	if got := run(func() bool { return lim.Allow("allow") }); got != want {
		t.Errorf("Allow: %d allowed, want %d", got, want)
	}
	ctx := context.Background()
	got := run(func() bool {
		d, err := lim.AllowN(ctx, "allowN", 1)
		return err == nil && d.Allowed
	})
	if got != want {
		t.Errorf("AllowN: %d allowed, want %d", got, want)
	}
	if alg.shaper {
		got := run(func() bool {
			r, err := lim.Reserve(ctx, "reserve", 1)
			return err == nil && r.OK()
		})
		if got != suiteLimit {
			t.Errorf("Reserve: %d booked, want %d", got, suiteLimit)
		}
	}
}

// testConcurrentKeysWithSweep drives many keys from several goroutines
// while the clock advances and another goroutine sweeps and reads Stats:
// for the race detector, and a loose bound on what each key is allowed.
func testConcurrentKeysWithSweep(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg, WithShards(4))
	const goroutines, keys, calls = 4, 16, 300
	var allowed [goroutines][keys]int
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				lim.Sweep()
				_ = lim.Stats()
				clk.Advance(suitePeriod / 100)
				runtime.Gosched()
			}
		}
	})
	start := clk.Now()
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				k := i % keys
				if lim.Allow(fmt.Sprintf("g%d-%d", g, k)) {
					allowed[g][k]++
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	elapsed := clk.Now().Sub(start)
	bound := suiteLimit * (int(elapsed/suitePeriod) + 2)
	for g := range allowed {
		for k, n := range allowed[g] {
			if n > bound {
				t.Errorf("key g%d-%d: %d allowed in %v; bound %d", g, k, n, elapsed, bound)
			}
		}
	}
}

// traceRunner applies random operations to several limiters on one clock,
// which must answer alike.
type traceRunner struct {
	rng   *rand.Rand
	keys  []string
	open  [][]*Reservation // per open booking, one reservation per limiter
	lims  []testLimiter
	clk   *ManualClock
	steps int
}

// step applies one random operation on key to every limiter and fails if
// their answers differ.
func (tr *traceRunner) step(t *testing.T, key string) {
	t.Helper()
	k := tr.rng.IntN(suiteLimit + 1)
	tr.steps++
	switch op := tr.rng.IntN(10); {
	case op < 3:
		var first bool
		for i, lim := range tr.lims {
			got := lim.Allow(key)
			if i == 0 {
				first = got
			} else if got != first {
				t.Fatalf("step %d: Allow(%q): %v and %v", tr.steps, key, first, got)
			}
		}
	case op < 7:
		var first Decision
		for i, lim := range tr.lims {
			got := suiteAllowN(t, lim, key, k)
			if i == 0 {
				first = got
			} else if got != first {
				t.Fatalf("step %d: AllowN(%q, %d): %+v and %+v", tr.steps, key, k, first, got)
			}
		}
	case op < 8:
		var rs []*Reservation
		for i, lim := range tr.lims {
			r := suiteReserve(t, lim, key, k)
			if i > 0 && (r.OK() != rs[0].OK() || r.Decision() != rs[0].Decision() || !r.TimeToAct().Equal(rs[0].TimeToAct())) {
				t.Fatalf("step %d: Reserve(%q, %d): %v %+v and %v %+v",
					tr.steps, key, k, rs[0].OK(), rs[0].Decision(), r.OK(), r.Decision())
			}
			rs = append(rs, r)
		}
		tr.open = append(tr.open, rs)
	default:
		if len(tr.open) > 0 {
			j := tr.rng.IntN(len(tr.open))
			if tr.rng.IntN(2) == 0 {
				j = len(tr.open) - 1
			}
			for _, r := range tr.open[j] {
				r.Cancel()
			}
			tr.open = append(tr.open[:j], tr.open[j+1:]...)
		}
	}
	if len(tr.open) > 16 {
		tr.open = tr.open[1:]
	}
}

func (tr *traceRunner) comparePeeks(t *testing.T) {
	t.Helper()
	for _, key := range tr.keys {
		first := suitePeek(t, tr.lims[0], key)
		for _, lim := range tr.lims[1:] {
			if got := suitePeek(t, lim, key); got != first {
				t.Fatalf("step %d: peek(%q): %+v and %+v", tr.steps, key, first, got)
			}
		}
	}
}

// testEvictionLossless runs a random trace on two limiters: one swept after
// every step, one never. Dropping keys at rest must change no answer.
func testEvictionLossless(t *testing.T, alg algorithm) {
	clk := NewManualClock(suiteT0)
	var lims []testLimiter
	for range 2 {
		lim, err := alg.new(suiteLimit, suitePeriod, clk)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	tr := &traceRunner{rng: rand.New(rand.NewPCG(7, 11)), keys: []string{"a", "b", "c", ""}, lims: lims, clk: clk}
	for range 3000 {
		key := tr.keys[tr.rng.IntN(len(tr.keys))]
		switch tr.rng.IntN(5) {
		case 0:
			clk.Advance(time.Duration(tr.rng.Int64N(int64(3 * suitePeriod))))
		case 1:
			clk.Advance(time.Duration(tr.rng.Int64N(int64(suitePeriod / suiteLimit))))
		case 2:
			// To the instant key comes to rest, or 1 ns before: where an
			// imprecise atRest would drop a key too early.
			if reset := suitePeek(t, lims[1], key).ResetAfter; reset > 0 {
				clk.Advance(reset - time.Duration(tr.rng.IntN(2)))
			}
		}
		tr.step(t, key)
		lims[0].Sweep()
		tr.comparePeeks(t)
	}
	if s := lims[0].Stats(); s.EvictedAtRest < 100 {
		t.Errorf("the swept limiter dropped only %d keys at rest: the test proves little", s.EvictedAtRest)
	}
}

// testEvictionAtCap runs visits of two keys at a time, among twelve, with
// idle gaps between visits, on a limiter capped at four keys and on one
// without a cap: the capped one must drop only keys at rest, and answer
// alike.
func testEvictionAtCap(t *testing.T, alg algorithm) {
	clk := NewManualClock(suiteT0)
	capped, err := alg.new(suiteLimit, suitePeriod, clk, WithMaxKeys(4))
	if err != nil {
		t.Fatal(err)
	}
	free, err := alg.new(suiteLimit, suitePeriod, clk)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	tr := &traceRunner{rng: rand.New(rand.NewPCG(3, 5)), lims: []testLimiter{capped, free}, clk: clk}
	for range 150 {
		i := tr.rng.IntN(len(keys))
		j := (i + 1 + tr.rng.IntN(len(keys)-1)) % len(keys)
		tr.keys = []string{keys[i], keys[j]}
		for range 12 {
			clk.Advance(time.Duration(tr.rng.Int64N(int64(suitePeriod / suiteLimit))))
			tr.step(t, tr.keys[tr.rng.IntN(2)])
			tr.comparePeeks(t)
		}
		tr.open = nil                 // bookings of a visit are not cancelled after it
		clk.Advance(20 * suitePeriod) // every key comes to rest
	}
	s := capped.Stats()
	if s.Keys > 4 || s.EvictedLRU != 0 || s.EvictedAtRest < 100 {
		t.Errorf("capped store: %+v; want at most 4 keys, no LRU eviction, many at rest", s)
	}
}

func testInvalidConstructor(t *testing.T, alg algorithm) {
	clk := NewManualClock(suiteT0)
	cases := []struct {
		limit  int
		period time.Duration
		clk    Clock
		opts   []Option
		want   []error // the error matches one of these
	}{
		{0, time.Second, clk, nil, []error{ErrInvalidCapacity, ErrInvalidRate}},
		{-3, time.Second, clk, nil, []error{ErrInvalidCapacity, ErrInvalidRate}},
		{4, 0, clk, nil, []error{ErrInvalidRate}},
		{4, -time.Second, clk, nil, []error{ErrInvalidRate}},
		{4, time.Second, nil, nil, []error{ErrInvalidOption}},
		{4, time.Second, clk, []Option{WithShards(3)}, []error{ErrInvalidOption}},
		{4, time.Second, clk, []Option{WithShards(0)}, []error{ErrInvalidOption}},
		{4, time.Second, clk, []Option{WithMaxKeys(-1)}, []error{ErrInvalidOption}},
		{4, time.Second, clk, []Option{WithSweepInterval(-time.Second)}, []error{ErrInvalidOption}},
	}
	for _, c := range cases {
		lim, err := alg.new(c.limit, c.period, c.clk, c.opts...)
		matched := false
		for _, w := range c.want {
			matched = matched || errors.Is(err, w)
		}
		if !matched || lim != nil {
			t.Errorf("new(%d, %v, clock %v, %d options): %v, %v; want one of %v",
				c.limit, c.period, c.clk != nil, len(c.opts), lim, err, c.want)
		}
	}
}

// testBackwardsClock uses the whole limit at t0, then moves the clock back
// by various amounts: nothing more may be allowed.
func testBackwardsClock(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	if d := suiteAllowN(t, lim, "k", suiteLimit); !d.Allowed {
		t.Fatalf("t0: AllowN(limit): %+v", d)
	}
	for _, back := range []time.Duration{1, suitePeriod / 3, suitePeriod, 5 * suitePeriod, 0} {
		clk.Set(suiteT0.Add(-back))
		if lim.Allow("k") {
			t.Errorf("t0-%v: Allow allowed", back)
		}
		if d := suiteAllowN(t, lim, "k", 1); d.Allowed || d.Remaining != 0 {
			t.Errorf("t0-%v: AllowN(1): %+v", back, d)
		}
	}
}

// testNoAllocations: Allow and AllowN on an existing key, and a peek at an
// absent key, allocate nothing.
func testNoAllocations(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	lim.Allow("k")
	for name, f := range map[string]func(){
		"Allow":        func() { lim.Allow("k") },
		"AllowN":       func() { _, _ = lim.AllowN(bg, "k", 1) },
		"peek absent":  func() { _, _ = lim.AllowN(bg, "absent", 0) },
		"peek present": func() { _, _ = lim.AllowN(bg, "k", 0) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

// testBackwardsClockAfterEviction: a key dropped at rest, then seen at an
// earlier instant (the clock went back), gets no more than if it had been
// kept: here, nothing.
func testBackwardsClockAfterEviction(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	makeBusy(t, alg, lim, "k")
	clk.Set(suiteT0.Add(10 * suitePeriod))
	lim.Sweep()
	if s := lim.Stats(); s.Keys != 0 {
		t.Fatalf("the key at rest was not dropped: %+v", s)
	}
	clk.Set(suiteT0.Add(1))
	if lim.Allow("k") {
		t.Fatal("the dropped key was allowed at an instant it had nothing left")
	}
	if d := suitePeek(t, lim, "k"); d.Remaining != 0 {
		t.Fatalf("the dropped key has %d remaining at an instant it had nothing left", d.Remaining)
	}
}

// testBackwardsClockRandom moves the clock back and forth at random within
// half a period of t0, sweeping keys at rest before every step if sweep is
// set. Remaining never grows when the clock steps back, and no more events
// are allowed than the limit plus what a steadily advancing clock would
// have refilled by the latest time reached.
func testBackwardsClockRandom(t *testing.T, alg algorithm, sweep bool) {
	for seed := uint64(1); seed <= 4; seed++ {
		lim, clk := newSuiteLimiter(t, alg)
		rng := rand.New(rand.NewPCG(seed, 17))
		var latest time.Duration
		allowed := 0
		prev := suitePeek(t, lim, "k")
		for i := range 500 {
			at := time.Duration(rng.Int64N(int64(suitePeriod / 2)))
			back := at < clk.Now().Sub(suiteT0)
			clk.Set(suiteT0.Add(at))
			latest = max(latest, at)
			if sweep {
				lim.Sweep()
			}
			if d := suitePeek(t, lim, "k"); back && d.Remaining > prev.Remaining {
				t.Fatalf("seed %d step %d: back to t0+%v: Remaining %d, was %d", seed, i, at, d.Remaining, prev.Remaining)
			}
			if rng.IntN(2) == 0 {
				if lim.Allow("k") {
					allowed++
				}
			} else if n := 1 + rng.IntN(2); suiteAllowN(t, lim, "k", n).Allowed {
				allowed += n
			}
			prev = suitePeek(t, lim, "k")
			bound := suiteLimit + int(int64(latest)*suiteLimit/int64(suitePeriod))
			if allowed > bound {
				t.Fatalf("seed %d step %d: %d allowed by t0+%v; bound %d", seed, i, allowed, latest, bound)
			}
		}
	}
}
