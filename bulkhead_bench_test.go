package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// Benchmarks of Bulkhead next to two naive semaphores with the same
// TryAcquire/Release contract: a buffered channel, and a mutex guarding the
// count (what Bulkhead's fast path would be without its atomic word). The
// comparison with golang.org/x/sync/semaphore and other peers lives in the
// nested benchmarks module, to keep them out of the core's go.mod.

// bhSemaphore is the contract the benchmarks drive.
type bhSemaphore interface {
	TryAcquire() bool
	Release()
}

// bhChanSem is the classic buffered-channel semaphore: a send takes a
// permit, a receive gives it back.
type bhChanSem chan struct{}

func (s bhChanSem) TryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s bhChanSem) Release() { <-s }

// bhMutexSem is Bulkhead's fast path written with a mutex instead of an
// atomic word: refuse while anyone waits, else take a permit if one is
// free.
type bhMutexSem struct {
	mu       sync.Mutex
	inFlight int
	limit    int
	waiting  int
}

func (s *bhMutexSem) TryAcquire() bool {
	s.mu.Lock()
	ok := s.waiting == 0 && s.inFlight < s.limit
	if ok {
		s.inFlight++
	}
	s.mu.Unlock()
	return ok
}

func (s *bhMutexSem) Release() {
	s.mu.Lock()
	if s.inFlight == 0 {
		s.mu.Unlock()
		panic(errReleaseWithoutAcquire)
	}
	s.inFlight--
	s.mu.Unlock()
}

// bhSemaphores returns the implementations under comparison, each with
// limit permits.
func bhSemaphores(b *testing.B, limit int) []struct {
	name string
	sem  bhSemaphore
} {
	bh, err := NewBulkhead(limit)
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		sem  bhSemaphore
	}{
		{"impl=Bulkhead", bh},
		{"impl=mutex", &bhMutexSem{limit: limit}},
		{"impl=chan", make(bhChanSem, limit)},
	}
}

// BenchmarkBulkheadTryAcquireRelease is the uncontended hot path: one
// goroutine takes and gives back a permit.
func BenchmarkBulkheadTryAcquireRelease(b *testing.B) {
	for _, s := range bhSemaphores(b, 10) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !s.sem.TryAcquire() {
					b.Fatal("refused")
				}
				s.sem.Release()
			}
		})
	}
}

// BenchmarkBulkheadTryAcquireReleaseParallel is the same pair on every
// core at once, on one shared semaphore with a limit that is never
// reached: the cost of the contended cache line.
func BenchmarkBulkheadTryAcquireReleaseParallel(b *testing.B) {
	for _, s := range bhSemaphores(b, 1<<16) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !s.sem.TryAcquire() {
						panic("refused")
					}
					s.sem.Release()
				}
			})
		})
	}
}

// BenchmarkBulkheadAcquireRelease is Acquire with a free permit, the path
// of Do when the bulkhead is not full.
func BenchmarkBulkheadAcquireRelease(b *testing.B) {
	bh, err := NewBulkhead(10)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bh.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		bh.Release()
	}
}

// BenchmarkBulkheadDo wraps a trivial function.
func BenchmarkBulkheadDo(b *testing.B) {
	bh, err := NewBulkhead(10)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := bh.Do(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBulkheadContended has more goroutines than permits, so that
// most Acquire calls queue and are woken by a handover: the slow path,
// which allocates a waiter.
func BenchmarkBulkheadContended(b *testing.B) {
	bh, err := NewBulkhead(2)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bh.Acquire(ctx); err != nil {
				panic(err)
			}
			bh.Release()
		}
	})
}

// BenchmarkKeyedBulkhead measures TryAcquire+Release per key: on an idle
// key (added and dropped each time), on a key with a call in flight
// (kept), and in parallel on distinct keys.
func BenchmarkKeyedBulkhead(b *testing.B) {
	newKB := func(b *testing.B) *KeyedBulkhead {
		kb, err := NewKeyedBulkhead(1 << 16)
		if err != nil {
			b.Fatal(err)
		}
		return kb
	}
	b.Run("key=idle", func(b *testing.B) {
		kb := newKB(b)
		b.ReportAllocs()
		for b.Loop() {
			if !kb.TryAcquire("user-42") {
				b.Fatal("refused")
			}
			kb.Release("user-42")
		}
	})
	b.Run("key=busy", func(b *testing.B) {
		kb := newKB(b)
		kb.TryAcquire("user-42")
		b.ReportAllocs()
		for b.Loop() {
			if !kb.TryAcquire("user-42") {
				b.Fatal("refused")
			}
			kb.Release("user-42")
		}
	})
	b.Run("keys=distinct/parallel", func(b *testing.B) {
		kb := newKB(b)
		var id atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("user-", id.Add(1))
			for pb.Next() {
				if !kb.TryAcquire(key) {
					panic("refused")
				}
				kb.Release(key)
			}
		})
	})
}
