package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A leaky bucket used as a meter, of capacity 4 leaking 2 per second: five
// requests arrive at once; four fit (the level rises to 4), the fifth
// overflows and is dropped, not queued. Half a second later one has leaked
// out, and one more fits. The shaper, LeakyBucket, would have let only the
// first through at once.
func ExampleLeakyMeter() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lm, err := ratelimit.NewLeakyMeter(ratelimit.PerSecond(2), 4, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 5 {
		d, err := lm.AllowN(ctx, "client", 1)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("request %d admitted, level %d of %d\n", i, d.Limit-d.Remaining, d.Limit)
		} else {
			fmt.Printf("request %d overflows, retry after %v\n", i, d.RetryAfter)
		}
	}
	clock.Advance(500 * time.Millisecond)
	fmt.Println("after 500ms:", lm.Allow("client"), lm.Allow("client"))
	// Output:
	// request 0 admitted, level 1 of 4
	// request 1 admitted, level 2 of 4
	// request 2 admitted, level 3 of 4
	// request 3 admitted, level 4 of 4
	// request 4 overflows, retry after 500ms
	// after 500ms: true false
}
