package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Free and paid users on one limiter: every user gets 10 requests a
// minute, in bursts of up to 5; a paying customer gets an override of 100
// a minute, in bursts of 50. Users without an override pay nothing for
// the table of overrides.
func ExampleTokenBucket_SetOverride() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(10), 5, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	if err := lim.SetOverride("user:acme", ratelimit.PerMinute(100), 50); err != nil {
		panic(err)
	}
	burst := func(user string) (n int) {
		for lim.Allow(user) {
			n++
		}
		return n
	}
	fmt.Println("free burst:", burst("user:bob"))
	fmt.Println("paid burst:", burst("user:acme"))

	clock.Advance(6 * time.Second) // one token for bob, ten for acme
	fmt.Println("6s later, free:", burst("user:bob"), "paid:", burst("user:acme"))

	// Acme stops paying: back to the free tier, keeping what it had left
	// (nothing), capped at the free burst.
	lim.RemoveOverride("user:acme")
	clock.Advance(time.Minute)
	fmt.Println("a minute later, acme:", burst("user:acme"))
	// Output:
	// free burst: 5
	// paid burst: 50
	// 6s later, free: 1 paid: 10
	// a minute later, acme: 5
}
