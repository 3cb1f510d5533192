package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A client throttle in front of a backend that refuses every call: after a
// few refusals the client rejects most calls itself, and once the backend
// accepts again the throttle lifts as the refusals leave the window.
func ExampleClientThrottle() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th, err := ratelimit.NewClientThrottle(2, time.Second,
		ratelimit.WithThrottleClock(clock),
		ratelimit.WithThrottleRand(func() float64 { return 0.5 })) // a fixed draw keeps the output deterministic
	if err != nil {
		panic(err)
	}
	for i := range 4 {
		sent := th.Allow()
		if sent {
			th.Record(false) // the backend refused it
		}
		fmt.Printf("call %d sent=%v, p next=%.2f\n", i, sent, th.RejectProbability())
	}
	clock.Advance(time.Second) // the refusals leave the window
	fmt.Printf("a window later: p=%.2f sent=%v\n", th.RejectProbability(), th.Allow())
	// Output:
	// call 0 sent=true, p next=0.50
	// call 1 sent=true, p next=0.67
	// call 2 sent=false, p next=0.75
	// call 3 sent=false, p next=0.80
	// a window later: p=0.00 sent=true
}
