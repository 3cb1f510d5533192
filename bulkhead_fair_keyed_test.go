package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
)

// kbEnqueue queues a call of class c and tenant on key, failing if it was
// admitted at once or refused.
func kbEnqueue(t *testing.T, kb *KeyedBulkhead, key string, c int, tenant string) *permitWaiter {
	t.Helper()
	w, _, err := kb.enqueueFair(kb.shard(key), key, c, tenant)
	if err != nil || w == nil {
		t.Fatalf("enqueueFair(%q, %d, %q) = %v, %v; want queued", key, c, tenant, w, err)
	}
	return w
}

// TestKeyedBulkheadFair pins the fair queue within a key: round-robin
// across tenants, FIFO within one, keys apart, and a key dropped once idle.
func TestKeyedBulkheadFair(t *testing.T) {
	kb, err := NewKeyedBulkhead(1, WithBulkheadFairQueue(8, 16))
	if err != nil {
		t.Fatal(err)
	}
	if !kb.TryAcquire("k") || !kb.TryAcquire("other") {
		t.Fatal("TryAcquire = false on idle keys")
	}
	names := []string{"a1", "a2", "a3", "b1", "c1"}
	var ws []*permitWaiter
	for _, n := range names {
		ws = append(ws, kbEnqueue(t, kb, "k", 0, n[:1]))
	}
	if kb.TryAcquire("k") {
		t.Fatal("TryAcquire = true while calls wait for the key")
	}
	if kb.Waiting("k") != 5 || kb.Waiting("other") != 0 {
		t.Fatalf("Waiting = %d, %d; want 5, 0", kb.Waiting("k"), kb.Waiting("other"))
	}
	var got []string
	for range ws {
		before := grantedSet(ws)
		kb.Release("k")
		for i, w := range ws {
			if w.granted && !before[i] {
				got = append(got, names[i])
			}
		}
	}
	if g, want := strings.Join(got, " "), "a1 b1 c1 a2 a3"; g != want {
		t.Fatalf("grants %s, want %s", g, want)
	}
	kb.Release("k")
	kb.Release("other")
	if n := kb.Keys(); n != 0 {
		t.Fatalf("%d keys held once idle, want 0", n)
	}
	// Past the tenant's bound, for one key.
	kb.TryAcquire("k")
	for range 8 {
		kbEnqueue(t, kb, "k", 0, "a")
	}
	if err := kb.AcquireFor(context.Background(), "k", "a"); !errors.Is(err, ErrQueueFull) || !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("ninth wait of a: %v, want ErrQueueFull", err)
	}
}

// TestKeyedBulkheadClasses checks reserves and class order within a key.
func TestKeyedBulkheadClasses(t *testing.T) {
	kb, err := NewKeyedBulkhead(3, WithBulkheadClasses(Class{"critical", 1}, Class{"batch", 0}))
	if err != nil {
		t.Fatal(err)
	}
	took := 0
	for range 3 {
		if kb.TryAcquire("k") {
			took++
		}
	}
	if took != 2 {
		t.Fatalf("batch (TryAcquire) took %d permits, want the 2 unreserved", took)
	}
	batch := kbEnqueue(t, kb, "k", 1, "")
	if w, _, err := kb.enqueueFair(kb.shard("k"), "k", 0, ""); w != nil || err != nil {
		t.Fatalf("critical within its reserve queued: %v", err)
	}
	crit := kbEnqueue(t, kb, "k", 0, "")
	kb.Release("k")
	if !crit.granted || batch.granted {
		t.Fatal("the queued critical call was not served before the batch one")
	}
	crit2 := kbEnqueue(t, kb, "k", 0, "")
	kb.abandon(kb.shard("k"), "k", kb.shard("k").keys["k"], crit2)
	kb.Release("k") // 2 in flight: 1 free, no more than the reserve
	if batch.granted {
		t.Fatal("batch granted a reserved permit")
	}
	kb.Release("k") // 1 in flight: 2 free, more than the reserve
	if !batch.granted {
		t.Fatal("batch not granted once more permits were free than reserved")
	}
	ctx := ContextWithPriority(context.Background(), 5)
	if err := kb.Acquire(ctx, "k"); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("unknown class: %v", err)
	}
}

// TestKeyedBulkheadFairProperty: random calls, cancellations (some at the
// instant of a grant) and releases on a few keys; never more than the
// limit in flight for a key, and at the end no key held and every key
// admits the full limit.
func TestKeyedBulkheadFairProperty(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		limit := 1 + rng.IntN(4)
		opts := []BulkheadOption{WithBulkheadFairQueue(1+rng.IntN(6), 1+rng.IntN(20))}
		nclass := 1
		if seed%2 == 0 {
			opts = append(opts, WithBulkheadClasses(Class{"hi", int64(1 + rng.IntN(limit))}, Class{"lo", 0}))
			nclass = 2
		}
		kb, err := NewKeyedBulkhead(limit, opts...)
		if err != nil {
			t.Fatal(err)
		}
		type call struct {
			key string
			w   *permitWaiter
		}
		held := map[string]int{}
		var live []call
		sweep := func() {
			var rest []call
			for _, c := range live {
				if c.w.granted {
					held[c.key]++
				} else {
					rest = append(rest, c)
				}
			}
			live = rest
			for k, n := range held {
				if n > limit || n != kb.InFlight(k) {
					t.Fatalf("seed %d: key %s: %d held, InFlight %d, limit %d", seed, k, n, kb.InFlight(k), limit)
				}
			}
		}
		for range 3000 {
			key := fmt.Sprint("k", rng.IntN(3))
			switch op := rng.IntN(6); {
			case op < 3:
				w, _, err := kb.enqueueFair(kb.shard(key), key, rng.IntN(nclass), fmt.Sprint("t", rng.IntN(4)))
				switch {
				case err != nil:
					if !errors.Is(err, ErrQueueFull) {
						t.Fatal(err)
					}
				case w == nil:
					held[key]++
				default:
					live = append(live, call{key, w})
				}
			case op < 4 && len(live) > 0:
				i := rng.IntN(len(live))
				c := live[i]
				if held[c.key] > 0 && rng.IntN(2) == 0 {
					held[c.key]--
					kb.Release(c.key) // may grant c at the instant it gives up
				}
				live = append(live[:i], live[i+1:]...)
				sh := kb.shard(c.key)
				kb.abandon(sh, c.key, sh.keys[c.key], c.w)
			case held[key] > 0:
				held[key]--
				kb.Release(key)
			}
			sweep()
		}
		for _, c := range live {
			sh := kb.shard(c.key)
			kb.abandon(sh, c.key, sh.keys[c.key], c.w)
		}
		live = nil
		sweep()
		for k, n := range held {
			for range n {
				kb.Release(k)
			}
		}
		if n := kb.Keys(); n != 0 {
			t.Fatalf("seed %d: %d keys held at the end", seed, n)
		}
		for i := range limit {
			if w, _, err := kb.enqueueFair(kb.shard("k0"), "k0", 0, ""); w != nil || err != nil {
				t.Fatalf("seed %d: permit %d of %d not free at the end: %v", seed, i+1, limit, err)
			}
		}
	}
}

// TestAdaptiveBulkheadFair: AcquireFor and DoFor on an adaptive bulkhead
// wait in their tenant's turn.
func TestAdaptiveBulkheadFair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := NewAdaptiveBulkhead(AdaptiveParams{Min: 1, Initial: 1, Max: 4}, WithBulkheadFairQueue(4, 8))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.AcquireFor(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		var order []string
		a2 := bhGo(func() error {
			return a.DoFor(context.Background(), "a", func(context.Context) error { order = append(order, "a"); return nil })
		})
		synctest.Wait()
		a3 := bhGo(func() error {
			return a.DoFor(context.Background(), "a", func(context.Context) error { order = append(order, "a"); return nil })
		})
		synctest.Wait()
		b1 := bhGo(func() error {
			return a.DoFor(context.Background(), "b", func(context.Context) error { order = append(order, "b"); return nil })
		})
		synctest.Wait()
		a.Release()
		for _, ch := range []<-chan error{a2, b1, a3} {
			if err := bhDone(t, ch, "DoFor"); err != nil {
				t.Fatal(err)
			}
		}
		if g := strings.Join(order, ""); g != "aba" {
			t.Fatalf("order %s, want aba", g)
		}
		if a.InFlight() != 0 || a.Waiting() != 0 {
			t.Fatalf("InFlight %d, Waiting %d at the end", a.InFlight(), a.Waiting())
		}
	})
}
