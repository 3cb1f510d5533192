package ratelimit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimitkit/ratelimit"
)

// A bulkhead of 2: a third call is refused while two are in flight.
func ExampleBulkhead() {
	bh, err := ratelimit.NewBulkhead(2)
	if err != nil {
		panic(err)
	}
	fmt.Println(bh.TryAcquire(), bh.TryAcquire(), bh.TryAcquire())
	fmt.Println("in flight:", bh.InFlight())
	bh.Release()
	fmt.Println(bh.TryAcquire())
	// Output:
	// true true false
	// in flight: 2
	// true
}

// Do holds a permit while the function runs and gives it back after,
// even if the function panics. A context already done fails at once.
func ExampleBulkhead_Do() {
	bh, err := ratelimit.NewBulkhead(1)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	err = bh.Do(ctx, func(ctx context.Context) error {
		fmt.Println("in flight during the call:", bh.InFlight())
		return nil
	})
	fmt.Println("err:", err, "- in flight after:", bh.InFlight())

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = bh.Do(cctx, func(context.Context) error { return nil })
	fmt.Println("with a cancelled context:", err)
	// Output:
	// in flight during the call: 1
	// err: <nil> - in flight after: 0
	// with a cancelled context: context canceled
}

// One limit per tenant: a busy tenant does not hold up another.
func ExampleKeyedBulkhead() {
	kb, err := ratelimit.NewKeyedBulkhead(1)
	if err != nil {
		panic(err)
	}
	fmt.Println(kb.TryAcquire("tenant-a"), kb.TryAcquire("tenant-a"), kb.TryAcquire("tenant-b"))
	fmt.Println("keys held:", kb.Keys())
	kb.Release("tenant-a")
	kb.Release("tenant-b")
	fmt.Println("keys held:", kb.Keys())
	// Output:
	// true false true
	// keys held: 2
	// keys held: 0
}

// A rate limiter and a bulkhead around one outbound call: at most 10
// calls per second, and at most 3 at the same time.
func Example_bulkheadWithRateLimit() {
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	if err != nil {
		panic(err)
	}
	bh, err := ratelimit.NewBulkhead(3)
	if err != nil {
		panic(err)
	}
	callAPI := func(ctx context.Context) error { return nil } // the outbound call

	call := func(ctx context.Context) error {
		if err := limiter.Wait(ctx, ""); err != nil {
			return err // rate limited within ctx, or ctx done
		}
		return bh.Do(ctx, callAPI)
	}
	err = call(context.Background())
	fmt.Println(err, errors.Is(err, ratelimit.ErrBulkheadFull))
	// Output:
	// <nil> false
}
