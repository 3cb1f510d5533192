package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A language-model call is charged an estimate of its tokens before it
// runs and settled at the tokens it used: a budget of 10,000 tokens a
// minute, a call reserved at 1,000 and settled at 300 gives 700 back; one
// that used 2,500 books the 1,500 beyond its estimate as debt.
func ExampleReservation_Settle() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	budget, _ := ratelimit.NewTokenBucket(ratelimit.PerMinute(10_000), 10_000, ratelimit.WithClock(clock))
	ctx := context.Background()

	r, _ := budget.Take(ctx, "team-a", 1_000)
	fmt.Println("allowed:", r.OK(), "remaining:", r.Decision().Remaining)
	clock.Advance(2 * time.Second) // the call runs; 333 tokens come back by refill meanwhile
	d, _ := r.Settle(300)
	fmt.Println("settled at 300, remaining:", d.Remaining)

	r, _ = budget.Take(ctx, "team-a", 1_000)
	d, _ = r.Settle(2_500)
	fmt.Println("settled at 2,500, remaining:", d.Remaining)

	_, err := r.Settle(2_500)
	fmt.Println("again:", err)
	// Output:
	// allowed: true remaining: 9000
	// settled at 300, remaining: 10000
	// settled at 2,500, remaining: 7500
	// again: ratelimit: reservation already settled or cancelled
}

// Take decides like AllowN, all or nothing, and hands back the booking: a
// download is charged an estimate of 4 MiB, in KiB, and settled at what it
// sent. A request over what the key has left is refused, with when to
// retry, and books nothing.
func ExampleTokenBucket_Take() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bw, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1024), 8192, ratelimit.WithClock(clock)) // 1 MiB/s, bursts of 8 MiB
	ctx := context.Background()

	r, _ := bw.Take(ctx, "client-1", 4096)
	fmt.Println("first:", r.OK(), r.Decision().Remaining)
	d, _ := r.Settle(6144) // it sent 6 MiB
	fmt.Println("settled, remaining:", d.Remaining)

	r, _ = bw.Take(ctx, "client-1", 4096)
	fmt.Println("second:", r.OK(), "retry after", r.Decision().RetryAfter)
	// Output:
	// first: true 4096
	// settled, remaining: 2048
	// second: false retry after 2s
}
