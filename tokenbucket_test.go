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

// Cancel gives back the latest booking whole and an earlier one, while a
// later one is held, not at all (not even once that one is). Capacity 4,
// 2 per second (a token every 0.5 s); at t0, 3 tokens are taken (TAT
// t0+1.5s), then three bookings of sizes[i] follow; they are cancelled in
// the order given, at t0, and ResetAfter (TAT − t0) is read after each.
func TestTokenBucketCancelAnyOrder(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		sizes [3]int
		order [3]int
		want  [3]time.Duration // ResetAfter after each cancel
	}{
		// Bookings of 2: TAT 2.5 s, 3.5 s, 4.5 s.
		{[3]int{2, 2, 2}, [3]int{2, 1, 0}, [3]time.Duration{3500 * ms, 2500 * ms, 1500 * ms}}, // latest first: all come back
		{[3]int{2, 2, 2}, [3]int{0, 1, 2}, [3]time.Duration{4500 * ms, 4500 * ms, 3500 * ms}}, // r2 holds the slots after r0 and r1
		{[3]int{2, 2, 2}, [3]int{1, 0, 2}, [3]time.Duration{4500 * ms, 4500 * ms, 3500 * ms}},
		{[3]int{2, 2, 2}, [3]int{1, 2, 0}, [3]time.Duration{4500 * ms, 3500 * ms, 3500 * ms}}, // r1's empty slots still follow r0
		// Later bookings holding fewer tokens than the one cancelled still
		// keep it: TAT 2.5 s, 3 s, 3.5 s.
		{[3]int{2, 1, 1}, [3]int{2, 0, 1}, [3]time.Duration{3000 * ms, 3000 * ms, 2500 * ms}},
		// TAT 3 s, 3.5 s, 4 s: r0's 3 tokens stay taken when r2 and r1 come
		// back, each the latest in turn.
		{[3]int{3, 1, 1}, [3]int{0, 2, 1}, [3]time.Duration{4000 * ms, 3500 * ms, 3000 * ms}},
	} {
		tb, clk := newTB(t, PerSecond(2), 4)
		tb.AllowN(bg, "k", 3) // 1 token left
		var rs [3]*Reservation
		for i, n := range tc.sizes {
			rs[i], _ = tb.Reserve(bg, "k", n)
		}
		for k, i := range tc.order {
			rs[i].Cancel()
			rs[i].Cancel() // twice is harmless
			if d, _ := tb.AllowN(bg, "k", 0); d.ResetAfter != tc.want[k] {
				t.Fatalf("sizes %v, order %v: after cancelling r%d: %+v, want ResetAfter %v", tc.sizes, tc.order, i, d, tc.want[k])
			}
		}
		// A due reservation is spent: cancelling it gives nothing back.
		clk.Advance(5 * time.Second)
		r, _ := tb.Reserve(bg, "k", 4)
		clk.Advance(time.Nanosecond)
		r.Cancel()
		if d, _ := tb.AllowN(bg, "k", 0); d.Remaining != 0 {
			t.Fatalf("cancel of a due reservation gave back: %+v", d)
		}
	}
}

// Why an earlier booking gives back nothing, not even the tokens no later
// booking holds (n less those booked after it, the rule of
// golang.org/x/time/rate): that rule lets the bucket pass more than it
// allows once two such partial give-backs follow one another. Capacity 4, a
// token every 10 ns, at t0: 4 tokens taken; a (4 tokens) acts at +40ns, b
// (4) at +80ns, j (1) at +90ns. Cancel b, then a. With the partial rule, b
// gives back 3 (j holds one slot after it), TAT 100; a then gives back 2
// (the 2 slots from its end to TAT look held), TAT 80; f (4) would act at
// +80ns and g (4) at +120ns: with j, 9 events in [80, 120] where the bucket
// allows 4 + 40/10 = 8. Here neither gives back: f acts at +130ns, g at
// +170ns.
func TestTokenBucketCancelGivesNoPartialBack(t *testing.T) {
	tb, _ := newTB(t, Per(1, 10), 4)
	tb.AllowN(bg, "k", 4)
	a, _ := tb.Reserve(bg, "k", 4)
	b, _ := tb.Reserve(bg, "k", 4)
	j, _ := tb.Reserve(bg, "k", 1)
	for _, c := range []struct {
		r    *Reservation
		want time.Duration
	}{{a, 40}, {b, 80}, {j, 90}} {
		if c.r.Delay() != c.want {
			t.Fatalf("delay %v, want %v", c.r.Delay(), c.want)
		}
	}
	b.Cancel()
	a.Cancel()
	f, _ := tb.Reserve(bg, "k", 4)
	g, _ := tb.Reserve(bg, "k", 4)
	if f.Delay() != 130 || g.Delay() != 170 {
		t.Fatalf("after cancelling b then a: f acts at +%v, g at +%v; want +130ns, +170ns", f.Delay(), g.Delay())
	}
}

// A key dropped at the cap while a booking is held, and set up afresh, is
// not given that booking back: its new TAT is not where the booking left
// the old one, so Cancel gives nothing, and the fresh allowance (the cap's
// documented loss) is not topped up with tokens it never lent.
func TestTokenBucketCancelAfterEviction(t *testing.T) {
	tb, clk := newTB(t, PerSecond(1), 2, WithMaxKeys(1))
	tb.AllowN(bg, "k", 2)          // TAT t0+2s
	r, _ := tb.Reserve(bg, "k", 1) // acts at t0+1s
	tb.Allow("other")              // the cap drops k
	clk.Advance(500 * time.Millisecond)
	if d, _ := tb.AllowN(bg, "k", 2); !d.Allowed { // k afresh: TAT t0+2.5s
		t.Fatalf("k set up afresh: %+v", d)
	}
	if s := tb.Stats(); s.EvictedLRU < 2 {
		t.Fatalf("stats %+v: want k and other dropped at the cap", s)
	}
	r.Cancel()
	if d, _ := tb.AllowN(bg, "k", 0); d.Remaining != 0 || d.ResetAfter != 2*time.Second {
		t.Fatalf("after cancelling the old booking: %+v; want the new key untouched (0 left, reset in 2s)", d)
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
