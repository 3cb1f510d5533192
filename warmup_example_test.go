package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A service back from idle gets a third of its rate at first, then ramps
// to 10 per second over 10 seconds. Asked every millisecond, it lets
// through per second:
func ExampleNewWarmingBucket() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	wb, err := ratelimit.NewWarmingBucket(ratelimit.PerSecond(10), 4,
		ratelimit.WarmUp{Period: 10 * time.Second}, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	for s := range 12 {
		n := 0
		for range 1000 {
			if wb.Allow("") {
				n++
			}
			clock.Advance(time.Millisecond)
		}
		fmt.Printf("%d:%d ", s, n)
	}
	fmt.Println()
	// Output: 0:5 1:4 2:5 3:6 4:6 5:7 6:8 7:8 8:9 9:10 10:10 11:10
}
