package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A Multi of a per-address limit and a global one: a request must pass
// both, and one the global limit refuses costs its address nothing.
func ExampleMulti() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perIP, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock))
	global, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(3), 3, ratelimit.WithClock(clock))
	m, err := ratelimit.NewMulti(
		ratelimit.MultiLimit{Limiter: perIP},                // the caller's key
		ratelimit.MultiLimit{Limiter: global, Shared: true}, // one key for all
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		fmt.Println(ip, m.Allow(ip))
	}
	// 192.0.2.3 was refused by the global limit alone: its own allowance
	// is untouched.
	d, _ := perIP.AllowN(context.Background(), "192.0.2.3", 0)
	fmt.Println("192.0.2.3 remaining on its own limit:", d.Remaining)
	// Output:
	// 192.0.2.1 true
	// 192.0.2.1 true
	// 192.0.2.1 false
	// 192.0.2.2 true
	// 192.0.2.3 false
	// 192.0.2.3 remaining on its own limit: 2
}

// Rules from code: the same as a ParseRules configuration, with each
// field named.
func ExampleRules() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rules, err := ratelimit.NewRules([]ratelimit.Rule{
		{Class: "POST /posts", Name: "posts", Rate: ratelimit.PerSecond(1), Scope: ratelimit.PerUser},
		{Class: "*", Name: "per-ip", Rate: ratelimit.PerMinute(60), Burst: 10, Scope: ratelimit.PerIP},
	}, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rules.Close()
	ctx := context.Background()
	alice := ratelimit.Subject{User: "alice", IP: "192.0.2.1"}
	for range 2 {
		d, err := rules.Check(ctx, "POST /posts", alice, 1)
		fmt.Println("POST /posts:", d.Allowed, d.RetryAfter, err)
	}
	// A class without rules of its own gets the "*" rules only. The
	// refused post cost nothing: 10, less the one post allowed, less this.
	d, _ := rules.Check(ctx, "GET /feed", alice, 1)
	fmt.Println("GET /feed:", d.Allowed, d.Remaining)
	// A per-user rule needs a user.
	_, err = rules.Check(ctx, "POST /posts", ratelimit.Subject{IP: "192.0.2.9"}, 1)
	fmt.Println("no user:", errors.Is(err, ratelimit.ErrNoKey))
	for _, r := range rules.For("POST /posts").Rules() {
		fmt.Printf("%s: %d at once, full again after %v\n", r.Name, r.Burst, r.Window())
	}
	// Output:
	// POST /posts: true 0s <nil>
	// POST /posts: false 1s <nil>
	// GET /feed: true 8
	// no user: true
	// posts: 1 at once, full again after 1s
	// per-ip: 10 at once, full again after 10s
}
