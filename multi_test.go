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

// t0 is where the manual clocks of these tests start.
var t0 = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

func newClockedTB(t testing.TB, rate Rate, capacity int, clock Clock) *TokenBucket {
	t.Helper()
	tb, err := NewTokenBucket(rate, capacity, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func peek(t testing.TB, l Limiter, key string) Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// outside hides a limiter's in-memory methods, as a limiter from another
// package (the Redis backend) would have none.
type outside struct {
	Limiter
	calls []int // n of each AllowN
	err   error
}

func (o *outside) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	o.calls = append(o.calls, n)
	if o.err != nil {
		return Decision{}, o.err
	}
	return o.Limiter.AllowN(ctx, key, n)
}

// tickingClock moves forward by step every time it is read, so that time
// always passes between a booking and its give-back.
type tickingClock struct {
	*ManualClock
	step time.Duration
}

func (c tickingClock) Now() time.Time {
	c.ManualClock.Advance(c.step)
	return c.ManualClock.Now()
}

func TestAllowAllTimeline(t *testing.T) {
	clock := NewManualClock(t0)
	user := newClockedTB(t, PerSecond(1), 2, clock)   // per user: 2 at once, 1/s
	global := newClockedTB(t, PerSecond(2), 3, clock) // everyone: 3 at once, 2/s
	ctx := context.Background()
	pairs := func(u string) []LimiterKey { return []LimiterKey{{user, u}, {global, ""}} }

	steps := []struct {
		at      time.Duration
		who     string
		allowed bool
		remain  int
		retry   time.Duration
		// what the request leaves behind
		alice, bob, all int
	}{
		{0, "alice", true, 1, 0, 1, 2, 2},
		{0, "alice", true, 0, 0, 0, 2, 1},
		// alice's bucket is empty: denied by it; the global token it
		// booked goes back.
		{0, "alice", false, 0, time.Second, 0, 2, 1},
		{0, "bob", true, 0, 0, 0, 1, 0},
		// The global bucket is empty: bob is denied by it and keeps his
		// own token; retry when the global bucket refills, in 500ms.
		{0, "bob", false, 0, 500 * time.Millisecond, 0, 1, 0},
		{499 * time.Millisecond, "bob", false, 0, time.Millisecond, 0, 1, 0},
		{500 * time.Millisecond, "bob", true, 0, 0, 0, 0, 0},
		// Both of alice's limits deny, each for 500ms.
		{500 * time.Millisecond, "alice", false, 0, 500 * time.Millisecond, 0, 0, 0},
		{time.Second, "alice", true, 0, 0, 0, 1, 0},
	}
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		d, err := AllowAll(ctx, 1, pairs(s.who))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remain || d.RetryAfter != s.retry {
			t.Errorf("step %d (%v %s): got %+v, want allowed=%v remaining=%d retry=%v", i, s.at, s.who, d, s.allowed, s.remain, s.retry)
		}
		for _, c := range []struct {
			l    Limiter
			key  string
			want int
		}{{user, "alice", s.alice}, {user, "bob", s.bob}, {global, "", s.all}} {
			if got := peek(t, c.l, c.key).Remaining; got != c.want {
				t.Errorf("step %d: %q has %d remaining, want %d", i, c.key, got, c.want)
			}
		}
	}
}

// A denied request must leave every other limit exactly as it was, in
// every field of its Decision, even though each limiter's clock moved on
// between the booking and the give-back.
func TestAllowAllDenialLeavesOthersUntouched(t *testing.T) {
	clock := tickingClock{NewManualClock(t0), time.Microsecond}
	perKey := newClockedTB(t, PerHour(1), 5, clock)
	perEndpoint := newClockedTB(t, PerHour(1), 5, clock)
	global := newClockedTB(t, PerHour(1), 1, clock)
	ctx := context.Background()
	if !global.Allow("") {
		t.Fatal("global: first event denied")
	}
	// Use some of the other limits so that they are not at rest.
	perKey.AllowN(ctx, "k", 2)
	perEndpoint.AllowN(ctx, "POST /x", 1)
	before := []Decision{peek(t, perKey, "k"), peek(t, perEndpoint, "POST /x")}

	pairs := []LimiterKey{{perKey, "k"}, {perEndpoint, "POST /x"}, {global, ""}}
	var d MultiDecision
	for range 100 {
		var err error
		d, err = AllowAll(ctx, 1, pairs)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			t.Fatal("allowed past an empty global bucket")
		}
	}
	after := []Decision{peek(t, perKey, "k"), peek(t, perEndpoint, "POST /x")}
	for i := range before {
		// Time passed (1µs a read) on a 1/hour rate: the remaining count
		// must not have moved; ResetAfter only shrinks with time.
		if after[i].Remaining != before[i].Remaining || after[i].ResetAfter > before[i].ResetAfter {
			t.Errorf("limit %d: before %+v, after %d denials %+v", i, before[i], 100, after[i])
		}
	}
	if d.Len() != 3 || d.At(0).Remaining != 3 || d.At(1).Remaining != 4 || d.At(2).Allowed {
		t.Errorf("each limit's decision after a denial: %+v", d)
	}
}

func TestAllowAllDecisionIsStrictest(t *testing.T) {
	clock := NewManualClock(t0)
	a := newClockedTB(t, PerSecond(10), 10, clock) // full: 10 remaining
	b := newClockedTB(t, PerSecond(1), 4, clock)   // after 1 event: 3 remaining, full in 1s
	c := newClockedTB(t, Per(1, 10*time.Second), 8, clock)
	ctx := context.Background()
	c.AllowN(ctx, "", 2) // 6 remaining, full in 20s
	d, err := AllowAll(ctx, 1, []LimiterKey{{a, ""}, {b, ""}, {c, ""}})
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 30 * time.Second}
	if d.Decision != want {
		t.Errorf("got %+v, want %+v", d.Decision, want)
	}
	if d.Strictest() != 1 {
		t.Errorf("Strictest = %d, want 1 (%+v)", d.Strictest(), d)
	}
}

func TestStrictest(t *testing.T) {
	deny := func(rem int, retry time.Duration, limit int) Decision {
		return Decision{Remaining: rem, RetryAfter: retry, Limit: limit}
	}
	allow := func(rem, limit int) Decision { return Decision{Allowed: true, Remaining: rem, Limit: limit} }
	tests := []struct {
		ds   []Decision
		want int
	}{
		{nil, -1},
		{[]Decision{allow(5, 10)}, 0},
		{[]Decision{allow(0, 10), deny(3, time.Second, 10)}, 1}, // a denial beats a smaller Remaining
		{[]Decision{deny(1, time.Second, 10), deny(0, time.Millisecond, 10)}, 1},
		{[]Decision{deny(0, time.Millisecond, 10), deny(0, time.Second, 10)}, 1},
		{[]Decision{allow(2, 10), allow(2, 5)}, 1},
		{[]Decision{allow(2, 5), allow(2, 5)}, 0}, // first of equals
	}
	for i, tt := range tests {
		if got := Strictest(tt.ds); got != tt.want {
			t.Errorf("case %d: Strictest = %d, want %d", i, got, tt.want)
		}
	}
}

// Retrying at exactly the combined RetryAfter succeeds; 1ns earlier fails.
func TestAllowAllRetryAfterIsExact(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		a, b Rate
	}{
		{"thirds", PerSecond(3), Per(7, 2*time.Second)},
		{"slow second", PerMinute(1), PerSecond(1)},
		{"equal", PerSecond(2), PerSecond(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			a := newClockedTB(t, tc.a, 1, clock)
			b := newClockedTB(t, tc.b, 1, clock)
			pairs := []LimiterKey{{a, "k"}, {b, "k"}}
			if d, _ := AllowAll(ctx, 1, pairs); !d.Allowed {
				t.Fatal("first event denied")
			}
			d, _ := AllowAll(ctx, 1, pairs)
			if d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("second event: %+v", d)
			}
			retry := d.RetryAfter
			clock.Advance(retry - 1)
			if d, _ := AllowAll(ctx, 1, pairs); d.Allowed || d.RetryAfter != 1 {
				t.Fatalf("1ns early: %+v, want denied with RetryAfter 1ns", d)
			}
			clock.Advance(1)
			if d, _ := AllowAll(ctx, 1, pairs); !d.Allowed {
				t.Fatalf("at RetryAfter %v: %+v", retry, d)
			}
		})
	}
}

func TestAllowAllErrorsBookNothing(t *testing.T) {
	clock := NewManualClock(t0)
	small := newClockedTB(t, PerSecond(1), 2, clock)
	big := newClockedTB(t, PerSecond(1), 10, clock)
	ctx := context.Background()
	pairs := []LimiterKey{{big, "k"}, {small, "k"}}
	if _, err := AllowAll(ctx, 3, pairs); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("n over one limit: %v, want ErrExceedsLimit", err)
	}
	if _, err := AllowAll(ctx, -1, pairs); !errors.Is(err, ErrNegativeN) {
		t.Errorf("n < 0: %v, want ErrNegativeN", err)
	}
	if _, err := AllowAll(ctx, 1, []LimiterKey{{big, "k"}, {nil, "k"}}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil limiter: %v, want ErrInvalidOption", err)
	}
	if got := peek(t, big, "k").Remaining; got != 10 {
		t.Errorf("after errors the big bucket has %d, want 10", got)
	}
	if d, err := AllowAll(ctx, 1, nil); err != nil || d.Decision != (Decision{Allowed: true}) || d.Len() != 0 || d.Strictest() != -1 {
		t.Errorf("no pairs: %+v, %v", d, err)
	}
}

func TestAllowAllPeek(t *testing.T) {
	clock := NewManualClock(t0)
	a := newClockedTB(t, PerSecond(1), 3, clock)
	b := newClockedTB(t, PerSecond(1), 5, clock)
	ctx := context.Background()
	a.AllowN(ctx, "k", 1)
	for range 3 {
		d, err := AllowAll(ctx, 0, []LimiterKey{{a, "k"}, {b, "k"}})
		if err != nil || !d.Allowed || d.Remaining != 2 || d.Limit != 3 {
			t.Fatalf("peek: %+v, %v", d, err)
		}
	}
	if got := peek(t, b, "k").Remaining; got != 5 {
		t.Errorf("peek consumed: b has %d", got)
	}
}

func TestAllowAllOutsideLimiters(t *testing.T) {
	ctx := context.Background()
	t.Run("asked last, only if in-memory limits allow", func(t *testing.T) {
		clock := NewManualClock(t0)
		mem := newClockedTB(t, PerSecond(1), 1, clock)
		out := &outside{Limiter: newClockedTB(t, PerSecond(1), 5, clock)}
		pairs := []LimiterKey{{out, "k"}, {mem, "k"}}
		if d, _ := AllowAll(ctx, 1, pairs); !d.Allowed {
			t.Fatal("first denied")
		}
		d, _ := AllowAll(ctx, 1, pairs) // mem denies: out is only peeked
		if d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("second: %+v", d)
		}
		if got := peek(t, out.Limiter, "k").Remaining; got != 4 {
			t.Errorf("outside limiter has %d remaining, want 4 (one event)", got)
		}
		if want := []int{1, 0}; !equalInts(out.calls, want) {
			t.Errorf("outside calls n=%v, want %v", out.calls, want)
		}
	})
	t.Run("outside denial gives in-memory bookings back", func(t *testing.T) {
		clock := NewManualClock(t0)
		mem := newClockedTB(t, PerSecond(1), 5, clock)
		out := &outside{Limiter: newClockedTB(t, PerSecond(1), 1, clock)}
		pairs := []LimiterKey{{mem, "k"}, {out, "k"}}
		AllowAll(ctx, 1, pairs)
		d, _ := AllowAll(ctx, 1, pairs)
		if d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("second: %+v", d)
		}
		if got := peek(t, mem, "k").Remaining; got != 4 {
			t.Errorf("in-memory limiter has %d remaining, want 4", got)
		}
	})
	t.Run("after a denial an outside limiter short of room still gives RetryAfter", func(t *testing.T) {
		clock := NewManualClock(t0)
		mem := newClockedTB(t, PerSecond(1), 1, clock)
		out := &outside{Limiter: newClockedTB(t, Per(1, 10*time.Second), 1, clock)}
		pairs := []LimiterKey{{mem, "k"}, {out, "k"}}
		AllowAll(ctx, 1, pairs)
		out.calls = nil
		d, _ := AllowAll(ctx, 1, pairs)
		if d.Allowed || d.RetryAfter != 10*time.Second {
			t.Fatalf("got %+v, want RetryAfter 10s", d)
		}
		if want := []int{0, 1}; !equalInts(out.calls, want) {
			t.Errorf("outside calls n=%v, want %v", out.calls, want)
		}
	})
	t.Run("outside error", func(t *testing.T) {
		clock := NewManualClock(t0)
		mem := newClockedTB(t, PerSecond(1), 5, clock)
		boom := errors.New("backend down")
		out := &outside{Limiter: newClockedTB(t, PerSecond(1), 5, clock), err: boom}
		if _, err := AllowAll(ctx, 1, []LimiterKey{{mem, "k"}, {out, "k"}}); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if got := peek(t, mem, "k").Remaining; got != 5 {
			t.Errorf("in-memory limiter has %d remaining after an outside error, want 5", got)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Property: on random traces, AllowAll over a per-key and a global bucket
// decides exactly as an oracle that checks both GCRA buckets on their own
// and commits to both only if both conform.
func TestAllowAllMatchesOracle(t *testing.T) {
	const (
		ivKey, capKey       = int64(250 * time.Millisecond), 3
		ivGlobal, capGlobal = int64(100 * time.Millisecond), 5
	)
	rng := rand.New(rand.NewPCG(1, 2))
	clock := NewManualClock(t0)
	perKey := newClockedTB(t, Every(time.Duration(ivKey)), capKey, clock)
	global := newClockedTB(t, Every(time.Duration(ivGlobal)), capGlobal, clock)
	tat := map[string]int64{}
	var gtat int64
	conform := func(tat, now, n, iv, capacity int64) (int64, bool) {
		next := max(tat, now) + n*iv
		return next, next <= now+capacity*iv
	}
	now := int64(0)
	keys := []string{"a", "b", "c"}
	for step := range 5000 {
		now += rng.Int64N(int64(120 * time.Millisecond))
		clock.Set(t0.Add(time.Duration(now)))
		key := keys[rng.IntN(len(keys))]
		n := 1 + rng.IntN(3)
		kt, okKey := conform(tat[key], now, int64(n), ivKey, capKey)
		gt, okGlobal := conform(gtat, now, int64(n), ivGlobal, capGlobal)
		want := okKey && okGlobal
		if want {
			tat[key], gtat = kt, gt
		}
		d, err := AllowAll(context.Background(), n, []LimiterKey{{perKey, key}, {global, ""}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("step %d (t=%v key=%s n=%d): allowed=%v, oracle %v", step, time.Duration(now), key, n, d.Allowed, want)
		}
	}
}

// Under concurrent use, with a frozen clock, every limit has consumed
// exactly the events of the requests allowed: no denial leaks a booking.
func TestAllowAllConcurrent(t *testing.T) {
	clock := NewManualClock(t0)
	perKey := newClockedTB(t, PerHour(1), 40, clock)
	global := newClockedTB(t, PerHour(1), 100, clock)
	keys := []string{"a", "b", "c", "d"}
	var allowed [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := (g + i) % len(keys)
				n := 1 + i%2
				d, err := AllowAll(context.Background(), n, []LimiterKey{{perKey, keys[k]}, {global, ""}})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed[k].Add(int64(n))
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for k, key := range keys {
		n := allowed[k].Load()
		total += n
		if got := peek(t, perKey, key).Remaining; int64(got) != 40-n {
			t.Errorf("key %s: %d remaining, %d allowed (want sum 40)", key, got, n)
		}
	}
	if got := peek(t, global, "").Remaining; int64(got) != 100-total {
		t.Errorf("global: %d remaining, %d allowed (want sum 100)", got, total)
	}
}

func TestWaitAll(t *testing.T) {
	clock := NewManualClock(t0)
	a := newClockedTB(t, PerSecond(1), 1, clock)
	b := newClockedTB(t, PerSecond(2), 1, clock)
	pairs := []LimiterKey{{a, "k"}, {b, "k"}}
	ctx := context.Background()
	if err := WaitAll(ctx, 1, pairs); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- WaitAll(ctx, 1, pairs) }()
	waitTimers(t, clock, 1)
	clock.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned early: %v", err)
	default:
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if peek(t, a, "k").Remaining != 0 || peek(t, b, "k").Remaining != 0 {
		t.Error("the wait did not record its event")
	}

	t.Run("deadline too close", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // real time: < the 1s needed
		defer cancel()
		err := WaitAll(c, 1, pairs)
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) || le.RetryAfter != time.Second {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		go func() { done <- WaitAll(c, 1, pairs) }()
		waitTimers(t, clock, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		clock.Advance(time.Second) // both refill: nothing was booked
		if peek(t, a, "k").Remaining != 1 || peek(t, b, "k").Remaining != 1 {
			t.Error("a cancelled wait left a booking")
		}
	})
	t.Run("errors", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		cancel()
		if err := WaitAll(c, 1, pairs); !errors.Is(err, context.Canceled) {
			t.Errorf("done ctx: %v", err)
		}
		if err := WaitAll(ctx, 2, pairs); !errors.Is(err, ErrExceedsLimit) {
			t.Errorf("n too big: %v", err)
		}
		if err := WaitAll(ctx, 0, pairs); err != nil {
			t.Errorf("n == 0: %v", err)
		}
	})
}

func TestReserveAll(t *testing.T) {
	clock := NewManualClock(t0)
	a := newClockedTB(t, PerSecond(1), 2, clock)
	b := newClockedTB(t, PerSecond(1), 1, clock)
	ctx := context.Background()
	pairs := []LimiterKey{{a, "k"}, {b, "k"}}
	r, err := ReserveAll(ctx, 1, pairs)
	if err != nil || !r.OK() || r.Delay() != 0 {
		t.Fatalf("first: %+v, %v", r, err)
	}
	// b is empty: no booking ahead, a keeps its token.
	r2, err := ReserveAll(ctx, 1, pairs)
	if err != nil || r2.OK() || r2.Delay() != time.Second {
		t.Fatalf("second: ok=%v delay=%v err=%v", r2.OK(), r2.Delay(), err)
	}
	if got := peek(t, a, "k").Remaining; got != 1 {
		t.Errorf("a has %d after a refused reservation, want 1", got)
	}
	// Cancel at the instant of booking gives everything back.
	r.Cancel()
	if peek(t, a, "k").Remaining != 2 || peek(t, b, "k").Remaining != 1 {
		t.Error("cancel at the booking instant did not give back")
	}
	// Cancel after the booking is due gives nothing back.
	r3, _ := ReserveAll(ctx, 1, pairs)
	clock.Advance(time.Nanosecond)
	r3.Cancel()
	if got := peek(t, a, "k").Remaining; got != 1 {
		t.Errorf("a has %d after a late cancel, want 1", got)
	}
}

func TestMulti(t *testing.T) {
	clock := NewManualClock(t0)
	perIP := newClockedTB(t, PerSecond(1), 2, clock)
	global := newClockedTB(t, PerSecond(1), 3, clock)
	m, err := NewMulti(MultiLimit{Limiter: perIP}, MultiLimit{Limiter: global, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, ip := range []string{"a", "a", "a", "b", "b"} {
		got = append(got, m.Allow(ip))
	}
	want := []bool{true, true, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Allow sequence %v, want %v", got, want)
		}
	}
	if peek(t, perIP, "b").Remaining != 1 {
		t.Error("b's denial by the global part cost b a token")
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, "b") }()
	waitTimers(t, clock, 1)
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r, err := m.Reserve(ctx, "c", 1); err != nil || r.OK() {
		t.Errorf("Reserve with the global bucket empty: ok=%v err=%v", r.OK(), err)
	}
	if _, err := NewMulti(); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewMulti(): %v", err)
	}
	if _, err := NewMulti(MultiLimit{}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewMulti(nil limiter): %v", err)
	}
}

func TestAllowAllDoesNotAllocate(t *testing.T) {
	clock := NewManualClock(t0)
	a := newClockedTB(t, PerSecond(1e9), 1e9, clock)
	b := newClockedTB(t, PerSecond(1e9), 1e9, clock)
	m, _ := NewMulti(MultiLimit{Limiter: a}, MultiLimit{Limiter: b, Shared: true})
	ctx := context.Background()
	pairs := []LimiterKey{{a, "k"}, {b, ""}}
	m.Allow("k")
	if n := testing.AllocsPerRun(100, func() { AllowAll(ctx, 1, pairs) }); n != 0 {
		t.Errorf("AllowAll allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.Allow("k") }); n != 0 {
		t.Errorf("Multi.Allow allocates %v times", n)
	}
}

func BenchmarkMultiAllow(b *testing.B) {
	perKey, _ := NewTokenBucket(PerSecond(1e9), 1e9)
	global, _ := NewTokenBucket(PerSecond(1e9), 1e9)
	m, _ := NewMulti(MultiLimit{Limiter: perKey}, MultiLimit{Limiter: global, Shared: true})
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			perKey.Allow("192.0.2.1")
		}
	})
	b.Run("multi2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Allow("192.0.2.1")
		}
	})
}

// The result of AllowAll holds one decision per limit, in the order the
// limits were given, below and above the 8 it holds without allocating:
// each is the limit's own (as booked when allowed, as it stands after the
// give-back when denied), and the combined Decision is the strictest one's
// Limit and Remaining with the largest RetryAfter and ResetAfter.
func TestAllowAllEachDecision(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 14))
		clock := NewManualClock(t0)
		count := rng.IntN(13) // 0 to 12 limits: both sides of the array
		limits := make([]LimiterKey, count)
		for i := range limits {
			capacity := 1 + rng.IntN(4)
			tb := newClockedTB(t, PerSecond(int64(1+rng.IntN(3))), capacity, clock)
			tb.AllowN(ctx, "k", rng.IntN(capacity+1))
			limits[i] = LimiterKey{tb, "k"}
		}
		before := make([]int, count)
		for i := range limits {
			before[i] = peek(t, limits[i].Limiter, "k").Remaining
		}
		d, err := AllowAll(ctx, 1, limits)
		if err != nil {
			t.Fatal(err)
		}
		if d.Len() != count {
			t.Fatalf("seed %d: %d decisions for %d limits", seed, d.Len(), count)
		}
		for i := range limits {
			got, p := d.At(i), peek(t, limits[i].Limiter, "k")
			if got.Limit != p.Limit || got.Remaining != p.Remaining || got.ResetAfter != p.ResetAfter {
				t.Errorf("seed %d: limit %d reports %+v, stands at %+v", seed, i, got, p)
			}
			if d.Allowed && !got.Allowed {
				t.Errorf("seed %d: allowed, but limit %d denied: %+v", seed, i, got)
			}
			if spent := before[i] - p.Remaining; d.Allowed && spent != 1 || !d.Allowed && spent != 0 {
				t.Errorf("seed %d: allowed=%v took %d from limit %d", seed, d.Allowed, spent, i)
			}
		}
		// The documented order, written out: a denial first, then the
		// smallest Remaining, the largest RetryAfter, the smallest Limit,
		// the first of equals.
		want, strictest := Decision{Allowed: true}, -1
		key := func(x Decision) [4]int64 {
			denied := int64(1)
			if x.Allowed {
				denied = 0
			}
			return [4]int64{-denied, int64(x.Remaining), -int64(x.RetryAfter), int64(x.Limit)}
		}
		for i := range count {
			if strictest < 0 || less4(key(d.At(i)), key(d.At(strictest))) {
				strictest = i
			}
		}
		if count > 0 {
			w := d.At(strictest)
			want = Decision{Allowed: true, Limit: w.Limit, Remaining: w.Remaining}
			for i := range count {
				want.Allowed = want.Allowed && d.At(i).Allowed
				want.RetryAfter = max(want.RetryAfter, d.At(i).RetryAfter)
				want.ResetAfter = max(want.ResetAfter, d.At(i).ResetAfter)
			}
		}
		if d.Decision != want || d.Strictest() != strictest {
			t.Errorf("seed %d: combined %+v (strictest %d), want %+v (strictest %d)", seed, d.Decision, d.Strictest(), want, strictest)
		}
	}
}

func less4(a, b [4]int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
