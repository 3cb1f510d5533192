package ratelimit

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// mustTake takes n on key and fails the test unless the reservation's OK
// is wantOK.
func mustTake(t *testing.T, l Taker, key string, n int, wantOK bool) *Reservation {
	t.Helper()
	r, err := l.Take(bg, key, n)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() != wantOK || r.Decision().Allowed != (wantOK || n == 0) { // a peek is allowed, as AllowN's
		t.Fatalf("Take(%q, %d): OK %v, Decision %+v; want OK %v", key, n, r.OK(), r.Decision(), wantOK)
	}
	return r
}

func mustSettle(t *testing.T, r *Reservation, actual int) Decision {
	t.Helper()
	d, err := r.Settle(actual)
	if err != nil {
		t.Fatalf("Settle(%d): %v", actual, err)
	}
	return d
}

// TestTokenBucketSettleSurplus: capacity 10 at 10/s. A Take of 5 settled
// at 2 gives 3 back, also after its time to act (the clock has moved on),
// as long as it is the latest booking on its key.
func TestTokenBucketSettleSurplus(t *testing.T) {
	tb, clk := newTB(t, PerSecond(10), 10)
	r := mustTake(t, tb, "k", 5, true)
	if got := r.Decision().Remaining; got != 5 {
		t.Fatalf("Remaining after Take(5): %d, want 5", got)
	}
	clk.Advance(100 * time.Millisecond) // one token back by refill; the booking has acted
	d := mustSettle(t, r, 2)
	// 10 - 2 taken at t0, one interval of refill since: full at t0+200ms,
	// 100ms from now, holding 9.
	if !d.Allowed || d.Remaining != 9 || d.ResetAfter != 100*time.Millisecond || d.Limit != 10 {
		t.Fatalf("after Settle(2): %+v, want Allowed, Remaining 9, ResetAfter 100ms, Limit 10", d)
	}
	r.Cancel() // does nothing after Settle
	if d := tbPeek(t, tb); d.Remaining != 9 {
		t.Fatalf("Cancel after Settle changed the bucket: %+v", d)
	}
}

// TestTokenBucketSettleSurplusNotLatest: a booking with a later one held
// gives no surplus back (the tail rule), and the later one's surplus still
// comes back.
func TestTokenBucketSettleSurplusNotLatest(t *testing.T) {
	tb, _ := newTB(t, PerSecond(10), 10)
	r1 := mustTake(t, tb, "k", 4, true)
	r2 := mustTake(t, tb, "k", 4, true)
	if d := mustSettle(t, r1, 0); d.Remaining != 2 {
		t.Fatalf("r1 settled at 0 with r2 after it: %+v, want Remaining 2 (nothing back)", d)
	}
	if d := mustSettle(t, r2, 1); d.Remaining != 5 {
		t.Fatalf("r2 settled at 1: %+v, want Remaining 5 (3 back)", d)
	}
}

// TestTokenBucketSettleDebtDelaysExactly: capacity 5 at 1/s. A Take of 1
// settled at 10 books 9 more: the bucket, which held 4, owes 5, so the next
// event waits exactly 5s more than the 1s a token takes: 6s.
func TestTokenBucketSettleDebtDelaysExactly(t *testing.T) {
	tb, clk := newTB(t, PerSecond(1), 5)
	r := mustTake(t, tb, "k", 1, true)
	d := mustSettle(t, r, 10)
	if d.Remaining != 0 || d.ResetAfter != 10*time.Second {
		t.Fatalf("after Settle(10): %+v, want Remaining 0, ResetAfter 10s", d)
	}
	if d, _ := tb.AllowN(bg, "k", 1); d.Allowed || d.RetryAfter != 6*time.Second {
		t.Fatalf("AllowN(1) after the debt: %+v, want refused with RetryAfter 6s", d)
	}
	clk.Advance(6*time.Second - 1)
	if tb.Allow("k") {
		t.Fatal("allowed 1ns before the debt is paid")
	}
	clk.Advance(1)
	if !tb.Allow("k") {
		t.Fatal("refused once the debt is paid")
	}
	if tb.Allow("k") {
		t.Fatal("a second event allowed at once after paying the debt")
	}
}

// TestTokenBucketSettleDebtAfterRefill: an excess settled after the
// bucket has refilled is charged from now, on the full bucket, as it is on
// a key the store dropped at rest (see TestLateSettleIgnoresDrop); while
// the bucket has not refilled, it is charged from where TAT stands.
// Capacity 10 at 1/s: a Take of 1 at t0 (TAT t0+1s) settled at 15 at
// t0+10s or t0+20s leaves TAT 14s past now: 4 tokens short, full in 14s;
// a Take of 10 at t0 (TAT t0+10s) settled at 15 at t0+5s leaves TAT at
// t0+15s: full in 10s, no token now.
func TestTokenBucketSettleDebtAfterRefill(t *testing.T) {
	for _, c := range []struct {
		took      int
		after     time.Duration
		remaining int
		reset     time.Duration
	}{{1, 10 * time.Second, 0, 14 * time.Second}, {1, 20 * time.Second, 0, 14 * time.Second}, {10, 5 * time.Second, 0, 10 * time.Second}} {
		tb, clk := newTB(t, PerSecond(1), 10)
		r := mustTake(t, tb, "k", c.took, true)
		clk.Advance(c.after)
		if d := mustSettle(t, r, 15); d.Remaining != c.remaining || d.ResetAfter != c.reset {
			t.Errorf("took %d, settled %v after: %+v, want Remaining %d, ResetAfter %v", c.took, c.after, d, c.remaining, c.reset)
		}
	}
}

// TestSettleErrors: the error contract, on the token bucket.
func TestSettleErrors(t *testing.T) {
	tb, _ := newTB(t, PerSecond(1), 2)
	r := mustTake(t, tb, "k", 2, true)
	if _, err := r.Settle(-1); !errors.Is(err, ErrNegativeN) {
		t.Fatalf("Settle(-1): %v, want ErrNegativeN", err)
	}
	if d := tbPeek(t, tb); d.Remaining != 0 {
		t.Fatalf("Settle(-1) changed the bucket: %+v", d)
	}
	mustSettle(t, r, 2) // still settleable after the refused call
	if _, err := r.Settle(1); !errors.Is(err, ErrSettled) {
		t.Fatalf("second Settle: %v, want ErrSettled", err)
	}

	refused := mustTake(t, tb, "k", 1, false)
	if _, err := refused.Settle(0); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle of a refused Take: %v, want ErrSettled", err)
	}
	if d := refused.Decision(); d.RetryAfter != time.Second {
		t.Fatalf("refused Take's Decision: %+v, want RetryAfter 1s as AllowN", d)
	}

	tb2, _ := newTB(t, PerSecond(1), 2)
	c := mustTake(t, tb2, "k", 1, true)
	c.Cancel()
	if _, err := c.Settle(1); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle after Cancel: %v, want ErrSettled", err)
	}

	foreign := NewReservation(nil, true, Decision{Allowed: true}, time.Now(), nil)
	if _, err := foreign.Settle(1); !errors.Is(err, ErrCannotSettle) {
		t.Fatalf("Settle without a SettleFunc: %v, want ErrCannotSettle", err)
	}
	var got int
	f := NewReservation(nil, true, Decision{}, time.Now(), nil).SetSettle(func(_ time.Time, actual int) (Decision, error) {
		got = actual
		return Decision{Allowed: true, Limit: 7}, nil
	})
	if d, err := f.Settle(3); err != nil || got != 3 || d.Limit != 7 {
		t.Fatalf("SetSettle: %+v, %v, called with %d", d, err, got)
	}
	if _, err := f.Settle(3); !errors.Is(err, ErrSettled) {
		t.Fatalf("second Settle through SetSettle: %v, want ErrSettled", err)
	}
}

// TestTakeContract: Take decides as AllowN does.
func TestTakeContract(t *testing.T) {
	tb, _ := newTB(t, PerSecond(1), 3)
	if r := mustTake(t, tb, "k", 0, false); r.Decision().Remaining != 3 {
		t.Fatalf("peek: %+v", r.Decision())
	}
	if _, err := tb.Take(bg, "k", 4); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("Take(4) of 3: %v, want ErrExceedsLimit", err)
	}
	if _, err := tb.Take(bg, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Fatalf("Take(-1): %v, want ErrNegativeN", err)
	}
	r := mustTake(t, tb, "k", 3, true)
	if r.Delay() != 0 || r.Decision().Remaining != 0 {
		t.Fatalf("Take(3): %+v, delay %v", r.Decision(), r.Delay())
	}
	mustTake(t, tb, "k", 1, false)
}

// TestResetVoidsOnlyItsKey: a Reset voids the give-back of the bookings
// on its key alone. Before, it voided every key's.
func TestResetVoidsOnlyItsKey(t *testing.T) {
	tb, _ := newTB(t, PerSecond(10), 2)
	ra := mustTake(t, tb, "a", 2, true)
	rb := mustTake(t, tb, "b", 2, true)
	tb.Reset("a")
	rb.Cancel()
	if d, _ := tb.AllowN(bg, "b", 0); d.Remaining != 2 {
		t.Fatalf("b after Cancel, a reset: %+v, want Remaining 2", d)
	}
	// a, reset, books 2 again, leaving its TAT where ra left it: ra's
	// Cancel must not give back the new booking's tokens.
	mustTake(t, tb, "a", 2, true)
	ra.Cancel()
	if d, _ := tb.AllowN(bg, "a", 0); d.Remaining != 0 {
		t.Fatalf("a after a Cancel of a booking from before its Reset: %+v, want Remaining 0", d)
	}
}

// TestSettleBehaviour is the behaviour suite's part for Settle and Take,
// over the registry of algorithms.
func TestSettleBehaviour(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, alg algorithm)
	}{
		{"TakeIsAllowN", testTakeIsAllowN},
		{"SettleExact", testSettleExact},
		{"SettleSurplusLatest", testSettleSurplusLatest},
		{"SettleSurplusAfterAct", testSettleSurplusAfterAct},
		{"SettleErrors", testSettleErrors},
		{"SettleDebtDelays", testSettleDebtDelays},
		{"SettleAfterReset", testSettleAfterReset},
		{"SettleAfterResetAndDrop", testSettleAfterResetAndDrop},
		{"SettleAfterSetRate", testSettleAfterSetRate},
		{"SettleHugeDebt", testSettleHugeDebt},
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, alg) })
			}
		})
	}
}

func suiteTake(t *testing.T, lim testLimiter, key string, n int) *Reservation {
	t.Helper()
	r, err := lim.(Taker).Take(bg, key, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return r
}

// testTakeIsAllowN: Take decides as AllowN does, on two limiters driven
// alike, and its Reservation is OK exactly when AllowN allows.
func testTakeIsAllowN(t *testing.T, alg algorithm) {
	a, clkA := newSuiteLimiter(t, alg)
	b, clkB := newSuiteLimiter(t, alg)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 200 {
		n := rng.IntN(suiteLimit + 1)
		r := suiteTake(t, a, "k", n)
		d := suiteAllowN(t, b, "k", n)
		if r.Decision() != d || r.OK() != (d.Allowed && n > 0) {
			t.Fatalf("step %d: Take(%d) %+v OK %v, AllowN %+v", i, n, r.Decision(), r.OK(), d)
		}
		if r.OK() && (r.Delay() != 0 || !r.TimeToAct().Equal(clkA.Now())) {
			t.Fatalf("step %d: an OK Take must act now: delay %v", i, r.Delay())
		}
		step := time.Duration(rng.Int64N(int64(suitePeriod / suiteLimit)))
		clkA.Advance(step)
		clkB.Advance(step)
	}
}

// testSettleExact: settling at the estimate changes nothing, and Cancel
// then does nothing.
func testSettleExact(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 2)
	before := suitePeek(t, lim, "k")
	if d := mustSettle(t, r, 2); d != before {
		t.Fatalf("Settle(2) of 2: %+v, want %+v", d, before)
	}
	r.Cancel()
	if d := suitePeek(t, lim, "k"); d != before {
		t.Fatalf("Cancel after Settle: %+v, want %+v", d, before)
	}
}

// testSettleSurplusLatest: the latest booking settled at 0 is given back
// whole, as if never made; settled at 1 it keeps 1.
func testSettleSurplusLatest(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	full := suitePeek(t, lim, "k")
	r := suiteTake(t, lim, "k", suiteLimit)
	if d := mustSettle(t, r, 0); d != full {
		t.Fatalf("Settle(0): %+v, want %+v", d, full)
	}
	ref, _ := newSuiteLimiter(t, alg)
	suiteAllowN(t, ref, "k", 1)
	r = suiteTake(t, lim, "k", suiteLimit)
	if d, want := mustSettle(t, r, 1), suitePeek(t, ref, "k"); d != want {
		t.Fatalf("Settle(1) of %d: %+v, want %+v (as AllowN(1))", suiteLimit, d, want)
	}
}

// testSettleSurplusAfterAct: the time to act having passed, Cancel gives
// nothing back but Settle still gives the surplus back (the latest
// booking, its window still current).
func testSettleSurplusAfterAct(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	ref, clkRef := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 3)
	suiteAllowN(t, ref, "k", 1)
	clk.Advance(time.Nanosecond)
	clkRef.Advance(time.Nanosecond)
	if d, want := mustSettle(t, r, 1), suitePeek(t, ref, "k"); d != want {
		t.Fatalf("Settle(1) of 3, 1ns after: %+v, want %+v", d, want)
	}
}

// testSettleErrors: the error contract, on every algorithm.
func testSettleErrors(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 1)
	before := suitePeek(t, lim, "k")
	if _, err := r.Settle(-1); !errors.Is(err, ErrNegativeN) {
		t.Fatalf("Settle(-1): %v", err)
	}
	if d := suitePeek(t, lim, "k"); d != before {
		t.Fatalf("Settle(-1) changed %+v to %+v", before, d)
	}
	r.Cancel() // still cancellable after the refused Settle
	if _, err := r.Settle(1); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle after Cancel: %v", err)
	}
	makeBusy(t, alg, lim, "k")
	if r := suiteTake(t, lim, "k", 1); r.OK() {
		t.Fatal("Take on a busy key: OK")
	} else if _, err := r.Settle(0); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle of a refused Take: %v", err)
	}
	r = suiteReserve(t, lim, "other", 1)
	mustSettle(t, r, 1)
	if _, err := r.Settle(1); !errors.Is(err, ErrSettled) {
		t.Fatalf("Settle twice: %v", err)
	}
}

// debtCases pins, for each algorithm, how a debt delays what follows: a
// Take of 1 at t0 on a fresh key, allowing 4 per second, settled at 10,
// books 9 more. after is when the next event is first allowed (not 1ns
// before), and then how many more are allowed at that instant.
var debtCases = map[string]struct {
	after time.Duration
	then  int
	why   string
}{
	// 10 tokens of 250ms taken from 4: TAT t0+2.5s; one more conforms
	// once TAT+250ms <= now+1s.
	"TokenBucket": {1750 * time.Millisecond, 1, "TAT at t0+2.5s"},
	// The queue ends at t0+2.5s; Allow needs it empty.
	"LeakyBucket": {2500 * time.Millisecond, 1, "queue end at t0+2.5s"},
	// 10 counted: windows [0,1s) and [1s,2s) full, 2 in [2s,3s).
	"FixedWindow": {2 * time.Second, 2, "carried into the window at 2s"},
	// 10 instants at t0: the key is closed until they leave the window.
	"SlidingLog": {time.Second, 4, "instants at t0 leave at t0+1s"},
	// Carried as the fixed window, the window at 2s holding 2 after one
	// of 4: 4·(1−e)+2+1 <= 4 at e = 3/4.
	"SlidingWindowCounter": {2750 * time.Millisecond, 1, "weighted count of the window at 2s"},
	// The token bucket's: the level is 10 at t0 (C = 4); one more fits
	// once 7 have leaked out, at 4/s.
	"LeakyMeter": {1750 * time.Millisecond, 1, "level 10 at t0"},
}

func testSettleDebtDelays(t *testing.T, alg algorithm) {
	c, ok := debtCases[alg.name]
	if !ok {
		t.Fatalf("no debt case for %s", alg.name)
	}
	lim, clk := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 1)
	d := mustSettle(t, r, 10)
	if d.Remaining != 0 || !d.Allowed || d.Limit != suiteLimit {
		t.Fatalf("after the debt: %+v", d)
	}
	clk.Advance(c.after - time.Nanosecond)
	if lim.Allow("k") {
		t.Fatalf("allowed 1ns before %v (%s)", c.after, c.why)
	}
	clk.Advance(time.Nanosecond)
	if got := suitePeek(t, lim, "k").Remaining; got != c.then && !alg.shaper { // a shaper's Remaining counts places, not Allows
		t.Fatalf("at %v: Remaining %d, want %d (%s)", c.after, got, c.then, c.why)
	}
	for i := range c.then {
		if !lim.Allow("k") {
			t.Fatalf("at %v: event %d refused (%s)", c.after, i+1, c.why)
		}
	}
	if lim.Allow("k") {
		t.Fatalf("at %v: more than %d allowed (%s)", c.after, c.then, c.why)
	}
}

// testSettleAfterReset: a booking made before a Reset of its key gives no
// surplus back, though the key's state, rebooked, is where the booking
// left it; its excess is still charged.
func testSettleAfterReset(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	old := suiteReserve(t, lim, "k", 2)
	lim.Reset("k")
	suiteReserve(t, lim, "k", 2)
	before := suitePeek(t, lim, "k")
	mustSettle(t, old, 0)
	if d := suitePeek(t, lim, "k"); d != before {
		t.Fatalf("Settle(0) of a booking from before the Reset: %+v, want %+v", d, before)
	}
	old2 := suiteReserve(t, lim, "k", 1)
	lim.Reset("k")
	if d := mustSettle(t, old2, 1+suiteLimit); d.Remaining != 0 {
		t.Fatalf("an excess after a Reset: %+v, want it charged (Remaining 0)", d)
	}
}

// testSettleAfterResetAndDrop: a Reset leaves the key at rest, so Sweep
// drops it; set up again and rebooked, it is still in another generation
// than the bookings from before the Reset.
func testSettleAfterResetAndDrop(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	old := suiteReserve(t, lim, "k", 2)
	oldC := suiteReserve(t, lim, "k", 1)
	lim.Reset("k")
	lim.Sweep()
	if n := lim.Stats().Keys; n != 0 {
		t.Fatalf("%d keys after Reset and Sweep, want 0", n)
	}
	suiteReserve(t, lim, "k", 2)
	suiteReserve(t, lim, "k", 1)
	before := suitePeek(t, lim, "k")
	oldC.Cancel()
	mustSettle(t, old, 0)
	if d := suitePeek(t, lim, "k"); d != before {
		t.Fatalf("Cancel and Settle(0) of bookings from before the Reset: %+v, want %+v", d, before)
	}
}

// testSettleAfterSetRate: a change of rate voids the surplus of bookings
// made before it; an excess is charged in the new parameters.
func testSettleAfterSetRate(t *testing.T, alg algorithm) {
	lim, _ := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 2)
	if err := alg.setRate(lim, Per(suiteLimit, suitePeriod), suiteLimit); err != nil {
		t.Fatal(err)
	}
	before := suitePeek(t, lim, "k")
	if d := mustSettle(t, r, 0); d != before {
		t.Fatalf("Settle(0) after SetRate: %+v, want %+v", d, before)
	}
	r = suiteTake(t, lim, "j", 1)
	if err := alg.setRate(lim, Per(2*suiteLimit, suitePeriod), 2*suiteLimit); err != nil {
		t.Fatal(err)
	}
	if d := mustSettle(t, r, 1+2*suiteLimit); d.Remaining != 0 || d.Limit != 2*suiteLimit {
		t.Fatalf("an excess after SetRate: %+v, want it charged (Remaining 0, Limit %d)", d, 2*suiteLimit)
	}
}

// TestCompositesCannotSettle: ReserveAll (and so Multi) and Shadow hand out
// reservations that cannot be settled, and say so; they are not Takers.
func TestCompositesCannotSettle(t *testing.T) {
	a, _ := newTB(t, PerSecond(10), 5)
	b, _ := newTB(t, PerSecond(10), 5)
	r, err := ReserveAll(bg, 1, []LimiterKey{{a, "k"}, {b, "k"}})
	if err != nil || !r.OK() {
		t.Fatalf("ReserveAll: %v, OK %v", err, r.OK())
	}
	if _, err := r.Settle(1); !errors.Is(err, ErrCannotSettle) {
		t.Fatalf("Settle of a ReserveAll booking: %v, want ErrCannotSettle", err)
	}
	r.Cancel() // still cancellable: the refused Settle spent nothing
	if d, _ := a.AllowN(bg, "k", 0); d.Remaining != 5 {
		t.Fatalf("Cancel after a refused Settle: %+v, want the booking given back", d)
	}
	sh, err := NewShadow(a)
	if err != nil {
		t.Fatal(err)
	}
	r, err = sh.Reserve(bg, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Settle(1); !errors.Is(err, ErrCannotSettle) {
		t.Fatalf("Settle of a Shadow booking: %v, want ErrCannotSettle", err)
	}
	var m any = &Multi{}
	if _, ok := m.(Taker); ok {
		t.Fatal("Multi is a Taker, but its Taker doc says it is not")
	}
	if _, ok := any(sh).(Taker); ok {
		t.Fatal("Shadow is a Taker, but Taker's doc says it is not")
	}
}

// testSettleHugeDebt: a settlement at the largest int books a debt capped
// 2⁶⁰ ns (36.5 years) ahead, without overflow: the key stays closed for
// years (the sliding log, whose debt is instants at the booking's time,
// for one window), and the Decision says so.
func testSettleHugeDebt(t *testing.T, alg algorithm) {
	lim, clk := newSuiteLimiter(t, alg)
	r := suiteTake(t, lim, "k", 1)
	d := mustSettle(t, r, math.MaxInt)
	if d.Remaining != 0 || d.ResetAfter <= 0 || d.ResetAfter > time.Duration(maxSpan)+2*suitePeriod {
		t.Fatalf("after a debt of MaxInt: %+v, want Remaining 0 and ResetAfter within 2⁶⁰ns", d)
	}
	open := 24 * time.Hour * 365 * 36
	if alg.name == "SlidingLog" {
		open = suitePeriod
	}
	clk.Advance(open - time.Nanosecond)
	if lim.Allow("k") {
		t.Fatalf("allowed %v after a debt of MaxInt", open-time.Nanosecond)
	}
	other := suiteTake(t, lim, "j", 1) // the cap is per key: another key is untouched
	if !other.OK() {
		t.Fatal("another key refused")
	}
	if _, err := other.Settle(math.MaxInt); err != nil {
		t.Fatal(err)
	}
}

// TestSettleUnderOverride: a key with an override settles under its own
// parameters: a Take above the limiter's capacity but within the key's,
// its surplus back in the key's units, its debt in them too; and a change
// of the override voids the surplus of bookings made before it.
func TestSettleUnderOverride(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			lim, _ := newSuiteLimiter(t, alg)
			if err := alg.setOverride(lim, "vip", Per(10*suiteLimit, suitePeriod), 10*suiteLimit); err != nil {
				t.Fatal(err)
			}
			r := suiteTake(t, lim, "vip", 5*suiteLimit)
			if !r.OK() {
				t.Fatalf("Take(%d) within the override: %+v", 5*suiteLimit, r.Decision())
			}
			ref, _ := newLimiterAt(t, alg, 10*suiteLimit)
			suiteAllowN(t, ref, "vip", 1)
			if d, want := mustSettle(t, r, 1), suitePeek(t, ref, "vip"); d != want {
				t.Fatalf("Settle(1) under the override: %+v, want %+v", d, want)
			}
			r = suiteReserve(t, lim, "vip", 2)
			if err := alg.setOverride(lim, "vip", Per(20*suiteLimit, suitePeriod), 20*suiteLimit); err != nil {
				t.Fatal(err)
			}
			before := suitePeek(t, lim, "vip")
			if d := mustSettle(t, r, 0); d != before {
				t.Fatalf("Settle(0) after SetOverride: %+v, want %+v (nothing back)", d, before)
			}
		})
	}
}
