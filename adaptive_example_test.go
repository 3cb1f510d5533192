package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// An adaptive bulkhead in front of a dependency that runs 8 calls at once
// in 10ms; more than 8 share it and each takes longer. Starting from a
// limit of 1, the limit grows while calls take 10ms, settles a few calls
// above 8, shrinks when the dependency slows down, and comes back after.
func ExampleAdaptiveBulkhead() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, err := ratelimit.NewAdaptiveBulkhead(ratelimit.AdaptiveParams{Max: 100}, ratelimit.WithBulkheadClock(clock))
	if err != nil {
		panic(err)
	}
	service := 10 * time.Millisecond
	// One round: as many calls as the bulkhead admits, all answered after
	// the dependency's latency for that many.
	round := func() {
		n := 0
		for a.TryAcquire() {
			n++
		}
		clock.Advance(service * time.Duration(max(n, 8)) / 8)
		for range n {
			a.Release()
		}
	}
	for step := 1; step <= 7; step++ {
		switch step {
		case 4:
			service = 40 * time.Millisecond // the dependency slows down
		case 6:
			service = 10 * time.Millisecond // and recovers
		}
		for range 40 {
			round()
		}
		fmt.Printf("after %3d rounds (calls take %v at no load): limit %d\n", 40*step, service, a.Limit())
	}
	// Output:
	// after  40 rounds (calls take 10ms at no load): limit 4
	// after  80 rounds (calls take 10ms at no load): limit 11
	// after 120 rounds (calls take 10ms at no load): limit 11
	// after 160 rounds (calls take 40ms at no load): limit 8
	// after 200 rounds (calls take 40ms at no load): limit 8
	// after 240 rounds (calls take 10ms at no load): limit 11
	// after 280 rounds (calls take 10ms at no load): limit 11
}
