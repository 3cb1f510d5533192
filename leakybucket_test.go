package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// lbT0 is the instant the leaky-bucket timelines start from.
var lbT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestLB(t *testing.T, rate Rate, capacity int) (*LeakyBucket, *ManualClock) {
	t.Helper()
	clk := NewManualClock(lbT0)
	lb, err := NewLeakyBucket(rate, capacity, WithClock(clk))
	if err != nil {
		t.Fatalf("NewLeakyBucket(%v, %d): %v", rate, capacity, err)
	}
	return lb, clk
}

func lbAllowN(t *testing.T, lb *LeakyBucket, key string, n int) Decision {
	t.Helper()
	d, err := lb.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

func lbReserve(t *testing.T, lb *LeakyBucket, key string, n int) *Reservation {
	t.Helper()
	r, err := lb.Reserve(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Reserve(%q, %d): %v", key, n, err)
	}
	return r
}

// TestLeakyBucketReserveSpacing books one event at a time on a frozen
// clock: the delays are the slots, exactly 1/3 s apart, rounded up to the
// nanosecond, until the queue of 5 is full.
func TestLeakyBucketReserveSpacing(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(3), 5)
	rows := []struct {
		delay     time.Duration
		remaining int
		reset     time.Duration
	}{
		{0, 4, 333333334 * time.Nanosecond},                             // slot 0 departs now
		{333333334 * time.Nanosecond, 3, 666666667},                     // 1/3 s, rounded up
		{666666667 * time.Nanosecond, 2, time.Second},                   // 2/3 s, rounded up
		{time.Second, 1, 1333333334 * time.Nanosecond},                  // exact: no drift
		{1333333334 * time.Nanosecond, 0, 1666666667 * time.Nanosecond}, // queue full
	}
	for i, row := range rows {
		r := lbReserve(t, lb, "k", 1)
		d := r.Decision()
		if !r.OK() || r.Delay() != row.delay || d.RetryAfter != row.delay ||
			d.Remaining != row.remaining || d.ResetAfter != row.reset || d.Allowed != (row.delay == 0) {
			t.Errorf("booking %d: OK=%v Delay=%v %+v; want OK, Delay %v, Remaining %d, ResetAfter %v",
				i, r.OK(), r.Delay(), d, row.delay, row.remaining, row.reset)
		}
		if want := lbT0.Add(row.delay); !r.TimeToAct().Equal(want) {
			t.Errorf("booking %d: TimeToAct %v, want %v", i, r.TimeToAct(), want)
		}
	}
	// t0: the queue is full; one place frees when slot 0 ends, at 1/3 s.
	r := lbReserve(t, lb, "k", 1)
	want := Decision{Limit: 5, Remaining: 0, RetryAfter: 333333334, ResetAfter: 1666666667}
	if r.OK() || r.Decision() != want || r.Delay() != want.RetryAfter {
		t.Fatalf("full queue: OK=%v %+v Delay %v; want refused %+v", r.OK(), r.Decision(), r.Delay(), want)
	}
	r.Cancel() // a refused reservation has nothing to give back
	// t0+1/3s-1ns: still full (RetryAfter is exact).
	clk.Set(lbT0.Add(333333333))
	if r := lbReserve(t, lb, "k", 1); r.OK() || r.Decision().RetryAfter != 1 {
		t.Fatalf("1 ns early: OK=%v %+v; want refused, RetryAfter 1ns", r.OK(), r.Decision())
	}
	// t0+1/3s rounded up: a place is free; the slot is the sixth, at 5/3 s.
	clk.Set(lbT0.Add(333333334))
	r = lbReserve(t, lb, "k", 1)
	if !r.OK() || !r.TimeToAct().Equal(lbT0.Add(1666666667)) || r.Decision().Remaining != 0 {
		t.Fatalf("retry: OK=%v act %v %+v; want OK at t0+1.666666667s, Remaining 0",
			r.OK(), r.TimeToAct().Sub(lbT0), r.Decision())
	}
}

// TestLeakyBucketAllowOnlyNow: Allow succeeds only when the queue is empty,
// so that the event departs at once.
func TestLeakyBucketAllowOnlyNow(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(2), 3) // slots of 500 ms
	const ms = time.Millisecond
	if !lb.Allow("k") { // t0: fresh key, empty queue
		t.Fatal("t0: first Allow refused")
	}
	if lb.Allow("k") { // t0: the next slot is at 500 ms
		t.Fatal("t0: second Allow allowed")
	}
	// The queue holds the event that departed until its slot ends.
	if d := lbAllowN(t, lb, "k", 0); d != (Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 500 * ms}) {
		t.Errorf("t0 peek: %+v", d)
	}
	clk.Set(lbT0.Add(500*ms - 1))
	if lb.Allow("k") {
		t.Fatal("t0+499.999999ms: Allow allowed")
	}
	d := lbAllowN(t, lb, "k", 1)
	if want := (Decision{Limit: 3, Remaining: 2, RetryAfter: 1, ResetAfter: 1}); d != want {
		t.Errorf("t0+499.999999ms AllowN: %+v, want %+v", d, want)
	}
	clk.Set(lbT0.Add(500 * ms))
	if !lb.Allow("k") {
		t.Fatal("t0+500ms: Allow refused")
	}
	// t0+1s: empty again. AllowN(3) books 3 slots; they act now, together.
	clk.Set(lbT0.Add(time.Second))
	d = lbAllowN(t, lb, "k", 3)
	if want := (Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 1500 * ms}); d != want {
		t.Errorf("t0+1s AllowN(3): %+v, want %+v", d, want)
	}
	// The queue is full: a Reserve is refused until a place frees (0.5 s);
	// AllowN is refused until the queue is empty (1.5 s).
	if r := lbReserve(t, lb, "k", 1); r.OK() || r.Decision().RetryAfter != 500*ms {
		t.Errorf("t0+1s Reserve: OK=%v %+v; want refused, RetryAfter 500ms", r.OK(), r.Decision())
	}
	if d := lbAllowN(t, lb, "k", 1); d.Allowed || d.RetryAfter != 1500*ms || d.ResetAfter != 1500*ms {
		t.Errorf("t0+1s AllowN(1): %+v; want refused, RetryAfter 1.5s", d)
	}
	// t0+2s: two places free, but the third slot is still running.
	clk.Set(lbT0.Add(2 * time.Second))
	if d := lbAllowN(t, lb, "k", 1); d.Allowed || d.Remaining != 2 || d.RetryAfter != 500*ms {
		t.Errorf("t0+2s AllowN(1): %+v; want refused, Remaining 2, RetryAfter 500ms", d)
	}
	r := lbReserve(t, lb, "k", 2) // slots at 2.5 s and 3 s, acting at 2.5 s
	if !r.OK() || r.Delay() != 500*ms || r.Decision().Remaining != 0 || r.Decision().ResetAfter != 1500*ms {
		t.Errorf("t0+2s Reserve(2): OK=%v Delay %v %+v", r.OK(), r.Delay(), r.Decision())
	}
	if r := lbReserve(t, lb, "k", 1); r.OK() || r.Decision().RetryAfter != 500*ms {
		t.Errorf("t0+2s Reserve(1): OK=%v %+v; want refused, RetryAfter 500ms", r.OK(), r.Decision())
	}
}

// TestLeakyBucketCancel: Cancel gives back the tail of the queue; a booking
// with a later one still held leaves its slots empty.
func TestLeakyBucketCancel(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(1), 4)
	a := lbReserve(t, lb, "k", 1) // slot [0s, 1s), acts at t0
	b := lbReserve(t, lb, "k", 2) // slots [1s, 3s), acts at 1s
	c := lbReserve(t, lb, "k", 1) // slot [3s, 4s), acts at 3s
	if a.Delay() != 0 || b.Delay() != time.Second || c.Delay() != 3*time.Second {
		t.Fatalf("delays %v %v %v; want 0 1s 3s", a.Delay(), b.Delay(), c.Delay())
	}
	peek := func() Decision { return lbAllowN(t, lb, "k", 0) }
	if d := peek(); d.Remaining != 0 || d.ResetAfter != 4*time.Second {
		t.Fatalf("after bookings: %+v", d)
	}
	a.Cancel() // not the tail: its slot stays, empty
	if d := peek(); d.Remaining != 0 || d.ResetAfter != 4*time.Second {
		t.Fatalf("after cancelling a: %+v; want unchanged", d)
	}
	c.Cancel() // the tail: the queue ends at 3 s again
	if d := peek(); d.Remaining != 1 || d.ResetAfter != 3*time.Second {
		t.Fatalf("after cancelling c: %+v; want Remaining 1, ResetAfter 3s", d)
	}
	c.Cancel() // twice: nothing more
	b.Cancel() // now the tail: back to 1 s; a's slot still holds its place
	if d := peek(); d.Remaining != 3 || d.ResetAfter != time.Second {
		t.Fatalf("after cancelling b: %+v; want Remaining 3, ResetAfter 1s", d)
	}
	// The output idles through a's slot: the next booking takes b's first.
	e := lbReserve(t, lb, "k", 1)
	if e.Delay() != time.Second {
		t.Fatalf("booking after cancels: Delay %v, want 1s", e.Delay())
	}
	// t0+1s, the slot's start: not yet passed, so Cancel gives it back.
	clk.Set(lbT0.Add(time.Second))
	e.Cancel()
	if d := peek(); d != (Decision{Allowed: true, Limit: 4, Remaining: 4}) {
		t.Fatalf("t0+1s after cancelling e at its slot: %+v; want an empty queue", d)
	}
	f := lbReserve(t, lb, "k", 1) // departs now
	clk.Set(lbT0.Add(time.Second + 1))
	f.Cancel() // 1 ns after its slot started: the event has acted
	if d := peek(); d.Remaining != 3 || d.ResetAfter != time.Second-1 {
		t.Fatalf("t0+1s+1ns after cancelling f late: %+v; want Remaining 3", d)
	}
}

// TestLeakyBucketCancelReverseOrder: cancelling bookings from the tail back
// restores the queue exactly, whatever the booking sizes.
func TestLeakyBucketCancelReverseOrder(t *testing.T) {
	lb, _ := newTestLB(t, Per(7, 10*time.Millisecond), 20) // slots of 1,428,571 3/7 ns
	before := lbAllowN(t, lb, "k", 0)
	var rs []*Reservation
	for _, n := range []int{3, 1, 5, 2, 7} {
		rs = append(rs, lbReserve(t, lb, "k", n))
	}
	if d := lbAllowN(t, lb, "k", 0); d.Remaining != 2 {
		t.Fatalf("after booking 18: %+v", d)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].Cancel()
	}
	if d := lbAllowN(t, lb, "k", 0); d != before {
		t.Fatalf("after cancelling all: %+v, want %+v", d, before)
	}
	if !lb.Allow("k") {
		t.Fatal("Allow after cancelling all: refused")
	}
}

// TestLeakyBucketNoDrift: at 3 per second, a queue kept busy departs
// events at k/3 s exactly, rounded up, however long the run.
func TestLeakyBucketNoDrift(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(3), 2)
	slot := func(k int64) time.Duration { return time.Duration((k*int64(time.Second) + 2) / 3) } // ceil(k·10⁹/3) ns
	if !lb.Allow("k") {
		t.Fatal("t0: refused")
	}
	for k := int64(0); k < 3000; k++ {
		// When event k departs, book event k+1: it goes one slot later.
		clk.Set(lbT0.Add(slot(k)))
		if r := lbReserve(t, lb, "k", 1); !r.OK() || r.TimeToAct().Sub(lbT0) != slot(k+1) {
			t.Fatalf("event %d: OK=%v, acts at %v, want %v", k+1, r.OK(), r.TimeToAct().Sub(lbT0), slot(k+1))
		}
	}
	clk.Set(lbT0.Add(slot(3001) - 1))
	if lb.Allow("k") {
		t.Fatal("allowed 1 ns before the queue drained")
	}
	clk.Set(lbT0.Add(slot(3001))) // 1000⅓ s, rounded up
	if !lb.Allow("k") {
		t.Fatal("refused when the queue drained at 1000⅓ s")
	}
	// A queue of 3,000,000 filled at once at t0+1000s drains at exactly
	// t0+1,001,000s.
	big, clk := newTestLB(t, PerSecond(3), 3_000_000)
	clk.Set(lbT0.Add(1000 * time.Second))
	d := lbAllowN(t, big, "k", 3_000_000)
	if !d.Allowed || d.ResetAfter != 1_000_000*time.Second {
		t.Fatalf("AllowN(3e6): %+v; want ResetAfter 1e6 s", d)
	}
	clk.Set(lbT0.Add(1_001_000*time.Second - 1))
	if big.Allow("k") {
		t.Fatal("allowed 1 ns before the queue drained")
	}
	clk.Set(lbT0.Add(1_001_000 * time.Second))
	if !big.Allow("k") {
		t.Fatal("refused when the queue drained")
	}
}

// TestLeakyBucketBackwards: a clock that moves backwards never frees
// places; the queue looks fuller from an earlier time.
func TestLeakyBucketBackwards(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(1), 2)
	if !lb.Allow("k") { // t0: slot [0, 1s)
		t.Fatal("t0: refused")
	}
	clk.Set(lbT0.Add(-10 * time.Second)) // t0-10s: the queue reaches 11 s ahead
	if lb.Allow("k") {
		t.Fatal("t0-10s: Allow allowed")
	}
	d := lbAllowN(t, lb, "k", 0)
	if d.Remaining != 0 || d.ResetAfter != 11*time.Second {
		t.Fatalf("t0-10s peek: %+v; want Remaining 0, ResetAfter 11s", d)
	}
	r := lbReserve(t, lb, "k", 1) // a place frees when the queue is 1 s from its end
	if r.OK() || r.Decision().RetryAfter != 10*time.Second {
		t.Fatalf("t0-10s Reserve: OK=%v %+v; want refused, RetryAfter 10s", r.OK(), r.Decision())
	}
	clk.Set(lbT0.Add(5 * time.Second)) // idle since 1 s
	clk.Set(lbT0.Add(1500 * time.Millisecond))
	// Back to 1.5 s: the last event departed at 0 s, its slot ran to 1 s,
	// so this one can go.
	if !lb.Allow("k") {
		t.Fatal("t0+1.5s: refused")
	}
	clk.Set(lbT0.Add(1200 * time.Millisecond)) // its slot runs to 2.5 s
	// From 1.2 s the queue (to 2.5 s) looks two slots long: it is full, and
	// a place frees at 1.5 s.
	if d := lbAllowN(t, lb, "k", 0); d.Remaining != 0 {
		t.Fatalf("t0+1.2s peek: %+v; want Remaining 0", d)
	}
	r = lbReserve(t, lb, "k", 1)
	if r.OK() || r.Decision().RetryAfter != 300*time.Millisecond {
		t.Fatalf("t0+1.2s Reserve: OK=%v %+v; want refused, RetryAfter 300ms", r.OK(), r.Decision())
	}
}

// TestLeakyBucketWaitFullQueue: WaitN on a full queue fails at once; the
// error matches context.DeadlineExceeded only if the deadline is the cause.
func TestLeakyBucketWaitFullQueue(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(1), 2)
	lbReserve(t, lb, "k", 1) // slot [0, 1s)
	lbReserve(t, lb, "k", 1) // slot [1s, 2s): the queue is full
	before := lbAllowN(t, lb, "k", 0)

	var le *LimitError
	err := promptly(t, "Wait", func() error { return lb.Wait(context.Background(), "k") }) // no deadline
	if !errors.Is(err, ErrLimited) || errors.Is(err, context.DeadlineExceeded) ||
		!errors.As(err, &le) || le.RetryAfter != time.Second {
		t.Fatalf("no deadline: %v; want ErrLimited, retry after 1s", err)
	}
	// The queue ends at 2 s, before the deadline: retrying at 1 s succeeds.
	err = promptly(t, "Wait", func() error { return lb.Wait(fakeDeadline(time.Now().Add(10*time.Second)), "k") })
	if !errors.Is(err, ErrLimited) || errors.Is(err, context.DeadlineExceeded) ||
		!errors.As(err, &le) || le.RetryAfter != time.Second || le.Deadline {
		t.Fatalf("deadline 10s: %v; want ErrLimited only, retry after 1s", err)
	}
	// The queue ends after the deadline: no retry can succeed in time.
	err = promptly(t, "Wait", func() error { return lb.Wait(fakeDeadline(time.Now().Add(1500*time.Millisecond)), "k") })
	if !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) ||
		!errors.As(err, &le) || le.RetryAfter != 2*time.Second {
		t.Fatalf("deadline 1.5s: %v; want ErrLimited and DeadlineExceeded, wait 2s", err)
	}
	if d := lbAllowN(t, lb, "k", 0); d != before {
		t.Fatalf("after refused waits: %+v, want %+v", d, before)
	}
	// t0+1s: a place is free; the slot at 2 s is within a 1.5 s deadline.
	clk.Set(lbT0.Add(time.Second))
	done := make(chan error, 1)
	go func() { done <- lb.Wait(fakeDeadline(time.Now().Add(1500*time.Millisecond)), "k") }()
	waitTimers(t, clk, 1)
	clk.Advance(time.Second - 1)
	if clk.Timers() != 1 {
		t.Fatal("the wait ended before its slot")
	}
	clk.Advance(1)
	if err := <-done; err != nil {
		t.Fatalf("wait for the slot at 2s: %v", err)
	}
	// t0+2s: the slot is not within a deadline of 999,999,999 ns.
	err = promptly(t, "Wait", func() error { return lb.Wait(fakeDeadline(time.Now().Add(time.Second-1)), "k") })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &le) || le.RetryAfter != time.Second {
		t.Fatalf("deadline 1s-1ns: %v; want DeadlineExceeded, wait 1s", err)
	}
}

// TestLeakyBucketSubNanosecondSlots: rates above one per nanosecond work;
// slots finer than the clock depart in groups per nanosecond.
func TestLeakyBucketSubNanosecondSlots(t *testing.T) {
	lb, clk := newTestLB(t, Per(3, time.Nanosecond), 6) // slots of 1/3 ns
	if d := lbAllowN(t, lb, "k", 6); !d.Allowed || d.ResetAfter != 2 {
		t.Fatalf("AllowN(6): %+v; want allowed, queue of 2 ns", d)
	}
	clk.Advance(1)
	if d := lbAllowN(t, lb, "k", 0); d.Remaining != 3 {
		t.Fatalf("after 1 ns: %+v; want 3 places free", d)
	}
	if r := lbReserve(t, lb, "k", 3); !r.OK() || r.Delay() != 1 {
		t.Fatalf("Reserve(3): OK=%v Delay %v; want the slot 1 ns ahead", r.OK(), r.Delay())
	}
}

// TestLeakyBucketCancelFastRate: with slots finer than the clock (10 per
// 3 ns, 0.3 ns each), bookings share a nanosecond, yet Cancel tells the
// tail exactly: b, between a and c, gives nothing back, and c does.
func TestLeakyBucketCancelFastRate(t *testing.T) {
	lb, _ := newTestLB(t, Per(10, 3), 5) // the queue holds 1.5 ns
	lbReserve(t, lb, "k", 1)             // [0, 0.3)
	b := lbReserve(t, lb, "k", 1)        // [0.3, 0.6), acts at 1 ns
	c := lbReserve(t, lb, "k", 1)        // [0.6, 0.9), acts at 1 ns too
	if b.Delay() != 1 || c.Delay() != 1 {
		t.Fatalf("delays %v, %v; want 1ns, 1ns", b.Delay(), c.Delay())
	}
	b.Cancel() // not the tail
	if d := lbAllowN(t, lb, "k", 0); d.Remaining != 2 {
		t.Fatalf("after cancelling b: %+v; want 2 places free (the queue still ends at 0.9 ns)", d)
	}
	c.Cancel() // the tail: the queue ends at 0.6 ns
	if d := lbAllowN(t, lb, "k", 0); d.Remaining != 3 {
		t.Fatalf("after cancelling c: %+v; want 3 places free", d)
	}
}

// TestLeakyBucketErrors: invalid arguments return errors matching the
// sentinels, never panics.
func TestLeakyBucketErrors(t *testing.T) {
	cases := []struct {
		rate     Rate
		capacity int
		opts     []Option
		want     error
	}{
		{Rate{}, 1, nil, ErrInvalidRate},
		{PerSecond(-1), 1, nil, ErrInvalidRate},
		{Per(1, -time.Second), 1, nil, ErrInvalidRate},
		{PerSecond(1), 0, nil, ErrInvalidCapacity},
		{PerSecond(1), -5, nil, ErrInvalidCapacity},
		{PerDay(1), 100 * 365, nil, ErrInvalidCapacity}, // 100 years of queue
		{PerSecond(1), 1, []Option{WithClock(nil)}, ErrInvalidOption},
		{PerSecond(1), 1, []Option{WithShards(3)}, ErrInvalidOption},
		{PerSecond(1), 1, []Option{WithMaxKeys(-1)}, ErrInvalidOption},
	}
	for _, c := range cases {
		lb, err := NewLeakyBucket(c.rate, c.capacity, c.opts...)
		if !errors.Is(err, c.want) || lb != nil {
			t.Errorf("NewLeakyBucket(%v, %d): %v, %v; want %v", c.rate, c.capacity, lb, err, c.want)
		}
	}
	lb, _ := newTestLB(t, PerSecond(1), 3)
	ctx := context.Background()
	for _, n := range []int{-1, 4, 1 << 62} {
		want := ErrExceedsLimit
		if n < 0 {
			want = ErrNegativeN
		}
		if _, err := lb.AllowN(ctx, "k", n); !errors.Is(err, want) {
			t.Errorf("AllowN(%d): %v, want %v", n, err, want)
		}
		if r, err := lb.Reserve(ctx, "k", n); !errors.Is(err, want) || r != nil {
			t.Errorf("Reserve(%d): %v, %v, want %v", n, r, err, want)
		}
		if err := lb.WaitN(ctx, "k", n); !errors.Is(err, want) {
			t.Errorf("WaitN(%d): %v, want %v", n, err, want)
		}
	}
	if s := lb.Stats(); s.Keys != 0 || s.Inserts != 0 {
		t.Errorf("invalid calls created keys: %+v", s)
	}
}

// TestLeakyBucketMatchesTokenBucket: without Cancel, a leaky bucket admits
// into its queue exactly what a token bucket of the same rate and capacity
// allows, with the same Remaining and RetryAfter.
func TestLeakyBucketMatchesTokenBucket(t *testing.T) {
	for _, rate := range []Rate{PerSecond(3), Per(7, 10*time.Millisecond), Every(time.Nanosecond)} {
		for _, capacity := range []int{1, 4, 13} {
			name := fmt.Sprintf("%v/C=%d", rate, capacity)
			t.Run(name, func(t *testing.T) {
				clk := NewManualClock(lbT0)
				lb, err := NewLeakyBucket(rate, capacity, WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				tb, err := NewTokenBucket(rate, capacity, WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(capacity), uint64(rate.N)))
				slot := max(int64(rate.Period)/rate.N, 1)
				ctx := context.Background()
				for i := range 3000 {
					clk.Advance(time.Duration(randStep(rng, slot, capacity)))
					n := rng.IntN(capacity + 1)
					r, _ := lb.Reserve(ctx, "k", n)
					td, _ := tb.AllowN(ctx, "k", n)
					ld := r.Decision()
					if r.OK() != td.Allowed || ld.Remaining != td.Remaining ||
						(!r.OK() && ld.RetryAfter != td.RetryAfter) {
						t.Fatalf("step %d, n=%d: leaky OK=%v %+v, token %+v", i, n, r.OK(), ld, td)
					}
				}
			})
		}
	}
}

// randStep returns an irregular clock step: often zero, often a fraction
// of a slot, sometimes long enough to drain the queue.
func randStep(rng *rand.Rand, slot int64, capacity int) int64 {
	switch rng.IntN(6) {
	case 0, 1:
		return 0
	case 2:
		return rng.Int64N(slot + 1)
	case 3:
		return slot
	case 4:
		return rng.Int64N(4*slot + 1)
	default:
		return rng.Int64N(int64(capacity+2)*slot + 1)
	}
}

// lbOracle is a leaky bucket written as plainly as possible: the slots
// booked, in order, each with its start. Time is scaled by the rate's N so
// that a slot is exactly Period units long.
type lbOracle struct {
	n, period int64 // rate: n per period; a slot is period units of 1/n ns
	capacity  int
	slots     []lbOracleSlot
}

type lbOracleSlot struct {
	start   int64 // scaled: ns·n
	booking int
}

func (o *lbOracle) last() (end int64, ok bool) {
	if len(o.slots) == 0 {
		return 0, false
	}
	return o.slots[len(o.slots)-1].start + o.period, true
}

// held counts the slots that have not ended at t ns.
func (o *lbOracle) held(t int64) int {
	c := 0
	for i := len(o.slots) - 1; i >= 0 && o.slots[i].start+o.period > t*o.n; i-- {
		c++
	}
	return c
}

// start is where a booking made at t ns begins, scaled.
func (o *lbOracle) start(t int64) int64 {
	if end, ok := o.last(); ok && end > t*o.n {
		return end
	}
	return t * o.n
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b } // a >= 0, b > 0

// delay is how long after t ns a booking made at t acts.
func (o *lbOracle) delay(t int64) int64 { return ceilDiv(o.start(t), o.n) - t }

// ok reports whether a booking of k at t succeeds with maxWait (< 0: none).
func (o *lbOracle) ok(t int64, k int, maxWait int64) bool {
	return o.held(t)+k <= o.capacity && (maxWait < 0 || o.delay(t) <= maxWait)
}

// decide books k events at t ns if they fit within maxWait. RetryAfter is
// found by search: the first later nanosecond at which the same call
// succeeds.
func (o *lbOracle) decide(t int64, k int, maxWait int64, id int) (d Decision, act int64, booked bool) {
	d.Limit = o.capacity
	if k == 0 {
		d.Allowed = true
	} else if !o.ok(t, k, maxWait) {
		lo, hi := t, t+int64(o.capacity+2)*ceilDiv(o.period, o.n)+1 // ok(hi) holds
		for lo+1 < hi {
			if mid := lo + (hi-lo)/2; o.ok(mid, k, maxWait) {
				hi = mid
			} else {
				lo = mid
			}
		}
		d.RetryAfter = time.Duration(hi - t)
	} else {
		s := o.start(t)
		for i := range k {
			o.slots = append(o.slots, lbOracleSlot{start: s + int64(i)*o.period, booking: id})
		}
		act, booked = ceilDiv(s, o.n), true
		d.Allowed = act == t
		d.RetryAfter = time.Duration(act - t)
	}
	d.Remaining = o.capacity - o.held(t)
	if end, ok := o.last(); ok && end > t*o.n {
		d.ResetAfter = time.Duration(ceilDiv(end, o.n) - t)
	}
	return d, act, booked
}

// cancel gives back booking id of k slots acting at act, cancelled at t,
// if it has not started and its slots are the last ones.
func (o *lbOracle) cancel(id, k int, act, t int64) {
	if t > act || len(o.slots) < k {
		return
	}
	for _, s := range o.slots[len(o.slots)-k:] {
		if s.booking != id {
			return
		}
	}
	o.slots = o.slots[:len(o.slots)-k]
}

// TestLeakyBucketOracle runs seeded random traces (irregular times, equal
// times, n from 0 to C, Allow, AllowN, Reserve and Cancel in any order)
// against lbOracle and compares every answer.
func TestLeakyBucketOracle(t *testing.T) {
	configs := []struct {
		rate     Rate
		capacity int
	}{
		{PerSecond(3), 5},
		{PerSecond(3), 1},
		{Per(7, 10*time.Millisecond), 16},
		{Every(time.Nanosecond), 3},
		{Per(1000, 7*time.Microsecond), 9}, // 7 ns per slot
	}
	for ci, cfg := range configs {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%v/C=%d/seed=%d", cfg.rate, cfg.capacity, seed), func(t *testing.T) {
				lbOracleTrace(t, cfg.rate, cfg.capacity, rand.New(rand.NewPCG(seed, uint64(ci))))
			})
		}
	}
}

func lbOracleTrace(t *testing.T, rate Rate, capacity int, rng *rand.Rand) {
	clk := NewManualClock(lbT0)
	lb, err := NewLeakyBucket(rate, capacity, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	o := &lbOracle{n: rate.N, period: int64(rate.Period), capacity: capacity}
	type held struct {
		r     *Reservation
		id, n int
		act   int64
	}
	var open []held
	slot := max(int64(rate.Period)/rate.N, 1)
	var now int64 // ns since lbT0
	for i := range 4000 {
		now += randStep(rng, slot, capacity)
		clk.Set(lbT0.Add(time.Duration(now)))
		k := rng.IntN(capacity + 1)
		switch op := rng.IntN(10); {
		case op < 2: // Allow
			want, _, _ := o.decide(now, 1, 0, i)
			if got := lb.Allow("k"); got != want.Allowed {
				t.Fatalf("step %d t=%d: Allow %v, oracle %+v", i, now, got, want)
			}
		case op < 5: // AllowN, maybe a peek
			want, _, _ := o.decide(now, k, 0, i)
			if got := lbAllowN(t, lb, "k", k); got != want {
				t.Fatalf("step %d t=%d: AllowN(%d) %+v, oracle %+v", i, now, k, got, want)
			}
		case op < 8: // Reserve
			want, act, booked := o.decide(now, k, -1, i)
			r := lbReserve(t, lb, "k", k)
			if r.OK() != (booked || k == 0) || r.Decision() != want {
				t.Fatalf("step %d t=%d: Reserve(%d) OK=%v %+v, oracle %v %+v",
					i, now, k, r.OK(), r.Decision(), booked, want)
			}
			if booked {
				if got := r.TimeToAct().Sub(lbT0); got != time.Duration(act) {
					t.Fatalf("step %d: Reserve(%d) acts at %v, oracle %v", i, k, got, time.Duration(act))
				}
				open = append(open, held{r, i, k, act})
			}
		default: // Cancel one open booking, most often a recent one
			if len(open) == 0 {
				continue
			}
			j := len(open) - 1 - min(rng.IntN(3), len(open)-1)
			if rng.IntN(4) == 0 {
				j = rng.IntN(len(open))
			}
			h := open[j]
			open = append(open[:j], open[j+1:]...)
			o.cancel(h.id, h.n, h.act, now)
			h.r.Cancel()
		}
		if len(open) > 64 {
			open = open[1:]
		}
		if got, want := lbAllowN(t, lb, "k", 0), peekOracle(o, now); got != want {
			t.Fatalf("step %d t=%d: peek %+v, oracle %+v", i, now, got, want)
		}
	}
}

func peekOracle(o *lbOracle, now int64) Decision {
	d, _, _ := o.decide(now, 0, 0, -1)
	return d
}

// TestLeakyBucketBackwardsRandom: on random traces where the clock also
// steps back, the queue never looks emptier after a step back, no place is
// ever freed by one, and bookings never overlap: each starts after the
// previous held booking's slots, by whole slots.
func TestLeakyBucketBackwardsRandom(t *testing.T) {
	const capacity = 4
	rate := PerSecond(3)
	slot := int64(rate.Period) / rate.N
	for seed := uint64(1); seed <= 4; seed++ {
		clk := NewManualClock(lbT0)
		lb, err := NewLeakyBucket(rate, capacity, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 99))
		var now int64
		var lastAct, lastN int64 = -1 << 62, 0
		for i := range 3000 {
			before := lbAllowN(t, lb, "k", 0)
			step := randStep(rng, slot, capacity)
			if rng.IntN(3) == 0 {
				step = -step
			}
			now += step
			clk.Set(lbT0.Add(time.Duration(now)))
			after := lbAllowN(t, lb, "k", 0)
			if step < 0 && (after.Remaining > before.Remaining || after.ResetAfter < before.ResetAfter) {
				t.Fatalf("seed %d step %d: back %v freed places: %+v then %+v", seed, i, time.Duration(-step), before, after)
			}
			k := 1 + rng.IntN(capacity)
			if r := lbReserve(t, lb, "k", k); r.OK() {
				act := r.TimeToAct().Sub(lbT0).Nanoseconds()
				if act < now || act-lastAct < lastN*slot { // slots are 333,333,333⅓ ns
					t.Fatalf("seed %d step %d: booking of %d at %d after %d of %d at %d",
						seed, i, k, act, now, lastN, lastAct)
				}
				lastAct, lastN = act, int64(k)
			}
		}
	}
}

// TestLeakyBucketFarAhead: with the clock set decades back, the queue
// looks decades long, so it is full: no slot is ever booked more than C/r
// ahead (at most 36 years, see maxSpan), and RetryAfter stays exact.
func TestLeakyBucketFarAhead(t *testing.T) {
	lb, clk := newTestLB(t, PerSecond(1), 4000)
	future := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	clk.Set(future)
	if !lb.Allow("k") { // the queue ends at 2100-01-01T00:00:01
		t.Fatal("2100: refused")
	}
	clk.Set(lbT0) // 2026: the queue looks 74 years long
	r := lbReserve(t, lb, "k", 1)
	placeFree := future.Add(2*time.Second - 4000*time.Second) // the queue's end + 1/r - C/r
	if r.OK() || r.Decision().RetryAfter != placeFree.Sub(lbT0) {
		t.Fatalf("2026: Reserve: OK=%v %+v; want refused, RetryAfter %v", r.OK(), r.Decision(), placeFree.Sub(lbT0))
	}
	clk.Set(placeFree.Add(-1))
	if r := lbReserve(t, lb, "k", 1); r.OK() {
		t.Fatalf("1 ns before a place frees: booked, Delay %v", r.Delay())
	}
	clk.Set(placeFree)
	if r := lbReserve(t, lb, "k", 1); !r.OK() || r.Delay() != 3999*time.Second {
		t.Fatalf("when a place frees: OK=%v Delay %v; want the slot 3999 s ahead", r.OK(), r.Delay())
	}
}
