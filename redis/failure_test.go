package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// slack is how much later than the call timeout a call may return under
// the race detector on a loaded machine (2 cores shared with other work).
// Without the timeout, a hung Redis would hold a call for go-redis's 3 s
// read timeout, times its retries.
const slack = 400 * time.Millisecond

// TestRedisStopped stops Redis mid-run: every policy answers, each call
// returns within the timeout, the hook hears of it, and the limiter uses
// Redis again once it is back.
func TestRedisStopped(t *testing.T) {
	srv := ownServer(t)
	const timeout = 100 * time.Millisecond
	type built struct {
		lim    *TokenBucket
		policy FailurePolicy
		errs   *atomic.Int64
	}
	var lims []built
	for _, p := range []FailurePolicy{FailOpen, FailClosed, FailLocal} {
		for _, ctxTimeout := range []bool{true, false} {
			errs := new(atomic.Int64)
			// Half the clients fail fast (no retries, one dial), as the
			// package doc suggests; the others retry until the timeout.
			c := goredis.NewClient(&goredis.Options{Addr: srv.addr, ContextTimeoutEnabled: ctxTimeout})
			if ctxTimeout {
				c = goredis.NewClient(&goredis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
			}
			t.Cleanup(func() { c.Close() })
			lim, err := NewTokenBucket(c, ratelimit.PerHour(1), 3,
				WithPrefix(testPrefix(t)), WithTimeout(timeout), WithFailurePolicy(p),
				WithOnError(func(key string, err error) {
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("hook error %v does not match ErrUnavailable", err)
					}
					errs.Add(1)
				}))
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, built{lim, p, errs})
		}
	}
	for _, b := range lims {
		if d, err := b.lim.AllowN(bg, "k", 2); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("%v before the stop: %+v %v", b.policy, d, err)
		}
	}

	srv.kill()
	for _, b := range lims {
		for i := range 4 {
			t0 := time.Now()
			got := b.lim.Allow("k")
			if el := time.Since(t0); el > timeout+slack {
				t.Errorf("%v: Allow took %v with Redis down, timeout %v", b.policy, el, timeout)
			}
			// FailLocal's own bucket starts from what this instance
			// consumed on Redis (2 of 3): it allows 1, then denies.
			want := b.policy == FailOpen || (b.policy == FailLocal && i < 1)
			if got != want {
				t.Errorf("%v: Allow #%d with Redis down = %v, want %v", b.policy, i, got, want)
			}
		}
		// After a failure, FailLocal asks its own bucket first, and what
		// it denies never reaches Redis: one call failed, three were
		// denied locally.
		wantErrs := int64(4)
		if b.policy == FailLocal {
			wantErrs = 1
		}
		if b.errs.Load() != wantErrs {
			t.Errorf("%v: hook called %d times, want %d", b.policy, b.errs.Load(), wantErrs)
		}
		// Reserve and WaitN answer too.
		// Under FailClosed, Reserve fails with the outage's error.
		r, err := b.lim.Reserve(bg, "r", 1)
		if b.policy == FailClosed {
			if !errors.Is(err, ErrUnavailable) || r != nil {
				t.Errorf("%v: Reserve with Redis down: %v %v, want an error matching ErrUnavailable", b.policy, r, err)
			}
		} else if err != nil || !r.OK() || r.Delay() != 0 {
			t.Errorf("%v: Reserve with Redis down: %v", b.policy, err)
		}
		err = b.lim.Wait(bg, "w")
		if (b.policy == FailClosed) != errors.Is(err, ErrUnavailable) || (b.policy != FailClosed && err != nil) {
			t.Errorf("%v: Wait with Redis down: %v", b.policy, err)
		}
	}

	srv.restart(t)
	for _, b := range lims {
		deadline := time.Now().Add(5 * time.Second)
		for {
			before := b.errs.Load()
			d, err := b.lim.AllowN(bg, "k2", 1)
			if b.errs.Load() == before {
				if err != nil || !d.Allowed || d.Remaining != 2 {
					t.Errorf("%v after restart: %+v %v", b.policy, d, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: Redis not used again within 5s of its restart", b.policy)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestRedisHangs pauses Redis (SIGSTOP: connections open, no answers):
// calls return at the timeout with the policy's answer, whether or not the
// client bounds its own I/O by the context.
func TestRedisHangs(t *testing.T) {
	srv := ownServer(t)
	const timeout = 100 * time.Millisecond
	for _, ctxTimeout := range []bool{true, false} {
		var errs atomic.Int64
		lim, err := NewTokenBucket(newClient(t, srv.addr, ctxTimeout), ratelimit.PerHour(1), 3,
			WithPrefix(testPrefix(t)), WithTimeout(timeout), WithFailurePolicy(FailClosed),
			WithOnError(func(key string, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("hook error %v does not match DeadlineExceeded", err)
				}
				errs.Add(1)
			}))
		if err != nil {
			t.Fatal(err)
		}
		if !lim.Allow("k") {
			t.Fatal("first event denied")
		}
		srv.pause()
		t0 := time.Now()
		got := lim.Allow("k")
		el := time.Since(t0)
		srv.resume()
		if got || el < timeout || el > timeout+slack || errs.Load() != 1 {
			t.Errorf("ContextTimeoutEnabled=%v: Allow on a hung Redis = %v after %v, %d errors; want false after %v",
				ctxTimeout, got, el, errs.Load(), timeout)
		}
		// The caller's earlier deadline wins, and is not a backend failure.
		srv.pause()
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err = lim.AllowN(ctx, "k", 1)
		cancel()
		srv.resume()
		if !errors.Is(err, context.DeadlineExceeded) || errs.Load() != 1 {
			t.Errorf("ContextTimeoutEnabled=%v: caller deadline: %v, %d errors", ctxTimeout, err, errs.Load())
		}
	}
}

// TestWait pins Wait's context rules over Redis on a manual clock.
func TestWait(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	tb := newTB(t, c, ratelimit.PerSecond(2), 1, WithClock(mc), withClockTime(60_000))
	if !tb.Allow("k") {
		t.Fatal("first event denied")
	}

	// A delay past the deadline fails at once, booking nothing.
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	err := tb.Wait(ctx, "k")
	cancel()
	var le *ratelimit.LimitError
	if !errors.As(err, &le) || !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) || le.RetryAfter != 500*time.Millisecond {
		t.Fatalf("Wait past the deadline: %v", err)
	}

	// A wait ended by ctx gives its booking back.
	ctx, cancel = context.WithCancel(bg)
	done := make(chan error)
	go func() { done <- tb.Wait(ctx, "k") }()
	for mc.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	if d, _ := tb.AllowN(bg, "k", 0); d.RetryAfter != 0 || d.ResetAfter != 500*time.Millisecond {
		t.Fatalf("after a cancelled wait: %+v, want the booking given back", d)
	}

	// A wait that runs its course books the event.
	go func() { done <- tb.Wait(bg, "k") }()
	for mc.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	mc.Advance(500 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if d, _ := tb.AllowN(bg, "k", 0); d.ResetAfter != 500*time.Millisecond {
		t.Fatalf("after a wait: %+v", d)
	}
	if err := tb.WaitN(bg, "k", 0); err != nil {
		t.Fatalf("WaitN(0): %v", err)
	}
}

// TestReserveHorizon: a booking more than 30 days ahead is refused.
func TestReserveHorizon(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	tb := newTB(t, c, ratelimit.PerDay(1), 20, WithClock(mc), withClockTime(60_000))
	var last *ratelimit.Reservation
	for i := range 50 {
		r, err := tb.Reserve(bg, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		// Events 0..19 now, then one a day: event 50 would be 31 days ahead.
		if want := i < 20+30; r.OK() != want {
			t.Fatalf("Reserve #%d: ok=%v delay=%v, want ok=%v", i, r.OK(), r.Delay(), want)
		}
		last = r
	}
	if last.Delay() != 30*24*time.Hour {
		t.Errorf("last booking due in %v, want 30 days", last.Delay())
	}
	r, _ := tb.Reserve(bg, "k", 1)
	if r.OK() || r.Decision().RetryAfter != 31*24*time.Hour {
		t.Errorf("booking 31 days ahead: ok=%v %+v", r.OK(), r.Decision())
	}
}

// TestFailLocalAcrossFailover: under FailLocal, an instance never gets
// more than its limit across Redis failures. Redis is frozen (SIGSTOP)
// 200 ms in every 500 ms, and once killed and restarted empty (its state
// lost); every algorithm's events, those Redis allowed and those the local
// fallback allowed, together keep the algorithm's bound (see bound_test.go).
// The limiters' clock is a ManualClock, passed to the scripts, moved 25 ms
// a step; only the calls to a frozen Redis wait, for the 25 ms timeout.
func TestFailLocalAcrossFailover(t *testing.T) {
	srv := ownServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	mc := ratelimit.NewManualClock(start)
	type run struct {
		c      boundCase
		lim    ratelimit.Limiter
		events []booked
		failed atomic.Int64
	}
	var runs []*run
	last := map[string]boundCase{} // the last case of each algorithm: the larger capacities
	var kinds []string
	for _, c := range boundCases() {
		kind, _, _ := strings.Cut(c.name, "(")
		if _, ok := last[kind]; !ok {
			kinds = append(kinds, kind)
		}
		last[kind] = c
	}
	for _, kind := range kinds {
		c := last[kind]
		r := &run{c: c}
		lim, err := c.redis(client, WithClock(mc), withClockTime(60_000), WithPrefix(testPrefix(t)),
			WithTimeout(25*time.Millisecond), WithOnError(func(string, error) { r.failed.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		r.lim = lim
		runs = append(runs, r)
	}
	const step = 25 * time.Millisecond
	frozen := false
	for i := range 64 { // 1.6 s
		at := time.Duration(i) * step
		switch phase := at % (500 * time.Millisecond); {
		case phase >= 200*time.Millisecond && phase < 400*time.Millisecond && !frozen:
			srv.pause()
			frozen = true
		case (phase < 200*time.Millisecond || phase >= 400*time.Millisecond) && frozen:
			srv.resume()
			frozen = false
		}
		if at == 1100*time.Millisecond { // up, then lost with its state
			srv.kill()
			srv.restart(t)
		}
		for _, r := range runs {
			if r.lim.Allow("k") {
				r.events = append(r.events, booked{mc.Now().UnixNano(), 1})
			}
		}
		mc.Advance(step)
	}
	if frozen {
		srv.resume()
	}
	for _, r := range runs {
		if r.failed.Load() == 0 || len(r.events) == 0 {
			t.Errorf("%s: %d events, %d failed calls: the run tested nothing", r.c.name, len(r.events), r.failed.Load())
		}
		if err := r.c.check(r.events); err != nil {
			t.Errorf("%s across the failures: %v", r.c.name, err)
		}
	}
}

// TestBulkheadFailLocalAcrossFailover: with limit 2, an instance holding
// its 2 places on Redis gets none more from the local fallback while Redis
// is frozen; once the leases Redis granted expire (on the local clock), or
// are released, the fallback grants them again.
func TestBulkheadFailLocalAcrossFailover(t *testing.T) {
	srv := ownServer(t)
	client := newClient(t, srv.addr, true)
	mc := ratelimit.NewManualClock(start)
	b, err := NewBulkhead(client, 2, time.Second, WithClock(mc), withClockTime(60_000),
		WithPrefix(testPrefix(t)), WithTimeout(25*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l1, err1 := b.TryAcquire(bg, "k")
	l2, err2 := b.TryAcquire(bg, "k")
	if err1 != nil || err2 != nil {
		t.Fatalf("TryAcquire with Redis up: %v %v", err1, err2)
	}
	srv.pause()
	defer srv.resume()
	if l, err := b.TryAcquire(bg, "k"); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Errorf("with Redis frozen and 2 of 2 held: %v %v, want ErrBulkheadFull", l, err)
	}
	l1.Release() // to Redis it fails (frozen); locally the place is free
	l3, err := b.TryAcquire(bg, "k")
	if err != nil {
		t.Fatalf("after a release, with Redis frozen: %v", err)
	}
	if _, err := b.TryAcquire(bg, "k"); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Errorf("with l2 and a local place held: %v, want ErrBulkheadFull", err)
	}
	mc.Advance(time.Second) // l2's lease has expired
	if _, err := b.TryAcquire(bg, "k"); err != nil {
		t.Errorf("after l2's lease expired: %v", err)
	}
	l3.Release()
	_ = l2
}
