// Command algorithms runs the five algorithms side by side on one bursty
// trace of requests, on a manual clock, so that their differences show:
// which let a burst through, which smooth it out, and the fixed window's
// double burst across a window boundary.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Each algorithm on its own clock, all set to the same instants.
	type column struct {
		name  string
		clock *ratelimit.ManualClock
		lim   ratelimit.Limiter
	}
	rate := ratelimit.Per(4, 2*time.Second) // 4 per 2 s: 2/s on average, bursts of 4
	build := []struct {
		name string
		new  func(c ratelimit.Clock) (ratelimit.Limiter, error)
	}{
		{"token", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(rate, 4, ratelimit.WithClock(c))
		}},
		{"leaky", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewLeakyBucket(rate, 4, ratelimit.WithClock(c))
		}},
		{"fixed", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewFixedWindow(rate, ratelimit.WithClock(c))
		}},
		{"log", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingLog(rate, ratelimit.WithClock(c))
		}},
		{"counter", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingWindowCounter(rate, ratelimit.WithClock(c))
		}},
	}
	var cols []column
	for _, b := range build {
		c := ratelimit.NewManualClock(start)
		lim, err := b.new(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, b.name, err)
			os.Exit(1)
		}
		cols = append(cols, column{b.name, c, lim})
	}

	// The trace: a steady trickle, then 5 requests just before the window
	// boundary at 4 s and 5 just after it, then a trickle again.
	var trace []time.Duration
	for t := time.Duration(0); t < 1500*time.Millisecond; t += 250 * time.Millisecond {
		trace = append(trace, t)
	}
	for i := 0; i < 5; i++ {
		trace = append(trace, 3900*time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		trace = append(trace, 4000*time.Millisecond)
	}
	for t := 4500 * time.Millisecond; t <= 7*time.Second; t += 500 * time.Millisecond {
		trace = append(trace, t)
	}

	fmt.Println("Five algorithms, one trace: 4 per 2 s (2/s on average; the buckets hold 4).")
	fmt.Println("Windows of the fixed window and the counter start at 0 s, 2 s, 4 s, ...")
	fmt.Println()
	fmt.Printf("%7s", "t")
	for _, c := range cols {
		fmt.Printf("  %-7s", c.name)
	}
	fmt.Println()
	ctx := context.Background()
	allowed := make([][]time.Duration, len(cols))
	for _, at := range trace {
		fmt.Printf("%6.2fs", at.Seconds())
		for i, c := range cols {
			c.clock.Set(start.Add(at))
			d, err := c.lim.AllowN(ctx, "client", 1)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			mark := "  ·"
			if d.Allowed {
				mark = "  ✓"
				allowed[i] = append(allowed[i], at)
			}
			fmt.Printf("  %-7s", mark)
		}
		fmt.Println()
	}
	fmt.Println()
	fmt.Printf("%-24s", "allowed in all")
	for i := range cols {
		fmt.Printf("%-9d", len(allowed[i]))
	}
	fmt.Println()
	fmt.Printf("%-24s", "most in any 2 s")
	for i := range cols {
		fmt.Printf("%-9d", mostWithin(allowed[i], 2*time.Second))
	}
	fmt.Println()
	fmt.Printf("%-24s", "most in any 0.5 s")
	for i := range cols {
		fmt.Printf("%-9d", mostWithin(allowed[i], 500*time.Millisecond))
	}
	fmt.Println()
	fmt.Println()
	fmt.Println(strings.TrimSpace(`
token    bursts up to its capacity, then 2/s.
leaky    Allow passes only what can leave now: never a burst, one per 0.5 s.
fixed    at most 4 per aligned window, but 4 at 3.9 s and 4 at 4.0 s: 8 in 0.1 s.
log      exact: never more than 4 in any 2 s.
counter  weights the previous window by its overlap: O(1) memory, near the log,
         but an estimate (here 6 in 2 s where the log allows 4).`))

	// The leaky bucket as a shaper: Reserve queues a burst and spaces it out.
	fmt.Println()
	fmt.Println("The leaky bucket as a shaper: a burst of 6 at t=0 with Reserve (queue of 4):")
	c := ratelimit.NewManualClock(start)
	lb, err := ratelimit.NewLeakyBucket(rate, 4, ratelimit.WithClock(c))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 1; i <= 6; i++ {
		r, err := lb.Reserve(ctx, "client", 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if r.OK() {
			fmt.Printf("  request %d departs at %v\n", i, r.Delay())
		} else {
			fmt.Printf("  request %d refused: queue full, retry after %v\n", i, r.Decision().RetryAfter)
		}
	}
}

// mostWithin returns the most events of times (sorted) within any interval
// of length w.
func mostWithin(times []time.Duration, w time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i]-times[j] >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
