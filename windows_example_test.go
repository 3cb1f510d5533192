package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A fixed window of 3 per minute: windows start on the minute, so 3 events
// at 00:59 and 3 more at 01:00 all pass, 6 within a second.
func ExampleFixedWindow() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start.Add(59 * time.Second))
	lim, err := ratelimit.NewFixedWindow(ratelimit.PerMinute(3), ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.AllowN(ctx, "user-7", 1)
		fmt.Println("00:59", d.Allowed, "remaining", d.Remaining, "retry after", d.RetryAfter)
	}
	clock.Set(start.Add(time.Minute))
	d, _ := lim.AllowN(ctx, "user-7", 3)
	fmt.Println("01:00", d.Allowed, "remaining", d.Remaining, "reset after", d.ResetAfter)
	// Output:
	// 00:59 true remaining 2 retry after 0s
	// 00:59 true remaining 1 retry after 0s
	// 00:59 true remaining 0 retry after 0s
	// 00:59 false remaining 0 retry after 1s
	// 01:00 true remaining 0 reset after 1m0s
}

// A sliding log of 3 per minute: capacity comes back a minute after each
// event, one at a time, whatever the window boundaries.
func ExampleSlidingLog() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	lim, err := ratelimit.NewSlidingLog(ratelimit.PerMinute(3), ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, at := range []time.Duration{0, 20 * time.Second, 40 * time.Second, 50 * time.Second, 60 * time.Second, 61 * time.Second} {
		clock.Set(start.Add(at))
		d, _ := lim.AllowN(ctx, "login:alice", 1)
		fmt.Printf("%3v %-5v retry after %v\n", at, d.Allowed, d.RetryAfter)
	}
	// Output:
	//  0s true  retry after 0s
	// 20s true  retry after 0s
	// 40s true  retry after 0s
	// 50s false retry after 10s
	// 1m0s true  retry after 0s
	// 1m1s false retry after 19s
}

// A sliding window counter of 10 per minute: after 10 events in one
// minute, the next minute's room grows as that minute's weight falls.
func ExampleSlidingWindowCounter() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start.Add(30 * time.Second))
	lim, err := ratelimit.NewSlidingWindowCounter(ratelimit.PerMinute(10), ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lim.AllowN(ctx, "10.0.0.1", 10)
	for _, at := range []time.Duration{60, 75, 90, 114, 120} {
		clock.Set(start.Add(at * time.Second))
		d, _ := lim.AllowN(ctx, "10.0.0.1", 0) // a peek
		fmt.Printf("%v: room for %d\n", at*time.Second, d.Remaining)
	}
	// Output:
	// 1m0s: room for 0
	// 1m15s: room for 2
	// 1m30s: room for 5
	// 1m54s: room for 9
	// 2m0s: room for 10
}
