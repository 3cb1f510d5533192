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

// Exempt subjects and a reload while serving: the health checker and the
// internal network are never limited, and raising a limit keeps what
// unchanged rules have counted.
func ExampleRules_Reload() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rules, err := ratelimit.ParseRules(`
		exempt 10.0.0.0/8
		exempt user healthcheck
		*:            2/m  per ip  as per-ip
		POST /posts:  1/m  per ip  as posts
	`, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rules.Close()
	ctx := context.Background()
	check := func(class string, who ratelimit.Subject) bool {
		d, _ := rules.Check(ctx, class, who, 1)
		return d.Allowed
	}
	client := ratelimit.Subject{IP: "192.0.2.1"}
	fmt.Println("client:", check("GET /", client), check("GET /", client), check("GET /", client))
	fmt.Println("internal:", check("GET /", ratelimit.Subject{IP: "10.1.2.3"}))
	fmt.Println("health check:", check("GET /", ratelimit.Subject{IP: "192.0.2.1", User: "healthcheck"}))
	poster := ratelimit.Subject{IP: "192.0.2.2"}
	fmt.Println("post:", check("POST /posts", poster))

	// A bad configuration is refused whole; the old rules keep serving.
	err = rules.Reload("*: 2/m per ip as per-ip\nPOST /posts: 1/fortnight per ip")
	fmt.Println("reload:", err)
	// Raise the per-ip limit: its rule changed, so it starts afresh; the
	// posts rule did not, and keeps its counts.
	err = rules.Reload(`
		exempt 10.0.0.0/8
		*:            10/m  per ip  as per-ip
		POST /posts:  1/m   per ip  as posts
	`)
	fmt.Println("reload:", err)
	fmt.Println("client, afresh:", check("GET /", client))
	fmt.Println("post, still counted:", check("POST /posts", poster))
	fmt.Println("health check, no longer exempt:", check("POST /posts", ratelimit.Subject{IP: "192.0.2.2", User: "healthcheck"}))
	// Output:
	// client: true true false
	// internal: true
	// health check: true
	// post: true
	// reload: ratelimit: invalid rule on line 2 ("POST /posts: 1/fortnight per ip"): invalid rate "1/fortnight": period "fortnight" is not a unit (s, sec, m, min, h, hr, d, day, ...), a number and a unit (2min), or a duration (1m30s)
	// reload: <nil>
	// client, afresh: true
	// post, still counted: false
	// health check, no longer exempt: false
}
