package ratelimit_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/ratelimitkit/ratelimit"
)

// A fair bulkhead: tenant a queued three calls before b and c queued one
// each, yet b and c are served after a's first, not after all of a's.
func ExampleWithBulkheadFairQueue() {
	bh, err := ratelimit.NewBulkhead(1, ratelimit.WithBulkheadFairQueue(100, 1000))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := bh.Acquire(ctx); err != nil { // the one permit is held
		panic(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	call := func(tenant string) {
		wg.Go(func() {
			_ = bh.DoFor(ctx, tenant, func(context.Context) error {
				mu.Lock()
				order = append(order, tenant)
				mu.Unlock()
				return nil
			})
		})
	}
	queued := 0
	for _, tenant := range []string{"a", "a", "a", "b", "c"} {
		call(tenant)
		queued++
		for bh.Waiting() < queued { // wait until it is queued
			runtime.Gosched()
		}
	}
	bh.Release() // each call passes the permit on as it ends
	wg.Wait()
	fmt.Println(order)
	// Output:
	// [a b c a a]
}

// Priority classes on a bulkhead: batch work saturating it leaves the
// permit reserved for critical calls free.
func ExampleWithBulkheadClasses() {
	bh, err := ratelimit.NewBulkhead(3, ratelimit.WithBulkheadClasses(
		ratelimit.Class{Name: "critical", Reserved: 1},
		ratelimit.Class{Name: "batch"},
	))
	if err != nil {
		panic(err)
	}
	// TryAcquire, like a call with no priority, is of the lowest class.
	fmt.Println("batch:", bh.TryAcquire(), bh.TryAcquire(), bh.TryAcquire())
	critical := ratelimit.ContextWithPriority(context.Background(), 0)
	fmt.Println("critical:", bh.Acquire(critical))
	fmt.Println("in flight:", bh.InFlight())
	// Output:
	// batch: true true false
	// critical: <nil>
	// in flight: 3
}
