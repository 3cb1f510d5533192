package redis

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// testAlgorithms is the one list of this module's algorithms that its tests
// range over: the conformance traces against the core, the test vectors,
// the bounds under Reserve and Cancel, two replicas hammering one key, and
// the benchmarks. Adding an algorithm is one entry here. (The core's own
// list is in its test files, which this module cannot import.)
var testAlgorithms = []testAlgorithm{
	{
		name: "TokenBucket", vectors: "tokenbucket", bucket: true,
		core: func(r ratelimit.Rate, capacity int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(r, capacity, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, capacity int, opts ...Option) (ratelimit.Limiter, error) {
			return NewTokenBucket(c, r, capacity, opts...)
		},
		conformance: []params{
			{ratelimit.PerSecond(3), 5},
			{ratelimit.Per(7, 2*time.Second), 1},
			{ratelimit.PerDay(150), 150},
			{ratelimit.PerSecond(1_000_000_007), 40},
			{ratelimit.PerDay(1), 35},
			// A numerator past 10^14, which Lua's number-to-string would
			// print in exponent form.
			{ratelimit.Per(1<<52-3, 30*24*time.Hour), 40},
		},
		hammer: params{ratelimit.PerHour(1), 25}, hammerExact: true,
		bench:  params{ratelimit.PerSecond(1_000_000), 1000},
		bounds: []params{{ratelimit.PerSecond(10), 1}, {ratelimit.Per(7, 2*time.Second), 3}, {ratelimit.PerSecond(3), 5}},
		bound:  func(p params) func([]booked) error { return tokenBound(p.rate, p.capacity) },
	},
	{
		name: "LeakyBucket", vectors: "leakybucket", bucket: true,
		core: func(r ratelimit.Rate, capacity int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewLeakyBucket(r, capacity, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, capacity int, opts ...Option) (ratelimit.Limiter, error) {
			return NewLeakyBucket(c, r, capacity, opts...)
		},
		conformance: []params{
			{ratelimit.PerSecond(3), 5},
			{ratelimit.Per(7, 2*time.Second), 1},
			{ratelimit.PerDay(150), 150},
			{ratelimit.PerSecond(1_000_000_007), 40},
			{ratelimit.Per(1, 7*time.Nanosecond), 3},
			{ratelimit.Per(1<<52-3, 30*24*time.Hour), 40}, // as above
		},
		// A leaky bucket lets an event through only when its queue is empty.
		hammer: params{ratelimit.PerHour(1), 25}, hammerExact: false,
		bench:  params{ratelimit.PerSecond(1_000_000), 1000},
		bounds: []params{{ratelimit.PerSecond(10), 3}, {ratelimit.Per(7, 2*time.Second), 2}},
		bound:  func(p params) func([]booked) error { return leakyBound(p.rate) },
	},
	{
		name: "FixedWindow", vectors: "fixedwindow",
		core: func(r ratelimit.Rate, _ int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewFixedWindow(r, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, _ int, opts ...Option) (ratelimit.Limiter, error) {
			return NewFixedWindow(c, r, opts...)
		},
		conformance: []params{
			{rate: ratelimit.PerSecond(5)},
			{rate: ratelimit.Per(3, 1500*time.Millisecond)},
			{rate: ratelimit.Per(4, 7*time.Nanosecond)},
			{rate: ratelimit.Per(100, 24*time.Hour+1)},
			{rate: ratelimit.Per(1, 35*24*time.Hour)},
		},
		hammer: params{rate: ratelimit.Per(25, 35*24*time.Hour)}, hammerExact: true,
		bench:  params{rate: ratelimit.PerSecond(1_000_000)},
		bounds: []params{{rate: ratelimit.Per(3, time.Second)}},
		bound:  func(p params) func([]booked) error { return fixedWindowBound(p.rate) },
	},
	{
		name: "SlidingLog", vectors: "slidinglog",
		core: func(r ratelimit.Rate, _ int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingLog(r, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, _ int, opts ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, r, opts...)
		},
		conformance: []params{
			{rate: ratelimit.PerSecond(5)},
			{rate: ratelimit.Per(3, 1500*time.Millisecond)},
			{rate: ratelimit.Per(1, 7*time.Nanosecond)},
			{rate: ratelimit.Per(40, 24*time.Hour+1)},
			{rate: ratelimit.Per(2500, time.Minute)},  // bookings of more than 1000 instants at once
			{rate: ratelimit.Per(4, 35*24*time.Hour)}, // logs that live long enough to be rebased
		},
		hammer: params{rate: ratelimit.PerHour(25)}, hammerExact: true,
		bench:  params{rate: ratelimit.PerSecond(1000)},
		bounds: []params{{rate: ratelimit.Per(3, time.Second)}},
		bound:  func(p params) func([]booked) error { return slidingBound(p.rate.Period, p.rate.N) },
	},
	{
		name: "SlidingWindowCounter", vectors: "slidingcounter",
		core: func(r ratelimit.Rate, _ int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingWindowCounter(r, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, _ int, opts ...Option) (ratelimit.Limiter, error) {
			return NewSlidingWindowCounter(c, r, opts...)
		},
		conformance: []params{
			{rate: ratelimit.PerSecond(5)},
			{rate: ratelimit.Per(3, 1500*time.Millisecond)},
			{rate: ratelimit.Per(4, 7*time.Nanosecond)},
			{rate: ratelimit.Per(100, 24*time.Hour+1)},
			{rate: ratelimit.Per(1<<40, 35*24*time.Hour)},
			{rate: ratelimit.Per(999_999_937, 3*time.Second+7)},
		},
		hammer: params{rate: ratelimit.Per(25, 35*24*time.Hour)}, hammerExact: true,
		bench:  params{rate: ratelimit.PerSecond(1_000_000)},
		bounds: []params{{rate: ratelimit.Per(4, time.Second)}},
		bound: func(p params) func([]booked) error {
			n, w := p.rate.N, int64(p.rate.Period)
			return slidingBound(p.rate.Period, 2*n-(2*n+w-1)/w)
		},
	},
	{
		// The leaky bucket as a meter runs the token bucket's script.
		name: "LeakyMeter", vectors: "leakymeter", bucket: true,
		core: func(r ratelimit.Rate, capacity int, opts ...ratelimit.Option) (ratelimit.Limiter, error) {
			return ratelimit.NewLeakyMeter(r, capacity, opts...)
		},
		redis: func(c Client, r ratelimit.Rate, capacity int, opts ...Option) (ratelimit.Limiter, error) {
			return NewLeakyMeter(c, r, capacity, opts...)
		},
		conformance: []params{
			{ratelimit.PerSecond(3), 5},
			{ratelimit.Per(7, 2*time.Second), 1},
			{ratelimit.PerSecond(1_000_000_007), 40},
			{ratelimit.Per(1<<52-3, 30*24*time.Hour), 40}, // as for TokenBucket
		},
		hammer: params{ratelimit.PerHour(1), 25}, hammerExact: true,
		bench:  params{ratelimit.PerSecond(1_000_000), 1000},
		bounds: []params{{ratelimit.PerSecond(10), 1}, {ratelimit.PerSecond(3), 5}},
		bound:  func(p params) func([]booked) error { return tokenBound(p.rate, p.capacity) },
	},
}

// testAlgorithm is an entry of the list: the algorithm's constructors in
// memory and on Redis, and the parameters each test builds it with.
type testAlgorithm struct {
	name string
	// vectors names the algorithm in ../testdata/vectors.
	vectors string
	// bucket is set for an algorithm that takes a capacity (its limit);
	// a window algorithm's limit is its rate's count.
	bucket bool
	core   func(r ratelimit.Rate, capacity int, opts ...ratelimit.Option) (ratelimit.Limiter, error)
	redis  func(c Client, r ratelimit.Rate, capacity int, opts ...Option) (ratelimit.Limiter, error)
	// conformance are the parameters of the conformance traces, chosen to
	// hit exact fractions (3/s), slow rates, bursts and single-event limits.
	conformance []params
	// hammer gives a limit of 25 per key and a period so long that nothing
	// refills during TestTwoInstancesNeverExceedTheLimit; hammerExact: then
	// exactly the limit is allowed (else at most).
	hammer      params
	hammerExact bool
	// bench allows most calls of the benchmarks.
	bench params
	// bounds are the parameters of TestBoundsUnderReserveAndCancel, and
	// bound the bound it holds the events that act to.
	bounds []params
	bound  func(p params) func([]booked) error
}

// params are the parameters of a limiter: its rate and, for a bucket, its
// capacity.
type params struct {
	rate     ratelimit.Rate
	capacity int
}

// builder returns a builder of the algorithm on Redis with p.
func (a testAlgorithm) builder(p params) builder {
	return func(c Client, opts ...Option) (ratelimit.Limiter, error) {
		return a.redis(c, p.rate, p.capacity, opts...)
	}
}

// conformanceCase is the conformance case of a with p.
func (a testAlgorithm) conformanceCase(p params) algoCase {
	name, limit := fmt.Sprintf("%s(%v)", a.name, p.rate), int(p.rate.N)
	if a.bucket {
		name, limit = fmt.Sprintf("%s(%v,%d)", a.name, p.rate, p.capacity), p.capacity
	}
	return algoCase{
		name:   name,
		limit:  limit,
		params: p,
		bucket: a.bucket,
		step:   p.rate.Period / time.Duration(p.rate.N),
		core: func(clk ratelimit.Clock) (ratelimit.Limiter, error) {
			return a.core(p.rate, p.capacity, ratelimit.WithClock(clk))
		},
		redis: a.builder(p),
	}
}

// tokenBucketCase is the conformance case of the TokenBucket with rate and
// capacity, for the tests of one algorithm.
func tokenBucketCase(rate ratelimit.Rate, capacity int) algoCase {
	for _, a := range testAlgorithms {
		if a.name == "TokenBucket" {
			return a.conformanceCase(params{rate, capacity})
		}
	}
	panic("no TokenBucket in testAlgorithms")
}
