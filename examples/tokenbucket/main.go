// Command tokenbucket shows a token bucket at work: capacity 4, refilled at
// 2 tokens per second, fed a bursty stream of requests on a manual clock,
// printed as a timeline of allowed and denied requests.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tokenbucket:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 4, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}

	// A burst of 6 at t=0, a trickle, a pause, and another burst.
	arrivals := []time.Duration{
		0, 0, 0, 0, 0, 0,
		250 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond,
		time.Second, 1500 * time.Millisecond,
		4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second,
	}
	fmt.Fprintln(w, "token bucket: capacity 4, refill 2 tokens/s, key \"client-1\"")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%8s  %-7s  %9s  %11s  %s\n", "t", "result", "remaining", "retry after", "tokens")
	ctx := context.Background()
	for _, at := range arrivals {
		clock.Set(start.Add(at))
		d, err := tb.AllowN(ctx, "client-1", 1)
		if err != nil {
			return err
		}
		result := "allowed"
		if !d.Allowed {
			result = "DENIED"
		}
		retry := "-"
		if d.RetryAfter > 0 {
			retry = d.RetryAfter.String()
		}
		fmt.Fprintf(w, "%7.2fs  %-7s  %9d  %11s  %s\n", at.Seconds(), result, d.Remaining, retry,
			strings.Repeat("●", d.Remaining)+strings.Repeat("○", d.Limit-d.Remaining))
	}
	return nil
}
