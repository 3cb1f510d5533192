package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func newBH(t *testing.T, c Client, limit int, lease time.Duration, opts ...Option) *Bulkhead {
	t.Helper()
	b, err := NewBulkhead(c, limit, lease, append([]Option{WithPrefix(testPrefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBulkheadLeases(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	b := newBH(t, c, 2, time.Second, WithClock(mc), withClockTime(60_000))
	l1, err1 := b.TryAcquire(bg, "k")
	l2, err2 := b.TryAcquire(bg, "k")
	if err1 != nil || err2 != nil {
		t.Fatalf("TryAcquire: %v %v", err1, err2)
	}
	if _, err := b.TryAcquire(bg, "k"); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Fatalf("third TryAcquire: %v, want ErrBulkheadFull", err)
	}
	if l, err := b.TryAcquire(bg, "other"); err != nil {
		t.Fatalf("another key: %v", err)
	} else {
		l.Release()
	}
	l1.Release()
	l1.Release() // twice: nothing more
	if n, err := b.InFlight(bg, "k"); n != 1 || err != nil {
		t.Fatalf("InFlight after a release = %d, %v", n, err)
	}
	l3, err := b.TryAcquire(bg, "k")
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}

	// l2 is extended at +600ms; l3 is not. A lease lasts at least its
	// second and at most 1 ms more (server milliseconds): at +1s+1ms l3
	// has expired, its place is free, and l2 has not.
	mc.Advance(600 * time.Millisecond)
	if err := l2.Extend(bg); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	mc.Advance(400*time.Millisecond - 1)
	if _, err := b.TryAcquire(bg, "k"); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Fatalf("1 ns before l3's second is up: %v, want ErrBulkheadFull", err)
	}
	mc.Advance(time.Millisecond + 1)
	l4, err := b.TryAcquire(bg, "k")
	if err != nil {
		t.Fatalf("after l3 expired: %v", err)
	}
	if err := l3.Extend(bg); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Extend of an expired lease: %v, want ErrLeaseLost", err)
	}
	l2.Release()
	l4.Release()
	if err := l4.Extend(bg); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Extend of a released lease: %v", err)
	}
	if n, _ := b.InFlight(bg, "k"); n != 0 {
		t.Errorf("InFlight after all released = %d", n)
	}
	if n := c.Exists(bg, redisKey(b.cfg.prefix, "k", ":bh")).Val(); n != 0 {
		t.Error("a key without leases was left in Redis")
	}
}

func TestBulkheadAcquireWaits(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	b := newBH(t, c, 1, time.Minute, WithClock(mc), withClockTime(60_000), WithPollInterval(5*time.Millisecond))
	held, err := b.Acquire(bg, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error)
	go func() {
		l, err := b.Acquire(bg, "k")
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	for mc.Timers() == 0 { // the waiter found the key full and sleeps
		time.Sleep(time.Millisecond)
	}
	held.Release()
	mc.Advance(5 * time.Millisecond)
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire: %v", err)
	}

	// A wait ended by ctx holds nothing.
	held, _ = b.Acquire(bg, "k")
	ctx, cancel := context.WithCancel(bg)
	go func() { _, err := b.Acquire(ctx, "k"); got <- err }()
	for mc.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	if n, _ := b.InFlight(bg, "k"); n != 1 {
		t.Errorf("InFlight after a cancelled wait = %d, want 1", n)
	}
	held.Release()

	ran := false
	if err := b.Do(bg, "k", func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Do: %v, ran %v", err, ran)
	}
}

// TestBulkheadTwoInstances: two bulkheads on two clients never have more
// than the limit in flight for a key at once.
func TestBulkheadTwoInstances(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t)
	const limit = 3
	var inFlight, peak, granted atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		b, err := NewBulkhead(newClient(t, addr, true), limit, time.Minute, WithPrefix(prefix),
			WithTimeout(5*time.Second), WithFailurePolicy(FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			wg.Go(func() {
				for range 40 {
					l, err := b.TryAcquire(bg, "k")
					if errors.Is(err, ratelimit.ErrBulkheadFull) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					granted.Add(1)
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					// Hold the place for a round trip, asking Redis too.
					if held, err := b.InFlight(bg, "k"); err != nil || held > limit {
						t.Errorf("InFlight = %d, %v", held, err)
					}
					inFlight.Add(-1)
					l.Release()
				}
			})
		}
	}
	wg.Wait()
	// The peak must reach the limit, or the test proved nothing.
	if peak.Load() != limit {
		t.Errorf("peak in flight %d, limit %d (%d granted)", peak.Load(), limit, granted.Load())
	}
}

func TestBulkheadFailures(t *testing.T) {
	srv := ownServer(t)
	var errs atomic.Int64
	hook := WithOnError(func(string, error) { errs.Add(1) })
	open := newBH(t, newClient(t, srv.addr, true), 1, time.Minute, WithFailurePolicy(FailOpen), hook)
	closed := newBH(t, newClient(t, srv.addr, true), 1, time.Minute, WithFailurePolicy(FailClosed), hook)
	local := newBH(t, newClient(t, srv.addr, true), 1, time.Minute, hook)
	srv.kill()
	if l, err := open.TryAcquire(bg, "k"); err != nil || l.Extend(bg) != nil {
		t.Errorf("FailOpen: %v", err)
	} else {
		l.Release()
	}
	if _, err := closed.TryAcquire(bg, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("FailClosed: %v", err)
	}
	l, err := local.TryAcquire(bg, "k")
	if err != nil {
		t.Fatalf("FailLocal: %v", err)
	}
	if _, err := local.TryAcquire(bg, "k"); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Errorf("FailLocal, second: %v", err)
	}
	l.Release()
	if l, err := local.TryAcquire(bg, "k"); err != nil {
		t.Errorf("FailLocal after a release: %v", err)
	} else {
		l.Release()
	}
	if errs.Load() != 5 {
		t.Errorf("hook called %d times, want 5", errs.Load())
	}
}

func TestBulkheadInvalid(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	if _, err := NewBulkhead(c, 0, time.Second); !errors.Is(err, ratelimit.ErrInvalidCapacity) {
		t.Errorf("limit 0: %v", err)
	}
	for _, d := range []time.Duration{0, time.Millisecond - 1, maxSpan + 1} {
		if _, err := NewBulkhead(c, 1, d); !errors.Is(err, ratelimit.ErrInvalidOption) {
			t.Errorf("lease %v: %v", d, err)
		}
	}
	if _, err := NewBulkhead(c, 1, time.Second, WithPollInterval(0)); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("poll 0: %v", err)
	}
	if _, err := NewBulkhead(nil, 1, time.Second); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
}

// TestBulkheadTTL: on the server's clock, a key lives as long as its
// last lease.
func TestBulkheadTTL(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	b := newBH(t, c, 2, 2*time.Second)
	l1, _ := b.TryAcquire(bg, "k")
	k := redisKey(b.cfg.prefix, "k", ":bh")
	if pttl := c.PTTL(bg, k).Val(); pttl <= 1900*time.Millisecond || pttl > 2*time.Second+time.Millisecond {
		t.Errorf("PTTL with a 2s lease = %v", pttl)
	}
	l1.Release()
	if c.Exists(bg, k).Val() != 0 {
		t.Error("key left after its only lease was released")
	}
}
