package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A request is checked against a per-user limit and a global one as one
// decision: when the global limit denies, the user's limit is untouched.
func ExampleAllowAll() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perUser, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock))
	global, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithClock(clock))
	ctx := context.Background()

	names := []string{"per user", "global"}
	for _, user := range []string{"alice", "bob"} {
		d, _ := ratelimit.AllowAll(ctx, 1, []ratelimit.LimiterKey{{perUser, user}, {global, ""}})
		fmt.Printf("%s: allowed=%v retry after %v\n", user, d.Allowed, d.RetryAfter)
		for i := range d.Len() {
			fmt.Printf("  %s: allowed=%v, %d of %d left\n", names[i], d.At(i).Allowed, d.At(i).Remaining, d.At(i).Limit)
		}
	}
	// Output:
	// alice: allowed=true retry after 0s
	//   per user: allowed=true, 1 of 2 left
	//   global: allowed=true, 0 of 1 left
	// bob: allowed=false retry after 1s
	//   per user: allowed=true, 2 of 2 left
	//   global: allowed=false, 0 of 1 left
}

// "1 post/s, 5 likes/s, 150 friend requests/day per user, 10,000
// requests/s in all" as a configuration.
func ExampleParseRules() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rules, err := ratelimit.ParseRules(`
		POST /posts:   1/s      per user
		POST /likes:   5/s      per user
		POST /friends: 150/day  per user  as friends
		*:             10,000/s global    as all
	`, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	alice := ratelimit.Subject{User: "alice"}
	for range 2 {
		d, _ := rules.Check(ctx, "POST /posts", alice, 1)
		fmt.Printf("POST /posts: allowed=%v retry after %v\n", d.Allowed, d.RetryAfter)
	}
	for _, r := range rules.For("POST /friends").Rules() {
		fmt.Printf("%s: %d at once, full again after %v, %v\n", r.Name, r.Burst, r.Window(), r.Scope)
	}
	// Output:
	// POST /posts: allowed=true retry after 0s
	// POST /posts: allowed=false retry after 1s
	// friends: 150 at once, full again after 24h0m0s, per user
	// all: 10000 at once, full again after 1s, global
}
