// Command algorithms runs the algorithms side by side on one bursty trace
// of requests, on a manual clock, so that their differences show: which
// let a burst through, which smooth it out, and the fixed window's double
// burst across a window boundary. The leaky bucket appears twice, as a
// shaper and as a meter (which answers as the token bucket does).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	svgPath := flag.String("svg", "", "write the picture of the trace to this `file` instead of printing the tables")
	flag.Parse()
	if *svgPath == "" {
		if err := run(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "algorithms:", err)
			os.Exit(1)
		}
		return
	}
	lanes, err := simulate()
	if err == nil {
		err = os.WriteFile(*svgPath, []byte(picture(lanes)), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "algorithms:", err)
		os.Exit(1)
	}
}

// start is the instant the trace begins, on every algorithm's clock.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rate is the limit of every algorithm: 4 per 2 s, 2/s on average; the
// buckets hold 4.
var rate = ratelimit.Per(4, 2*time.Second)

// algorithms builds the limiters, each on the clock it is given.
var algorithms = []struct {
	name, long string
	new        func(c ratelimit.Clock) (ratelimit.Limiter, error)
}{
	{"token", "TokenBucket", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(rate, 4, ratelimit.WithClock(c))
	}},
	{"leaky", "LeakyBucket", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyBucket(rate, 4, ratelimit.WithClock(c))
	}},
	{"meter", "LeakyMeter", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyMeter(rate, 4, ratelimit.WithClock(c))
	}},
	{"fixed", "FixedWindow", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewFixedWindow(rate, ratelimit.WithClock(c))
	}},
	{"log", "SlidingLog", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingLog(rate, ratelimit.WithClock(c))
	}},
	{"counter", "SlidingWindowCounter", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingWindowCounter(rate, ratelimit.WithClock(c))
	}},
}

// trace is the requests' instants, from the start: a steady trickle, then
// 5 requests just before the window boundary at 4 s and 5 just after it,
// then a trickle again.
func trace() []time.Duration {
	var tr []time.Duration
	for t := time.Duration(0); t < 1500*time.Millisecond; t += 250 * time.Millisecond {
		tr = append(tr, t)
	}
	for range 5 {
		tr = append(tr, 3900*time.Millisecond)
	}
	for range 5 {
		tr = append(tr, 4000*time.Millisecond)
	}
	for t := 4500 * time.Millisecond; t <= 7*time.Second; t += 500 * time.Millisecond {
		tr = append(tr, t)
	}
	return tr
}

// A lane is one algorithm's answers to the trace.
type lane struct {
	name, long string
	at         []time.Duration
	allowed    []bool
}

// simulate runs the trace through the algorithms, each on its own
// manual clock set to the request's instant.
func simulate() ([]lane, error) {
	ctx := context.Background()
	tr := trace()
	var lanes []lane
	for _, a := range algorithms {
		c := ratelimit.NewManualClock(start)
		lim, err := a.new(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.name, err)
		}
		l := lane{name: a.name, long: a.long, at: tr}
		for _, at := range tr {
			c.Set(start.Add(at))
			d, err := lim.AllowN(ctx, "client", 1)
			if err != nil {
				return nil, err
			}
			l.allowed = append(l.allowed, d.Allowed)
		}
		lanes = append(lanes, l)
	}
	return lanes, nil
}

// run prints the trace through the algorithms as a table, the counts
// that tell them apart, and the leaky bucket shaping a burst.
func run(w io.Writer) error {
	lanes, err := simulate()
	if err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }

	fmt.Fprintln(w, "The algorithms, one trace: 4 per 2 s (2/s on average; the buckets hold 4).")
	fmt.Fprintln(w, "Windows of the fixed window and the counter start at 0 s, 2 s, 4 s, ...")
	fmt.Fprintln(w)
	p("%7s", "t")
	for _, l := range lanes {
		p("  %-7s", l.name)
	}
	fmt.Fprintln(w)
	allowed := make([][]time.Duration, len(lanes))
	for j, at := range lanes[0].at {
		p("%6.2fs", at.Seconds())
		for i, l := range lanes {
			mark := "  ·"
			if l.allowed[j] {
				mark = "  ✓"
				allowed[i] = append(allowed[i], at)
			}
			p("  %-7s", mark)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	p("%-24s", "allowed in all")
	for i := range lanes {
		p("%-9d", len(allowed[i]))
	}
	fmt.Fprintln(w)
	p("%-24s", "most in any 2 s")
	for i := range lanes {
		p("%-9d", mostWithin(allowed[i], 2*time.Second))
	}
	fmt.Fprintln(w)
	p("%-24s", "most in any 0.5 s")
	for i := range lanes {
		p("%-9d", mostWithin(allowed[i], 500*time.Millisecond))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	p("%s\n", strings.TrimSpace(`
token    bursts up to its capacity, then 2/s.
leaky    Allow passes only what can leave now: never a burst, one per 0.5 s.
meter    the leaky bucket as a meter: a level that leaks 2/s, admitting while
         it fits in 4; the same answers as the token bucket.
fixed    4 per aligned window, but 4 at 3.9 s and 4 at 4.0 s: 8 in 0.1 s.
log      exact: never more than 4 in any 2 s.
counter  weights the previous window by its overlap: O(1) memory, near the log,
         but an estimate (here 6 in 2 s where the log allows 4).`))

	// The leaky bucket as a shaper: Reserve queues a burst and spaces it out.
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The leaky bucket as a shaper: a burst of 6 at t=0 with Reserve (queue of 4):")
	ctx := context.Background()
	c := ratelimit.NewManualClock(start)
	lb, err := ratelimit.NewLeakyBucket(rate, 4, ratelimit.WithClock(c))
	if err != nil {
		return err
	}
	for i := 1; i <= 6; i++ {
		r, err := lb.Reserve(ctx, "client", 1)
		if err != nil {
			return err
		}
		if r.OK() {
			p("  request %d departs at %v\n", i, r.Delay())
		} else {
			p("  request %d refused: queue full, retry after %v\n", i, r.Decision().RetryAfter)
		}
	}
	return nil
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
