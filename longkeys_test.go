package ratelimit

import (
	"encoding/binary"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// This file measures, from the heap, what keys of 64 KiB – 1 MiB cost
// every structure that keeps a client's key (docs/security.md).

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// longKeys calls f with n distinct keys of size bytes each, built one at a
// time so that only the structure under test can keep them alive: key i
// is size bytes of 'x' with i written into its last 8.
func longKeys(n, size int, f func(key string)) {
	b := make([]byte, size)
	for j := range b {
		b[j] = 'x'
	}
	for i := range n {
		binary.LittleEndian.PutUint64(b[size-8:], uint64(i))
		f(string(b))
	}
}

// perKeyHeld returns the heap the structure build returns holds, per
// key it reports holding, after f fed it.
func perKeyHeld(t *testing.T, build func() (keep any, held func() int), feed func(keep any)) float64 {
	t.Helper()
	base := heapInUse()
	keep, held := build()
	feed(keep)
	used := heapInUse()
	n := held()
	runtime.KeepAlive(keep)
	if n == 0 {
		t.Fatal("holds no key")
	}
	if used < base {
		return 0
	}
	return float64(used-base) / float64(n)
}

// TestLongKeysMemoryBound: under WithMaxKeys(1000), a flood of 3,000
// distinct keys of 256 KiB (each one event, none at rest) holds at most
// 4 KiB of heap per key held, for every algorithm: the store keeps a long
// key in its bounded form, not the key.
func TestLongKeysMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 750 MiB of keys per algorithm")
	}
	const keys, size, bound = 3000, 256 << 10, 4 << 10
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			per := perKeyHeld(t, func() (any, func() int) {
				l, err := alg.build(PerSecond(1), 5, WithMaxKeys(1000), WithClock(NewManualClock(suiteT0)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return l, func() int { return l.Stats().Keys }
			}, func(keep any) {
				l := keep.(testLimiter)
				longKeys(keys, size, func(key string) {
					if !l.Allow(key) {
						t.Fatal("a fresh key refused")
					}
				})
			})
			t.Logf("%.0f B per key held", per)
			if per > bound {
				t.Fatalf("%.0f B of heap per key held, want ≤ %d", per, bound)
			}
		})
	}
}

// TestLongKeysTopKeysBound: a TopKeys of 1,000 fed denials of 3,000
// distinct keys of 256 KiB holds at most 4 KiB per key listed, and counts
// apart long keys that differ in their last byte only.
func TestLongKeysTopKeysBound(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 750 MiB of keys")
	}
	per := perKeyHeld(t, func() (any, func() int) {
		tk, err := NewTopKeys(1000)
		if err != nil {
			t.Fatal(err)
		}
		return tk, func() int { return len(tk.Top()) }
	}, func(keep any) {
		tk := keep.(*TopKeys)
		longKeys(3000, 256<<10, func(key string) { tk.Observe(Event{Key: key}) })
	})
	t.Logf("%.0f B per key listed", per)
	if per > 4<<10 {
		t.Fatalf("%.0f B of heap per key listed, want ≤ 4096", per)
	}
	tk, _ := NewTopKeys(10)
	a, b := longKey("a"), longKey("b")
	for range 3 {
		tk.Observe(Event{Key: a})
	}
	tk.Observe(Event{Key: b})
	top := tk.Top()
	if len(top) != 2 || top[0].Count != 3 || top[1].Count != 1 || len(top[0].Key) > 78 || top[0].Key[:8] != "long-key" {
		t.Fatalf("two long keys one byte apart: %+v", top)
	}
}

// TestLongKeysKeyedBulkheadBound: 3,000 keys of 256 KiB each holding a
// permit (the caller keeping none of them) cost a KeyedBulkhead at most
// 4 KiB of heap per key held; keys one byte apart have their own permits,
// and Release, InFlight and Waiting find a long key by its bytes.
func TestLongKeysKeyedBulkheadBound(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 750 MiB of keys")
	}
	per := perKeyHeld(t, func() (any, func() int) {
		kb, err := NewKeyedBulkhead(1)
		if err != nil {
			t.Fatal(err)
		}
		return kb, kb.Keys
	}, func(keep any) {
		kb := keep.(*KeyedBulkhead)
		longKeys(3000, 256<<10, func(key string) {
			if !kb.TryAcquire(key) {
				t.Fatal("a fresh key refused")
			}
		})
	})
	t.Logf("%.0f B per key held", per)
	if per > 4<<10 {
		t.Fatalf("%.0f B of heap per key held, want ≤ 4096", per)
	}
	kb, _ := NewKeyedBulkhead(1)
	a, b := longKey("a"), longKey("b")
	if !kb.TryAcquire(a) || !kb.TryAcquire(b) || kb.TryAcquire(a) {
		t.Fatal("long keys one byte apart share their permits")
	}
	if kb.InFlight(a) != 1 || kb.Waiting(a) != 0 {
		t.Fatalf("InFlight %d, Waiting %d", kb.InFlight(a), kb.Waiting(a))
	}
	kb.Release(string([]byte(a))) // the same bytes, another string
	kb.Release(b)
	if kb.Keys() != 0 {
		t.Fatalf("%d keys held after every Release", kb.Keys())
	}
}

// TestSlidingLogMemoryFollowsEvents: at 10,000 events per hour, 10,000
// keys with one event each hold at most 512 B of heap per key, and a key's
// ring follows what it holds: k events in the window, O(k) bytes, given
// back as they leave it.
func TestSlidingLogMemoryFollowsEvents(t *testing.T) {
	clk := NewManualClock(suiteT0)
	per := perKeyHeld(t, func() (any, func() int) {
		l, err := NewSlidingLog(PerHour(10_000), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, func() int { return l.Stats().Keys }
	}, func(keep any) {
		l := keep.(*SlidingLog)
		for i := range 10_000 {
			if !l.Allow("k" + strconv.Itoa(i)) {
				t.Fatal("a fresh key refused")
			}
		}
	})
	t.Logf("%.0f B per key holding one event", per)
	if per > 512 {
		t.Fatalf("%.0f B of heap per key holding one event, want ≤ 512", per)
	}

	l, _ := NewSlidingLog(PerHour(10_000), WithClock(clk))
	defer l.Close()
	ringOf := func() int {
		h, _ := l.k.st.Take("k", clk.Now().UnixNano(), false)
		defer h.Release()
		return cap(h.State().ring)
	}
	for _, k := range []int{1, 10, 100, 1000, 10_000} {
		for range k {
			l.Allow("k")
			clk.Advance(time.Microsecond)
		}
		if n := ringOf(); n > 4*k || n < k {
			t.Fatalf("a ring of %d instants holding %d", n, k)
		}
		clk.Advance(time.Hour) // every instant leaves the window
		l.Allow("k")           // the next event gives the room back
		if n := ringOf(); n > minRing {
			t.Fatalf("a ring of %d instants holding 1", n)
		}
		clk.Advance(time.Hour)
		l.Sweep()
	}
}
