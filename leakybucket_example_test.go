package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A leaky bucket of 4 places drained at 2 per second: five requests arrive
// at once; four are given slots 500 ms apart, the fifth finds the queue full.
func ExampleLeakyBucket() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lb, err := ratelimit.NewLeakyBucket(ratelimit.PerSecond(2), 4, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 5 {
		r, err := lb.Reserve(ctx, "upstream", 1)
		if err != nil {
			panic(err)
		}
		if r.OK() {
			fmt.Printf("request %d departs after %v (%d places left)\n", i, r.Delay(), r.Decision().Remaining)
		} else {
			fmt.Printf("request %d refused: queue full, retry after %v\n", i, r.Decision().RetryAfter)
		}
	}
	fmt.Println("Allow now:", lb.Allow("upstream"), "- Allow on another key:", lb.Allow("other"))
	// Output:
	// request 0 departs after 0s (3 places left)
	// request 1 departs after 500ms (2 places left)
	// request 2 departs after 1s (1 places left)
	// request 3 departs after 1.5s (0 places left)
	// request 4 refused: queue full, retry after 500ms
	// Allow now: false - Allow on another key: true
}
