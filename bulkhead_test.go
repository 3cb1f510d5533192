package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Blocking behaviour is tested inside synctest bubbles: synctest.Wait
// returns once every other goroutine of the bubble is blocked, so a test
// knows a caller is waiting (or has returned) without sleeping, and
// synctest.Test fails if a goroutine is left behind. Maximum waits run on a
// ManualClock; ctx deadlines on the bubble's fake time.

var bhT0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// bhGo runs f in a goroutine and returns a channel that receives its
// result.
func bhGo(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// bhPending fails unless f's goroutine is still blocked. Call inside a
// bubble.
func bhPending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-ch:
		t.Fatalf("%s: returned %v, want still waiting", what, err)
	default:
	}
}

// bhDone returns f's result, failing if its goroutine is still blocked.
// Call inside a bubble.
func bhDone(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-ch:
		return err
	default:
		t.Fatalf("%s: still waiting, want returned", what)
		return nil
	}
}

func bhCheck(t *testing.T, b *Bulkhead, inFlight, waiting int) {
	t.Helper()
	if got := b.InFlight(); got != inFlight {
		t.Errorf("InFlight() = %d, want %d", got, inFlight)
	}
	if got := b.Waiting(); got != waiting {
		t.Errorf("Waiting() = %d, want %d", got, waiting)
	}
}

func bhNew(t *testing.T, limit int, opts ...BulkheadOption) *Bulkhead {
	t.Helper()
	b, err := NewBulkhead(limit, opts...)
	if err != nil {
		t.Fatalf("NewBulkhead(%d): %v", limit, err)
	}
	return b
}

// bhNoLeak fails the test if, at its end, a goroutine started during it
// is still running bulkhead code or a bulkhead test function. It compares
// goroutine ids from runtime.Stack before and after, retrying for a while
// so that goroutines on their way out may finish. Only bulkhead frames
// count, so that tests of other files running in parallel do not disturb
// it. (go.uber.org/goleak would do the same job but would add a dependency
// to the core module's go.mod.)
func bhNoLeak(t *testing.T) {
	t.Helper()
	before := bhGoroutines()
	t.Cleanup(func() {
		var leaked []string
		for try := 0; try < 200; try++ {
			leaked = leaked[:0]
			for id, stack := range bhGoroutines() {
				if _, old := before[id]; !old && (strings.Contains(stack, "Bulkhead") || strings.Contains(stack, "awaitPermit")) {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("%d goroutines left behind:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	})
}

// bhGoroutines returns the stack of every goroutine but the caller's, by id.
func bhGoroutines() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	m := make(map[string]string, len(stacks))
	for _, s := range stacks[1:] { // the first is the caller's
		id, _, _ := strings.Cut(strings.TrimPrefix(s, "goroutine "), " ")
		m[id] = s
	}
	return m
}

// bhPanic calls f and returns what it panicked with, nil if it did not.
func bhPanic(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

func TestNewBulkheadInvalid(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		opts  []BulkheadOption
		want  error
	}{
		{"zero limit", 0, nil, ErrInvalidCapacity},
		{"negative limit", -1, nil, ErrInvalidCapacity},
		{"limit too large", maxBulkheadLimit + 1, nil, ErrInvalidCapacity},
		{"negative max wait", 1, []BulkheadOption{WithMaxWait(-time.Nanosecond)}, ErrInvalidOption},
		{"negative max waiters", 1, []BulkheadOption{WithMaxWaiters(-1)}, ErrInvalidOption},
		{"nil clock", 1, []BulkheadOption{WithBulkheadClock(nil)}, ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBulkhead(tt.limit, tt.opts...)
			if !errors.Is(err, tt.want) || b != nil {
				t.Errorf("NewBulkhead = %v, %v; want nil, %v", b, err, tt.want)
			}
			kb, err := NewKeyedBulkhead(tt.limit, tt.opts...)
			if !errors.Is(err, tt.want) || kb != nil {
				t.Errorf("NewKeyedBulkhead = %v, %v; want nil, %v", kb, err, tt.want)
			}
		})
	}
	if b, err := NewBulkhead(maxBulkheadLimit); err != nil || b.Limit() != maxBulkheadLimit {
		t.Errorf("NewBulkhead(max) = %v, %v; want limit %d", b, err, maxBulkheadLimit)
	}
}

func TestBulkheadTryAcquire(t *testing.T) {
	b := bhNew(t, 5)
	for i := range 5 {
		if !b.TryAcquire() {
			t.Fatalf("TryAcquire #%d = false, want true", i+1)
		}
	}
	if b.TryAcquire() {
		t.Fatal("6th TryAcquire = true, want false")
	}
	bhCheck(t, b, 5, 0)
	b.Release()
	if !b.TryAcquire() {
		t.Fatal("TryAcquire after Release = false, want true")
	}
	for range 5 {
		b.Release()
	}
	bhCheck(t, b, 0, 0)
	if b.Limit() != 5 {
		t.Errorf("Limit() = %d, want 5", b.Limit())
	}
}

func TestBulkheadAcquireFree(t *testing.T) {
	b := bhNew(t, 2)
	ctx := context.Background()
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	bhCheck(t, b, 2, 0)
}

func TestBulkheadReleaseWithoutAcquire(t *testing.T) {
	b := bhNew(t, 2)
	if !b.TryAcquire() {
		t.Fatal("TryAcquire = false")
	}
	b.Release()
	if r := bhPanic(b.Release); r != "ratelimit: Release without Acquire" {
		t.Errorf("recover() = %v, want the Release panic", r)
	}
	// The count is intact: exactly 2 permits, not 3.
	bhCheck(t, b, 0, 0)
	first, second, third := b.TryAcquire(), b.TryAcquire(), b.TryAcquire()
	if !first || !second || third {
		t.Error("after the panic the bulkhead does not admit exactly 2")
	}
}

func TestBulkheadMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := NewManualClock(bhT0)
		b := bhNew(t, 1, WithMaxWait(100*time.Millisecond), WithBulkheadClock(clk))
		ctx := context.Background()
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false")
		}

		// t0: wait; t0+99ms: released in time, so the waiter gets it.
		res := bhGo(func() error { return b.Acquire(ctx) })
		bhPending(t, res, "Acquire")
		bhCheck(t, b, 1, 1)
		clk.Advance(99 * time.Millisecond)
		bhPending(t, res, "Acquire at 99ms")
		b.Release()
		if err := bhDone(t, res, "Acquire after Release"); err != nil {
			t.Fatalf("Acquire = %v, want nil", err)
		}
		bhCheck(t, b, 1, 0)
		if n := clk.Timers(); n != 0 {
			t.Errorf("Timers() = %d after the wait, want 0 (timer stopped)", n)
		}

		// A second wait is not released in time: at exactly 100ms it fails.
		res = bhGo(func() error { return b.Acquire(ctx) })
		bhPending(t, res, "Acquire")
		clk.Advance(100*time.Millisecond - 1)
		bhPending(t, res, "Acquire at 100ms-1ns")
		clk.Advance(1)
		err := bhDone(t, res, "Acquire at 100ms")
		if !errors.Is(err, ErrBulkheadFull) || err == ErrBulkheadFull {
			t.Fatalf("Acquire = %v, want a wait error matching ErrBulkheadFull", err)
		}
		if want := "ratelimit: bulkhead full: no permit within the maximum wait of 100ms"; err.Error() != want {
			t.Errorf("error text = %q, want %q", err, want)
		}
		bhCheck(t, b, 1, 0) // unchanged
		b.Release()
		bhCheck(t, b, 0, 0) // the permit went back to the pool, not to the failed waiter
	})
}

func TestBulkheadContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bhNew(t, 1)
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false")
		}

		// Cancelled while waiting.
		ctx, cancel := context.WithCancel(context.Background())
		res := bhGo(func() error { return b.Acquire(ctx) })
		bhPending(t, res, "Acquire")
		cancel()
		if err := bhDone(t, res, "Acquire after cancel"); err != context.Canceled {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
		bhCheck(t, b, 1, 0)

		// Deadline passing while waiting (the bubble's fake time moves
		// when everyone is blocked).
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		start := time.Now()
		if err := b.Acquire(dctx); err != context.DeadlineExceeded {
			t.Fatalf("Acquire = %v, want context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("waited %v, want 1s", waited)
		}
		bhCheck(t, b, 1, 0)
		b.Release()

		// Already done: fails even though a permit is free.
		if err := b.Acquire(ctx); err != context.Canceled {
			t.Fatalf("Acquire(done ctx) = %v, want context.Canceled", err)
		}
		bhCheck(t, b, 0, 0)
	})
}

func TestBulkheadFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bhNew(t, 1)
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false")
		}
		const n = 5
		var order []int
		var mu sync.Mutex
		results := make([]<-chan error, n)
		for i := range n {
			results[i] = bhGo(func() error {
				err := b.Acquire(context.Background())
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return err
			})
			synctest.Wait() // waiter i is queued before i+1 starts
		}
		bhCheck(t, b, 1, n)
		// A newcomer may not jump the queue.
		if b.TryAcquire() {
			t.Fatal("TryAcquire = true while others wait")
		}
		for i := range n {
			b.Release() // hands the permit to the head of the queue
			if err := bhDone(t, results[i], fmt.Sprintf("waiter %d", i)); err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
			for j := i + 1; j < n; j++ {
				bhPending(t, results[j], fmt.Sprintf("waiter %d", j))
			}
			bhCheck(t, b, 1, n-1-i)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("order = %v, want 0..%d", order, n-1)
			}
		}
		b.Release()
		bhCheck(t, b, 0, 0)
		if !b.TryAcquire() {
			t.Error("TryAcquire = false once the queue is empty")
		}
	})
}

func TestBulkheadMaxWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bhNew(t, 1, WithMaxWaiters(2))
		ctx := context.Background()
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false")
		}
		w1 := bhGo(func() error { return b.Acquire(ctx) })
		synctest.Wait() // w1 is queued first
		w2 := bhGo(func() error { return b.Acquire(ctx) })
		synctest.Wait()
		bhCheck(t, b, 1, 2)
		if err := b.Acquire(ctx); err != ErrBulkheadFull {
			t.Fatalf("3rd waiter: Acquire = %v, want ErrBulkheadFull at once", err)
		}
		if err := b.Do(ctx, func(context.Context) error { t.Error("fn called"); return nil }); err != ErrBulkheadFull {
			t.Fatalf("Do = %v, want ErrBulkheadFull", err)
		}
		bhCheck(t, b, 1, 2)
		b.Release()
		if err := bhDone(t, w1, "waiter 1"); err != nil {
			t.Fatal(err)
		}
		// One place in the queue is free again.
		w3 := bhGo(func() error { return b.Acquire(ctx) })
		bhPending(t, w3, "waiter 3")
		bhCheck(t, b, 1, 2)
		b.Release()
		b.Release()
		for _, w := range []<-chan error{w2, w3} {
			if err := bhDone(t, w, "waiter"); err != nil {
				t.Fatal(err)
			}
		}
		bhCheck(t, b, 1, 0)
	})
}

func TestBulkheadSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bhNew(t, 1)
		ctx := context.Background()
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false")
		}
		ws := make([]<-chan error, 4)
		for i := range ws {
			ws[i] = bhGo(func() error { return b.Acquire(ctx) })
			synctest.Wait()
		}

		// Growing wakes the first waiters at once, in order.
		if err := b.SetLimit(3); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws[:2] {
			if err := bhDone(t, w, "woken waiter"); err != nil {
				t.Fatal(err)
			}
		}
		bhPending(t, ws[2], "waiter 2")
		bhPending(t, ws[3], "waiter 3")
		bhCheck(t, b, 3, 2)
		if b.Limit() != 3 {
			t.Fatalf("Limit() = %d, want 3", b.Limit())
		}

		// Shrinking drops no one: 3 stay in flight, and the waiters are
		// served only once fewer than 1 remain after a release.
		if err := b.SetLimit(1); err != nil {
			t.Fatal(err)
		}
		bhCheck(t, b, 3, 2)
		b.Release()
		bhPending(t, ws[2], "waiter 2 with 2 in flight")
		bhCheck(t, b, 2, 2)
		b.Release()
		bhPending(t, ws[2], "waiter 2 with 1 in flight")
		bhCheck(t, b, 1, 2)
		b.Release() // 0 in flight: the permit goes to waiter 2
		if err := bhDone(t, ws[2], "waiter 2"); err != nil {
			t.Fatal(err)
		}
		bhCheck(t, b, 1, 1)
		b.Release()
		if err := bhDone(t, ws[3], "waiter 3"); err != nil {
			t.Fatal(err)
		}
		b.Release()
		bhCheck(t, b, 0, 0)

		// Shrinking with no waiters: TryAcquire refuses until below.
		if err := b.SetLimit(2); err != nil {
			t.Fatal(err)
		}
		b.TryAcquire()
		b.TryAcquire()
		if err := b.SetLimit(1); err != nil {
			t.Fatal(err)
		}
		if b.TryAcquire() {
			t.Error("TryAcquire = true with 2 in flight and limit 1")
		}
		b.Release()
		if b.TryAcquire() {
			t.Error("TryAcquire = true with 1 in flight and limit 1")
		}
		b.Release()
		if !b.TryAcquire() {
			t.Error("TryAcquire = false with 0 in flight and limit 1")
		}
		b.Release()

		for _, n := range []int{0, -1, maxBulkheadLimit + 1} {
			if err := b.SetLimit(n); !errors.Is(err, ErrInvalidCapacity) {
				t.Errorf("SetLimit(%d) = %v, want ErrInvalidCapacity", n, err)
			}
		}
		if b.Limit() != 1 {
			t.Errorf("Limit() = %d after invalid SetLimit, want 1", b.Limit())
		}
	})
}

func TestBulkheadDo(t *testing.T) {
	b := bhNew(t, 1)
	ctx := context.Background()
	errFn := errors.New("fn failed")
	calls := 0
	err := b.Do(ctx, func(c context.Context) error {
		calls++
		if c != ctx {
			t.Error("fn got another context")
		}
		bhCheck(t, b, 1, 0)
		return errFn
	})
	if err != errFn || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want fn's error after 1", err, calls)
	}
	bhCheck(t, b, 0, 0)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Do(cctx, func(context.Context) error { calls++; return nil }); err != context.Canceled || calls != 1 {
		t.Fatalf("Do(done ctx) = %v, calls %d; want context.Canceled without calling fn", err, calls)
	}

	// fn panics: the permit comes back and the panic goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recover() = %v, want boom", r)
			}
		}()
		b.Do(ctx, func(context.Context) error { panic("boom") })
		t.Error("Do returned after fn panicked")
	}()
	bhCheck(t, b, 0, 0)

	// fn calls runtime.Goexit: the permit comes back too.
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Do(ctx, func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-done
	bhCheck(t, b, 0, 0)

	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("Do(nil fn) did not panic")
			}
		}()
		b.Do(ctx, nil)
	}()
	bhCheck(t, b, 0, 0)
}

// TestBulkheadAbandonGranted pins the race a wait ending at the instant a
// permit is handed to it: the permit is passed on to the next waiter, or
// back to the pool, never lost. It drives the internal steps in the order
// that the race produces.
func TestBulkheadAbandonGranted(t *testing.T) {
	b := bhNew(t, 1)
	if !b.TryAcquire() {
		t.Fatal("TryAcquire = false")
	}
	w1, _ := b.enqueue()
	w2, _ := b.enqueue()
	if w1 == nil || w2 == nil {
		t.Fatal("enqueue took a permit, want queued")
	}
	b.Release() // hands the permit to w1 ...
	if !w1.granted || w2.granted {
		t.Fatalf("granted = %v, %v; want true, false", w1.granted, w2.granted)
	}
	b.abandon(w1) // ... whose wait ended at that instant: it goes to w2
	if !w2.granted {
		t.Fatal("w2 not granted the permit w1 gave up")
	}
	bhCheck(t, b, 1, 0)
	select {
	case <-w2.ready:
	default:
		t.Fatal("w2.ready not closed")
	}
	b.abandon(w2) // w2 too: back to the pool
	bhCheck(t, b, 0, 0)
	if !b.TryAcquire() || b.TryAcquire() {
		t.Error("after the abandons the bulkhead does not admit exactly 1")
	}

	// A waiter abandoned before any grant just leaves the queue, from
	// anywhere in it.
	w3, _ := b.enqueue()
	w4, _ := b.enqueue()
	w5, _ := b.enqueue()
	b.abandon(w4)
	bhCheck(t, b, 1, 2)
	b.Release()
	if !w3.granted || w5.granted {
		t.Fatalf("granted = %v, %v; want true, false", w3.granted, w5.granted)
	}
	b.abandon(w5)
	bhCheck(t, b, 1, 0)
	if b.TryAcquire() {
		t.Error("TryAcquire = true with 1 in flight and limit 1")
	}
	b.Release()
	if !b.TryAcquire() {
		t.Error("TryAcquire = false with the queue empty")
	}
}

func TestBulkheadAllocs(t *testing.T) {
	b := bhNew(t, 4)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		b.TryAcquire()
		b.Release()
	}); n != 0 {
		t.Errorf("TryAcquire+Release: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		b.Acquire(ctx)
		b.Release()
	}); n != 0 {
		t.Errorf("Acquire+Release with a free permit: %v allocs, want 0", n)
	}
}

// TestBulkheadStress races acquires with tiny timeouts (ctx deadlines and
// the bulkhead's own maximum wait) and cancels against releases, on the
// system clock, and checks that the limit always holds and that every
// permit comes back.
func TestBulkheadStress(t *testing.T) {
	bhNoLeak(t)
	const (
		limit      = 3
		goroutines = 20
		iterations = 500
	)
	b := bhNew(t, limit, WithMaxWait(time.Millisecond), WithMaxWaiters(16))
	var inUse, maxInUse atomic.Int64
	var acquired, refused atomic.Int64
	hold := func() {
		n := inUse.Add(1)
		for m := maxInUse.Load(); n > m && !maxInUse.CompareAndSwap(m, n); m = maxInUse.Load() {
		}
		if n > limit {
			t.Errorf("%d in flight, limit %d", n, limit)
		}
		runtime.Gosched()
		inUse.Add(-1)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range iterations {
				var err error
				switch rng.IntN(4) {
				case 0:
					if !b.TryAcquire() {
						refused.Add(1)
						continue
					}
				case 1: // a ctx deadline racing the releases
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1000))*time.Microsecond)
					err = b.Acquire(ctx)
					cancel()
				case 2: // a cancel racing the releases
					ctx, cancel := context.WithCancel(context.Background())
					go cancel()
					err = b.Acquire(ctx)
					cancel()
				case 3: // the maximum wait
					err = b.Do(context.Background(), func(context.Context) error {
						acquired.Add(1)
						hold()
						return nil
					})
					if err != nil {
						refused.Add(1)
					}
					continue
				}
				if err != nil {
					refused.Add(1)
					continue
				}
				acquired.Add(1)
				hold()
				b.Release()
			}
		})
	}
	wg.Wait()
	bhCheck(t, b, 0, 0)
	if m := maxInUse.Load(); m > limit {
		t.Errorf("max in flight = %d, limit %d", m, limit)
	}
	// Every permit is back: exactly limit can be taken now.
	for i := range limit {
		if !b.TryAcquire() {
			t.Fatalf("TryAcquire #%d = false after the stress", i+1)
		}
	}
	if b.TryAcquire() {
		t.Fatal("TryAcquire admitted more than the limit after the stress")
	}
	t.Logf("acquired %d, refused %d, max in flight %d", acquired.Load(), refused.Load(), maxInUse.Load())
	if acquired.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the stress did not exercise both outcomes: acquired %d, refused %d", acquired.Load(), refused.Load())
	}
}

// TestBulkheadHandoverRace makes a wait end at the instant a permit is
// released to it, many times over, and checks that no permit is lost or
// doubled.
func TestBulkheadHandoverRace(t *testing.T) {
	bhNoLeak(t)
	b := bhNew(t, 1)
	got, lost := 0, 0
	for range 2000 {
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false between rounds")
		}
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- b.Acquire(ctx) }()
		for b.Waiting() == 0 && b.InFlight() == 1 && len(res) == 0 {
			runtime.Gosched()
		}
		var wg sync.WaitGroup
		wg.Go(cancel)
		wg.Go(b.Release)
		wg.Wait()
		if err := <-res; err == nil {
			got++
			b.Release()
		} else {
			lost++
		}
		if n := b.InFlight(); n != 0 {
			t.Fatalf("InFlight() = %d after a round, want 0", n)
		}
		if n := b.Waiting(); n != 0 {
			t.Fatalf("Waiting() = %d after a round, want 0", n)
		}
	}
	t.Logf("waiter won %d rounds, cancel won %d", got, lost)
}
