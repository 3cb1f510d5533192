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
	"testing/synctest"
	"time"
)

func kbNew(t *testing.T, limit int, opts ...BulkheadOption) *KeyedBulkhead {
	t.Helper()
	kb, err := NewKeyedBulkhead(limit, opts...)
	if err != nil {
		t.Fatalf("NewKeyedBulkhead(%d): %v", limit, err)
	}
	return kb
}

func kbCheck(t *testing.T, kb *KeyedBulkhead, key string, inFlight, waiting int) {
	t.Helper()
	if got := kb.InFlight(key); got != inFlight {
		t.Errorf("InFlight(%q) = %d, want %d", key, got, inFlight)
	}
	if got := kb.Waiting(key); got != waiting {
		t.Errorf("Waiting(%q) = %d, want %d", key, got, waiting)
	}
}

func TestKeyedBulkheadTryAcquire(t *testing.T) {
	kb := kbNew(t, 2)
	if kb.Keys() != 0 || kb.Limit() != 2 {
		t.Fatalf("new: Keys() = %d, Limit() = %d; want 0, 2", kb.Keys(), kb.Limit())
	}
	if first, second := kb.TryAcquire("a"), kb.TryAcquire("a"); !first || !second {
		t.Fatal("TryAcquire(a) = false within the limit")
	}
	if kb.TryAcquire("a") {
		t.Fatal("3rd TryAcquire(a) = true, want false")
	}
	// Keys are independent.
	if !kb.TryAcquire("b") {
		t.Fatal("TryAcquire(b) = false with b idle")
	}
	kbCheck(t, kb, "a", 2, 0)
	kbCheck(t, kb, "b", 1, 0)
	kbCheck(t, kb, "c", 0, 0)
	if kb.Keys() != 2 {
		t.Errorf("Keys() = %d, want 2", kb.Keys())
	}
	kb.Release("b")
	if kb.Keys() != 1 {
		t.Errorf("Keys() = %d after b went idle, want 1", kb.Keys())
	}
	kb.Release("a")
	if kb.Keys() != 1 || !kb.TryAcquire("a") {
		t.Errorf("a with 1 of 2 in flight: Keys() = %d, TryAcquire refused", kb.Keys())
	}
	kb.Release("a")
	kb.Release("a")
	if kb.Keys() != 0 {
		t.Errorf("Keys() = %d with nothing in flight, want 0", kb.Keys())
	}
	kbCheck(t, kb, "a", 0, 0)
}

func TestKeyedBulkheadReleaseWithoutAcquire(t *testing.T) {
	kb := kbNew(t, 2)
	if !kb.TryAcquire("a") {
		t.Fatal("TryAcquire = false")
	}
	const msg = "ratelimit: Release without Acquire"
	if r := bhPanic(func() { kb.Release("b") }); r != msg {
		t.Errorf("Release(b) with b idle: recover() = %v, want %q", r, msg)
	}
	kbCheck(t, kb, "a", 1, 0)
	kb.Release("a")
	if r := bhPanic(func() { kb.Release("a") }); r != msg {
		t.Errorf("second Release(a): recover() = %v, want %q", r, msg)
	}
	if kb.Keys() != 0 {
		t.Errorf("Keys() = %d, want 0", kb.Keys())
	}
	first, second, third := kb.TryAcquire("a"), kb.TryAcquire("a"), kb.TryAcquire("a")
	if !first || !second || third {
		t.Error("after the panics a does not admit exactly 2")
	}
}

func TestKeyedBulkheadWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := NewManualClock(bhT0)
		kb := kbNew(t, 1, WithMaxWait(time.Second), WithMaxWaiters(2), WithBulkheadClock(clk))
		ctx := context.Background()
		if !kb.TryAcquire("a") {
			t.Fatal("TryAcquire = false")
		}
		w1 := bhGo(func() error { return kb.Acquire(ctx, "a") })
		synctest.Wait()
		cctx, cancel := context.WithCancel(ctx)
		w2 := bhGo(func() error { return kb.Acquire(cctx, "a") })
		synctest.Wait()
		kbCheck(t, kb, "a", 1, 2)
		if err := kb.Acquire(ctx, "a"); err != ErrBulkheadFull {
			t.Fatalf("3rd waiter: Acquire = %v, want ErrBulkheadFull", err)
		}
		if kb.TryAcquire("a") {
			t.Fatal("TryAcquire(a) = true while others wait")
		}
		// Another key is not held up by a's queue.
		if err := kb.Do(ctx, "b", func(context.Context) error {
			kbCheck(t, kb, "b", 1, 0)
			return nil
		}); err != nil {
			t.Fatalf("Do(b) = %v", err)
		}

		cancel()
		if err := bhDone(t, w2, "cancelled waiter"); err != context.Canceled {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
		kbCheck(t, kb, "a", 1, 1)

		kb.Release("a") // FIFO: to w1
		if err := bhDone(t, w1, "waiter 1"); err != nil {
			t.Fatal(err)
		}
		kbCheck(t, kb, "a", 1, 0)

		// The maximum wait, on the manual clock.
		w3 := bhGo(func() error { return kb.Acquire(ctx, "a") })
		bhPending(t, w3, "waiter 3")
		clk.Advance(time.Second - 1)
		bhPending(t, w3, "waiter 3 at 1s-1ns")
		clk.Advance(1)
		err := bhDone(t, w3, "waiter 3 at 1s")
		if !errors.Is(err, ErrBulkheadFull) || err == ErrBulkheadFull {
			t.Fatalf("Acquire = %v, want a wait error matching ErrBulkheadFull", err)
		}
		kbCheck(t, kb, "a", 1, 0)
		kb.Release("a")
		if kb.Keys() != 0 {
			t.Errorf("Keys() = %d, want 0", kb.Keys())
		}
	})
}

// TestKeyedBulkheadAbandon pins a wait ending at the instant a permit is
// handed to it, as TestBulkheadAbandonGranted does, and checks that the
// key is dropped once nothing waits or is in flight.
func TestKeyedBulkheadAbandon(t *testing.T) {
	kb := kbNew(t, 1)
	if !kb.TryAcquire("a") {
		t.Fatal("TryAcquire = false")
	}
	sh := kb.shard("a")
	w1, e, _ := kb.enqueue(sh, "a")
	w2, _, _ := kb.enqueue(sh, "a")
	w3, _, _ := kb.enqueue(sh, "a")
	if w1 == nil || w2 == nil || w3 == nil {
		t.Fatal("enqueue took a permit, want queued")
	}
	kbCheck(t, kb, "a", 1, 3)
	kb.abandon(sh, "a", e, w2) // from the middle of the queue
	kb.Release("a")            // to w1 ...
	if !w1.granted || w3.granted {
		t.Fatalf("granted = %v, %v; want true, false", w1.granted, w3.granted)
	}
	kb.abandon(sh, "a", e, w1) // ... whose wait ended at that instant: to w3
	if !w3.granted {
		t.Fatal("w3 not granted the permit w1 gave up")
	}
	kbCheck(t, kb, "a", 1, 0)
	kb.abandon(sh, "a", e, w3) // and back to the pool: a is idle, dropped
	kbCheck(t, kb, "a", 0, 0)
	if kb.Keys() != 0 {
		t.Errorf("Keys() = %d, want 0", kb.Keys())
	}
}

func TestKeyedBulkheadAllocs(t *testing.T) {
	kb := kbNew(t, 4)
	ctx := context.Background()
	keys := []string{"idle", "busy"}
	if !kb.TryAcquire("busy") {
		t.Fatal("TryAcquire = false")
	}
	for _, key := range keys {
		if n := testing.AllocsPerRun(100, func() {
			kb.TryAcquire(key)
			kb.Release(key)
		}); n != 0 {
			t.Errorf("TryAcquire+Release(%s): %v allocs, want 0", key, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			kb.Acquire(ctx, key)
			kb.Release(key)
		}); n != 0 {
			t.Errorf("Acquire+Release(%s): %v allocs, want 0", key, n)
		}
	}
}

// TestKeyedBulkheadMemory checks that a burst of many keys leaves no map
// behind once they are idle.
func TestKeyedBulkheadMemory(t *testing.T) {
	kb := kbNew(t, 1)
	const n = 20000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("user-", i)
		if !kb.TryAcquire(keys[i]) {
			t.Fatalf("TryAcquire(%s) = false", keys[i])
		}
	}
	if kb.Keys() != n {
		t.Fatalf("Keys() = %d, want %d", kb.Keys(), n)
	}
	for _, k := range keys {
		kb.Release(k)
	}
	if kb.Keys() != 0 {
		t.Fatalf("Keys() = %d, want 0", kb.Keys())
	}
	for i := range kb.shards {
		sh := &kb.shards[i]
		if sh.keys != nil {
			t.Fatalf("shard %d still holds its map (peak %d)", i, sh.peak)
		}
		if sh.nfree > keyedBulkheadFree {
			t.Fatalf("shard %d keeps %d free entries", i, sh.nfree)
		}
	}
}

// TestKeyedBulkheadStress races acquires with tiny timeouts and cancels
// against releases over a few keys, and checks each key's limit and that
// every key is dropped at the end.
func TestKeyedBulkheadStress(t *testing.T) {
	bhNoLeak(t)
	const (
		limit      = 2
		goroutines = 20
		iterations = 500
		nkeys      = 4
	)
	kb := kbNew(t, limit, WithMaxWait(time.Millisecond), WithMaxWaiters(8))
	keys := make([]string, nkeys)
	var inUse, maxInUse [nkeys]atomic.Int64
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	var acquired, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range iterations {
				k := rng.IntN(nkeys)
				var err error
				switch rng.IntN(3) {
				case 0:
					if !kb.TryAcquire(keys[k]) {
						err = ErrBulkheadFull
					}
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1000))*time.Microsecond)
					err = kb.Acquire(ctx, keys[k])
					cancel()
				case 2:
					ctx, cancel := context.WithCancel(context.Background())
					go cancel()
					err = kb.Acquire(ctx, keys[k])
					cancel()
				}
				if err != nil {
					refused.Add(1)
					continue
				}
				acquired.Add(1)
				n := inUse[k].Add(1)
				for m := maxInUse[k].Load(); n > m && !maxInUse[k].CompareAndSwap(m, n); m = maxInUse[k].Load() {
				}
				runtime.Gosched()
				inUse[k].Add(-1)
				kb.Release(keys[k])
			}
		})
	}
	wg.Wait()
	for k, key := range keys {
		kbCheck(t, kb, key, 0, 0)
		if m := maxInUse[k].Load(); m > limit {
			t.Errorf("key %s: max in flight = %d, limit %d", key, m, limit)
		}
	}
	if kb.Keys() != 0 {
		t.Errorf("Keys() = %d after the stress, want 0", kb.Keys())
	}
	t.Logf("acquired %d, refused %d", acquired.Load(), refused.Load())
	if acquired.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the stress did not exercise both outcomes: acquired %d, refused %d", acquired.Load(), refused.Load())
	}
}
