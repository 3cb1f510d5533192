package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var bg = context.Background()

func newTB(t testing.TB, rate Rate, capacity int, opts ...Option) (*TokenBucket, *ManualClock) {
	t.Helper()
	clk := NewManualClock(epoch)
	tb, err := NewTokenBucket(rate, capacity, append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tb, clk
}

// The seed's example: capacity 4, refill 2 tokens/s.
func TestTokenBucketTimeline(t *testing.T) {
	tb, clk := newTB(t, PerSecond(2), 4)
	const ms = time.Millisecond
	for i, row := range []struct {
		at   time.Duration
		n    int
		want Decision
	}{
		// t0: a fresh key is full: a burst of 4 passes.
		{0, 1, Decision{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 500 * ms}},
		{0, 1, Decision{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 1000 * ms}},
		{0, 2, Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2000 * ms}},
		// The 5th at t0 is denied: the next token is due in 0.5 s.
		{0, 1, Decision{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 2000 * ms}},
		// t1 = 0.5 s - 1 ns: still nothing.
		{500*ms - 1, 1, Decision{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 1, ResetAfter: 1500*ms + 1}},
		// t2 = 0.5 s: exactly one token; taking it leaves the bucket empty.
		{500 * ms, 1, Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2000 * ms}},
		{500 * ms, 1, Decision{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 2000 * ms}},
		// t3 = 1.25 s: 1.5 tokens; asking for 2 waits for the half.
		{1250 * ms, 2, Decision{Allowed: false, Limit: 4, Remaining: 1, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		// A peek changes nothing.
		{1250 * ms, 0, Decision{Allowed: true, Limit: 4, Remaining: 1, ResetAfter: 1250 * ms}},
		// t4 = 10 s: long idle, the bucket holds 4, never more.
		{10 * time.Second, 0, Decision{Allowed: true, Limit: 4, Remaining: 4}},
		{10 * time.Second, 4, Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2000 * ms}},
	} {
		clk.Set(epoch.Add(row.at))
		got, err := tb.AllowN(bg, "k", row.n)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if got != row.want {
			t.Fatalf("row %d (t=%v n=%d):\n got %+v\nwant %+v", i, row.at, row.n, got, row.want)
		}
	}
}

// Retrying exactly at RetryAfter succeeds; one nanosecond earlier does not.
func TestTokenBucketRetryAfterIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		rate := Per(1+rng.Int64N(20), time.Duration(1+rng.Int64N(int64(3*time.Second))))
		capacity := 1 + rng.IntN(8)
		tb, clk := newTB(t, rate, capacity)
		for tb.Allow("k") {
		}
		clk.Advance(time.Duration(rng.Int64N(int64(rate.Period))))
		n := 1 + rng.IntN(capacity)
		d, _ := tb.AllowN(bg, "k", n)
		if d.Allowed {
			continue
		}
		at := clk.Now().Add(d.RetryAfter)
		clk.Set(at.Add(-1))
		if early, _ := tb.AllowN(bg, "k", n); early.Allowed {
			t.Fatalf("%v cap %d n %d: allowed 1ns before RetryAfter %v", rate, capacity, n, d.RetryAfter)
		}
		clk.Set(at)
		if onTime, _ := tb.AllowN(bg, "k", n); !onTime.Allowed {
			t.Fatalf("%v cap %d n %d: denied at RetryAfter %v: %+v", rate, capacity, n, d.RetryAfter, onTime)
		}
	}
}

// No drift: 3 per second allows exactly 3,000,000 + C events over
// 1,000,000 s of steady demand.
func TestTokenBucketNoDrift(t *testing.T) {
	const capacity = 4
	tb, clk := newTB(t, PerSecond(3), capacity)
	allowed := 0
	for s := 0; s <= 1_000_000; s++ {
		clk.Set(epoch.Add(time.Duration(s) * time.Second))
		for tb.Allow("k") {
			allowed++
		}
	}
	if want := 3_000_000 + capacity; allowed != want {
		t.Fatalf("allowed %d, want %d", allowed, want)
	}
}

func TestTokenBucketReserveSpacing(t *testing.T) {
	tb, clk := newTB(t, PerSecond(3), 1)
	want := []time.Duration{0, 333333334, 666666667, time.Second, 1333333334}
	for i, w := range want {
		r, err := tb.Reserve(bg, "k", 1)
		if err != nil || !r.OK() {
			t.Fatalf("reservation %d: %v", i, err)
		}
		if got := r.Delay(); got != w {
			t.Fatalf("reservation %d: delay %v, want %v", i, got, w)
		}
	}
	clk.Advance(time.Second)
	r, _ := tb.Reserve(bg, "k", 1)
	if got := r.Delay(); got != 666666667 {
		t.Fatalf("after 1s: delay %v, want 666666667ns", got)
	}
}

// Cancel gives back exactly the tokens not yet due, in any order.
func TestTokenBucketCancelAnyOrder(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
		tb, clk := newTB(t, PerSecond(2), 4)
		before, _ := tb.AllowN(bg, "k", 3) // 1 token left
		_ = before
		rs := make([]*Reservation, 3)
		for i := range rs {
			rs[i], _ = tb.Reserve(bg, "k", 2)
		}
		// Delays: 0.5 s, 1.5 s, 2.5 s.
		for i, want := range []time.Duration{500, 1500, 2500} {
			if got := rs[i].Delay(); got != want*time.Millisecond {
				t.Fatalf("delay %d = %v", i, got)
			}
		}
		for _, i := range order {
			rs[i].Cancel()
			rs[i].Cancel() // twice is harmless
		}
		d, _ := tb.AllowN(bg, "k", 0)
		if d.Remaining != 1 || d.ResetAfter != 1500*time.Millisecond {
			t.Fatalf("order %v: after cancels %+v, want the state before the reservations", order, d)
		}
		// A due reservation is spent: cancelling it gives nothing back.
		r, _ := tb.Reserve(bg, "k", 1)
		clk.Advance(time.Nanosecond)
		r.Cancel()
		if d, _ := tb.AllowN(bg, "k", 0); d.Remaining != 0 {
			t.Fatalf("cancel of a due reservation gave back: %+v", d)
		}
	}
}

func TestTokenBucketWait(t *testing.T) {
	t.Run("cancelled ctx consumes nothing", func(t *testing.T) {
		tb, _ := newTB(t, PerSecond(1), 1)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		if err := tb.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if d, _ := tb.AllowN(bg, "k", 0); d.Remaining != 1 {
			t.Fatalf("consumed: %+v", d)
		}
	})
	t.Run("deadline too short fails at once", func(t *testing.T) {
		tb, clk := newTB(t, PerSecond(1), 1)
		tb.Allow("k")
		// The deadline is real time; the delay needed is 1 s of the clock.
		ctx, cancel := context.WithTimeout(bg, 999*time.Millisecond)
		defer cancel()
		err := tb.Wait(ctx, "k")
		if !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrLimited and DeadlineExceeded", err)
		}
		var le *LimitError
		if !errors.As(err, &le) || le.RetryAfter != time.Second {
			t.Fatalf("err = %#v, want RetryAfter 1s", err)
		}
		clk.Advance(time.Second)
		if !tb.Allow("k") {
			t.Fatal("the failed wait consumed a token")
		}
	})
	t.Run("deadline long enough waits", func(t *testing.T) {
		tb, clk := newTB(t, PerSecond(1), 1)
		tb.Allow("k")
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		done := make(chan error)
		go func() { done <- tb.Wait(ctx, "k") }()
		waitTimers(t, clk, 1)
		clk.Advance(time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if tb.Allow("k") {
			t.Fatal("the wait did not consume")
		}
	})
	t.Run("cancelled while waiting returns the booking", func(t *testing.T) {
		tb, clk := newTB(t, PerSecond(1), 1)
		tb.Allow("k")
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error)
		go func() { done <- tb.WaitN(ctx, "k", 1) }()
		waitTimers(t, clk, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if clk.Timers() != 0 {
			t.Fatal("timer left behind")
		}
		clk.Advance(time.Second)
		if !tb.Allow("k") {
			t.Fatal("the cancelled wait kept its token")
		}
	})
	t.Run("n larger than capacity errors at once", func(t *testing.T) {
		tb, _ := newTB(t, PerSecond(1), 3)
		if err := tb.WaitN(bg, "k", 4); !errors.Is(err, ErrExceedsLimit) {
			t.Fatalf("err = %v", err)
		}
	})
}

// waitTimers waits until clk has n pending timers: a goroutine has started
// to wait. It synchronises goroutines only; time is the manual clock's.
func waitTimers(t testing.TB, clk *ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Timers() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d timers (have %d)", n, clk.Timers())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func TestTokenBucketInvalidInput(t *testing.T) {
	for _, tc := range []struct {
		rate     Rate
		capacity int
		want     error
	}{
		{Rate{}, 1, ErrInvalidRate},
		{PerSecond(0), 1, ErrInvalidRate},
		{PerSecond(-1), 1, ErrInvalidRate},
		{Per(1, -time.Second), 1, ErrInvalidRate},
		{PerSecond(1), 0, ErrInvalidCapacity},
		{PerSecond(1), -5, ErrInvalidCapacity},
		{PerDay(1), 1 << 40, ErrInvalidCapacity}, // 3e9 years to refill
	} {
		if _, err := NewTokenBucket(tc.rate, tc.capacity); !errors.Is(err, tc.want) {
			t.Errorf("NewTokenBucket(%v, %d) err = %v, want %v", tc.rate, tc.capacity, err, tc.want)
		}
	}
	for _, opt := range []Option{WithClock(nil), WithShards(3), WithShards(0), WithMaxKeys(-1), WithSweepInterval(-1)} {
		if _, err := NewTokenBucket(PerSecond(1), 1, opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("bad option: err = %v, want ErrInvalidOption", err)
		}
	}
	tb, _ := newTB(t, PerSecond(1), 2)
	if _, err := tb.AllowN(bg, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("AllowN(-1) err = %v", err)
	}
	if _, err := tb.AllowN(bg, "k", 3); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("AllowN(3) err = %v", err)
	}
	if _, err := tb.Reserve(bg, "k", 3); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("Reserve(3) err = %v", err)
	}
	if err := tb.WaitN(bg, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("WaitN(-1) err = %v", err)
	}
}

// A clock that moves backwards never mints tokens.
func TestTokenBucketClockBackwards(t *testing.T) {
	tb, clk := newTB(t, PerSecond(1), 2)
	clk.Advance(time.Hour)
	tb.AllowN(bg, "k", 2)
	clk.Advance(-30 * time.Minute)
	if tb.Allow("k") {
		t.Fatal("allowed after the clock went back")
	}
	clk.Advance(30 * time.Minute) // back where we were: still empty
	if tb.Allow("k") {
		t.Fatal("allowed at the instant the bucket was emptied")
	}
	clk.Advance(time.Second)
	if !tb.Allow("k") || tb.Allow("k") {
		t.Fatal("want exactly one token a second later")
	}
}

func TestTokenBucketKeysIndependent(t *testing.T) {
	tb, _ := newTB(t, PerMinute(1), 1)
	for _, k := range []string{"", "a", "b", string(make([]byte, 1<<20))} {
		if !tb.Allow(k) {
			t.Fatalf("key of %d bytes denied on first use", len(k))
		}
		if tb.Allow(k) {
			t.Fatalf("key of %d bytes allowed twice", len(k))
		}
	}
}

// Many goroutines on one key with the clock frozen: exactly C allowed.
func TestTokenBucketConcurrentFrozenClock(t *testing.T) {
	const capacity = 1000
	tb, _ := newTB(t, PerHour(1), capacity)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if tb.Allow("hot") {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != capacity {
		t.Fatalf("allowed %d, want exactly %d", got, capacity)
	}
}

// A GCRA oracle written the plain way: tokens as exact rationals counted
// over the whole history.
func TestTokenBucketAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 20; trial++ {
		n := 1 + rng.Int64N(10)
		period := time.Duration(1 + rng.Int64N(int64(2*time.Second)))
		capacity := 1 + rng.IntN(6)
		tb, clk := newTB(t, Per(n, period), capacity)
		// Oracle: tokens scaled by period (a token is `period` units; one
		// nanosecond adds n units), capped at capacity*period.
		type st struct {
			units int64
			last  int64
		}
		oracle := map[string]*st{}
		now := int64(0)
		for i := 0; i < 3000; i++ {
			now += rng.Int64N(int64(period) / n * 2)
			clk.Set(epoch.Add(time.Duration(now)))
			key := string(rune('a' + rng.IntN(3)))
			k := 1 + rng.IntN(capacity)
			o := oracle[key]
			if o == nil {
				o = &st{units: int64(capacity) * int64(period), last: now}
				oracle[key] = o
			}
			o.units = min(o.units+(now-o.last)*n, int64(capacity)*int64(period))
			o.last = now
			want := o.units >= int64(k)*int64(period)
			if want {
				o.units -= int64(k) * int64(period)
			}
			got, _ := tb.AllowN(bg, key, k)
			if got.Allowed != want {
				t.Fatalf("trial %d step %d: rate %v cap %d key %q n %d: got %v want %v", trial, i, Per(n, period), capacity, key, k, got.Allowed, want)
			}
			if wantRem := int(o.units / int64(period)); got.Remaining != wantRem {
				t.Fatalf("trial %d step %d: remaining %d, want %d", trial, i, got.Remaining, wantRem)
			}
		}
	}
}
