package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A login limited to 5 attempts a minute, with a key blocked for 15
// minutes once it has been refused 5 times within a minute.
func ExamplePenaltyBox() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(5), 5, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	box, err := ratelimit.NewPenaltyBox(tb, 5, time.Minute, 15*time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	allowed := 0
	for i := 0; i < 10; i++ { // 5 allowed, 5 refused: blocked
		if box.Allow("198.51.100.7") {
			allowed++
		}
	}
	fmt.Println("allowed:", allowed, "blocked for:", box.Blocked("198.51.100.7"))

	clock.Advance(5 * time.Minute) // the bucket is full again; the block holds
	d, _ := box.AllowN(context.Background(), "198.51.100.7", 1)
	fmt.Println("after 5m:", d.Allowed, "retry after:", d.RetryAfter)

	clock.Advance(10 * time.Minute)
	fmt.Println("after 15m:", box.Allow("198.51.100.7"))
	// Output:
	// allowed: 5 blocked for: 15m0s
	// after 5m: false retry after: 10m0s
	// after 15m: true
}
