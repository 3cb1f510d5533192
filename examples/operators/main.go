// Command operators shows limits that change while a service runs, on a
// manual clock: a paid tier beside the free one on one limiter, a limit
// raised during an incident, a locked-out user reset, and a cost settled
// once the work is done.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "operators:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	ctx := context.Background()
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(10), 5, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}
	burst := func(key string) (n int) {
		for api.Allow(key) {
			n++
		}
		return n
	}

	fmt.Fprintln(w, "free tier: 10 requests a minute, bursts of 5")
	if err := api.SetOverride("user:acme", ratelimit.PerMinute(100), 50); err != nil {
		return err
	}
	fmt.Fprintln(w, "paid tier for user:acme: 100 a minute, bursts of 50")
	fmt.Fprintf(w, "  burst of user:bob   %3d\n", burst("user:bob"))
	fmt.Fprintf(w, "  burst of user:acme  %3d\n", burst("user:acme"))

	clock.Advance(30 * time.Second)
	fmt.Fprintln(w, "30s later")
	fmt.Fprintf(w, "  user:bob  %3d   user:acme %3d\n", burst("user:bob"), burst("user:acme"))

	fmt.Fprintln(w, "incident: free tier raised to 60 a minute, bursts of 20")
	if err := api.SetRate(ratelimit.PerMinute(60), 20); err != nil {
		return err
	}
	clock.Advance(10 * time.Second)
	fmt.Fprintf(w, "  10s later, user:bob %3d (the new rate; acme keeps its tier: %d)\n",
		burst("user:bob"), burst("user:acme"))
	if err := api.SetRate(ratelimit.Every(0), 1); err != nil {
		fmt.Fprintln(w, "  a bad change is refused, the old limit serves:")
		fmt.Fprintln(w, "   ", err)
	}

	api.Reset("user:bob")
	fmt.Fprintf(w, "support resets user:bob: %d at once\n", burst("user:bob"))

	fmt.Fprintln(w)
	fmt.Fprintln(w, "model tokens: 10000 a minute per team, an estimate settled after")
	budget, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(10_000), 10_000, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}
	for _, used := range []int{300, 2_500, 9_000} {
		r, err := budget.Take(ctx, "team-a", 4_000)
		if err != nil {
			return err
		}
		if !r.OK() {
			fmt.Fprintf(w, "  estimate 4000: refused, retry in %v\n", r.Decision().RetryAfter)
			continue
		}
		d, err := r.Settle(used)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  estimate 4000, used %5d: %5d left\n", used, d.Remaining)
	}
	r, err := budget.Take(ctx, "team-a", 4_000)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  the debt is paid first: next call in %v\n", r.Decision().RetryAfter)
	return nil
}
