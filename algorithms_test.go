package ratelimit

import (
	"testing"
	"time"
)

// algorithms is the one list of the package's algorithms that the test
// suites range over. Each entry carries what every suite needs to build and
// judge the algorithm; adding an algorithm is one entry here, and
// TestAlgorithmsComplete fails until every suite has what it needs.
//
// The order is part of the fuzz corpora: FuzzAlgorithmStep, FuzzWindowStep
// and FuzzConstructorBounds pick an algorithm by index among the entries
// that have their builder, so a new algorithm goes at the end.
var algorithms = []algorithm{
	{
		name:    "TokenBucket",
		vectors: "tokenbucket",
		build: func(rate Rate, capacity int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewTokenBucket(rate, capacity, opts...))
		},
		setRate: func(l testLimiter, rate Rate, capacity int) error { return l.(*TokenBucket).SetRate(rate, capacity) },
		setOverride: func(l testLimiter, key string, rate Rate, capacity int) error {
			return l.(*TokenBucket).SetOverride(key, rate, capacity)
		},
		actBound:  tokenActBound,
		costBound: tokenCostBound,
		bound:     bucketBound,
		stepFuzz:  fuzzTokenBucket,
		longRuns:  lrTokenBucketRuns,
		bench: allowBench{
			allow: func() (allower, error) { return NewTokenBucket(PerSecond(1e9), 1e9) },
			deny:  func() (allower, error) { return NewTokenBucket(PerDay(1), 1) },
		},
	},
	{
		name:    "LeakyBucket",
		vectors: "leakybucket",
		shaper:  true,
		build: func(rate Rate, capacity int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewLeakyBucket(rate, capacity, opts...))
		},
		setRate: func(l testLimiter, rate Rate, capacity int) error { return l.(*LeakyBucket).SetRate(rate, capacity) },
		setOverride: func(l testLimiter, key string, rate Rate, capacity int) error {
			return l.(*LeakyBucket).SetOverride(key, rate, capacity)
		},
		actBound:  leakyActBound,
		costBound: leakyCostBound,
		bound:     bucketBound,
		stepFuzz:  fuzzLeakyBucket,
		longRuns:  lrLeakyBucketRuns,
		bench: allowBench{
			// Allow needs an empty queue: slots of 1 ns empty between calls.
			allow: func() (allower, error) { return NewLeakyBucket(Every(time.Nanosecond), 1) },
			deny:  func() (allower, error) { return NewLeakyBucket(PerDay(1), 1) },
		},
	},
	{
		name:    "FixedWindow",
		vectors: "fixedwindow",
		build: func(rate Rate, _ int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewFixedWindow(rate, opts...))
		},
		setRate: func(l testLimiter, rate Rate, _ int) error { return l.(*FixedWindow).SetRate(rate) },
		setOverride: func(l testLimiter, key string, rate Rate, _ int) error {
			return l.(*FixedWindow).SetOverride(key, rate)
		},
		actBound:  fixedWindowActBound,
		costBound: fixedWindowCostBound,
		bound: func(r Rate, l, e int64) int64 {
			if e == 0 {
				return l
			}
			return satMul(l, e/int64(r.Period)+2)
		},
		window: &windowSuite{
			oracle:      func(l int, w int64) winOracle { return newFWOracle(l, w) },
			oracleRates: [][2]int64{{1, 1000}, {3, 1000}, {10, 997}, {5, int64(time.Second)}},
			storm:       windowStorm{fixed: true, slide: func(l int, _ int64) int { return 2 * l }, fifo: true},
		},
		windowFuzz: fuzzFixedWindow,
		longRuns:   lrFixedWindowRuns,
		bench: allowBench{
			allow: func() (allower, error) { return NewFixedWindow(PerSecond(1e9)) },
			deny:  func() (allower, error) { return NewFixedWindow(PerDay(1)) },
		},
	},
	{
		name:    "SlidingLog",
		vectors: "slidinglog",
		build: func(rate Rate, _ int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewSlidingLog(rate, opts...))
		},
		setRate: func(l testLimiter, rate Rate, _ int) error { return l.(*SlidingLog).SetRate(rate) },
		setOverride: func(l testLimiter, key string, rate Rate, _ int) error {
			return l.(*SlidingLog).SetOverride(key, rate)
		},
		actBound:  slidingLogActBound,
		costBound: slidingLogCostBound,
		bound:     func(r Rate, l, e int64) int64 { return satMul(l, e/int64(r.Period)+1) },
		window: &windowSuite{
			oracle:      func(l int, w int64) winOracle { return newSLOracle(l, w) },
			oracleRates: [][2]int64{{1, 1000}, {3, 1000}, {10, 997}, {5, int64(time.Second)}},
			storm:       windowStorm{fixed: false, slide: func(l int, _ int64) int { return l }, fifo: true},
		},
		windowFuzz: fuzzSlidingLog,
		longRuns:   lrSlidingLogRuns,
		bench: allowBench{
			// The log holds L instants per key: a small L over a short window
			// lets one key through at any call rate this machine reaches
			// (about 8 calls per 250ns) while 1,000,000 keys take 64 bytes of
			// log each.
			allow: func() (allower, error) { return NewSlidingLog(Per(8, 250*time.Nanosecond)) },
			deny:  func() (allower, error) { return NewSlidingLog(PerDay(1)) },
		},
	},
	{
		name:    "SlidingWindowCounter",
		vectors: "slidingcounter",
		build: func(rate Rate, _ int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewSlidingWindowCounter(rate, opts...))
		},
		setRate: func(l testLimiter, rate Rate, _ int) error { return l.(*SlidingWindowCounter).SetRate(rate) },
		setOverride: func(l testLimiter, key string, rate Rate, _ int) error {
			return l.(*SlidingWindowCounter).SetOverride(key, rate)
		},
		actBound:  slidingCounterActBound,
		costBound: slidingCounterCostBound,
		bound: func(r Rate, l, e int64) int64 {
			if e == 0 {
				return l
			}
			return satMul(2*l, e/int64(r.Period)+1)
		},
		window: &windowSuite{
			oracle:      func(l int, w int64) winOracle { return newSWCOracle(l, w) },
			oracleRates: [][2]int64{{1, 1000}, {3, 1000}, {10, 997}, {5, int64(time.Second)}, {4, 3}},
			storm:       windowStorm{fixed: true, slide: swcBound, fifo: false},
		},
		windowFuzz: fuzzSlidingCounter,
		longRuns:   lrSlidingCounterRuns,
		bench: allowBench{
			allow: func() (allower, error) { return NewSlidingWindowCounter(PerSecond(1e9)) },
			deny:  func() (allower, error) { return NewSlidingWindowCounter(PerDay(1)) },
		},
	},
	{
		// The leaky bucket as a meter: the token bucket's step under
		// another name (see LeakyMeter), so the token bucket's bounds,
		// fuzz step and long runs are its own.
		name:    "LeakyMeter",
		vectors: "leakymeter",
		build: func(rate Rate, capacity int, opts ...Option) (testLimiter, error) {
			return asTestLimiter(NewLeakyMeter(rate, capacity, opts...))
		},
		setRate: func(l testLimiter, rate Rate, capacity int) error { return l.(*LeakyMeter).SetRate(rate, capacity) },
		setOverride: func(l testLimiter, key string, rate Rate, capacity int) error {
			return l.(*LeakyMeter).SetOverride(key, rate, capacity)
		},
		actBound:  tokenActBound,
		costBound: tokenCostBound,
		bound:     bucketBound,
		stepFuzz:  fuzzLeakyMeter,
		longRuns:  lrTokenBucketRuns,
		bench: allowBench{
			allow: func() (allower, error) { return NewLeakyMeter(PerSecond(1e9), 1e9) },
			deny:  func() (allower, error) { return NewLeakyMeter(PerDay(1), 1) },
		},
	},
}

// algorithm is an entry of the registry: the algorithm's constructor and
// what each suite needs of it.
type algorithm struct {
	// name is the type's name; the suites' subtests are named after it.
	name string
	// build builds the algorithm at rate with capacity (which the window
	// algorithms ignore) and opts. The behaviour suite, the vectors and
	// the bound checks build through it.
	build func(rate Rate, capacity int, opts ...Option) (testLimiter, error)
	// setRate changes l's parameters at run time, as build would build
	// them (the windows ignore capacity).
	setRate func(l testLimiter, rate Rate, capacity int) error
	// setOverride gives key of l its own parameters, as setRate would
	// set them (override_test.go).
	setOverride func(l testLimiter, key string, rate Rate, capacity int) error
	// shaper is set for an algorithm whose Allow admits one event at a time
	// (the LeakyBucket: an event must depart now, and the next departs 1/r
	// later), so that its limit counts the places Reserve can book at once.
	// Otherwise limit events are allowed at once by Allow.
	shaper bool
	// vectors names the algorithm in testdata/vectors (the files'
	// "algorithm" field and their prefix), shared with the Redis module.
	vectors string
	// bound is the most events a configuration lets act within elapsed ns
	// of the first one (bounds_test.go).
	bound func(rate Rate, limit, elapsed int64) int64
	// actBound checks the events of one key that acted against the bound
	// at rate with capacity (cancel_test.go).
	actBound func(rate Rate, capacity int) func(evs []actEvent) error
	// costBound is actBound with settled costs: the bound plus the excess
	// it excuses (settle_bound_test.go).
	costBound func(rate Rate, capacity int) func(evs []costEvent) error
	// window is set for a window algorithm: the window suite's oracle
	// (windows_test.go).
	window *windowSuite
	// stepFuzz (buckets_fuzz_test.go) or windowFuzz (windows_fuzz_test.go)
	// builds the algorithm's pure step for its fuzz target.
	stepFuzz   func(rate Rate, capacity int) (fuzzStepper, int, func(elapsed int64) int64, error)
	windowFuzz func(rate Rate) (winStepper, error)
	// longRuns lists the long runs at rate, with the buckets' capacity
	// (longrun_test.go).
	longRuns func(rate Rate, capacity int64) []lrRun
	// bench builds the limiters of the Allow benchmarks (bench_test.go).
	bench allowBench
}

// testLimiter is what the suites need of an algorithm.
type testLimiter interface {
	Limiter
	Limit() int
	Reset(key string)
	Stats() Stats
	Sweep()
	Close() error
	RemoveOverride(key string)
}

// new builds alg so that it allows limit events at once and limit per
// period in the long run, on clk.
func (alg algorithm) new(limit int, period time.Duration, clk Clock, opts ...Option) (testLimiter, error) {
	return alg.build(Per(int64(limit), period), limit, withClock(clk, opts)...)
}

// asTestLimiter returns l as a testLimiter, or a nil interface (not a typed
// nil) with the error.
func asTestLimiter[L testLimiter](l L, err error) (testLimiter, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

func withClock(clk Clock, opts []Option) []Option {
	return append([]Option{WithClock(clk)}, opts...)
}

// windowAlgorithms returns the window algorithms of the registry.
func windowAlgorithms() []algorithm {
	var ws []algorithm
	for _, alg := range algorithms {
		if alg.window != nil {
			ws = append(ws, alg)
		}
	}
	return ws
}

// TestAlgorithmsComplete checks that every entry of the registry gives
// every suite what it needs, so that a new algorithm cannot be left out of
// one of them by omission.
func TestAlgorithmsComplete(t *testing.T) {
	// The fuzz corpora (testdata/fuzz) pick an algorithm by its index: the
	// algorithms they were written for keep their places.
	for i, name := range []string{"TokenBucket", "LeakyBucket", "FixedWindow", "SlidingLog", "SlidingWindowCounter"} {
		if i >= len(algorithms) || algorithms[i].name != name {
			t.Fatalf("entry %d is not %s: the fuzz corpora pick algorithms by index; add new ones at the end", i, name)
		}
	}
	seen := map[string]bool{}
	for _, alg := range algorithms {
		if alg.name == "" || seen[alg.name] || alg.vectors == "" || seen["vectors:"+alg.vectors] {
			t.Errorf("entry %q: a name and a vector name, each unique, are required", alg.name)
		}
		seen[alg.name], seen["vectors:"+alg.vectors] = true, true
		if alg.build == nil || alg.setRate == nil || alg.setOverride == nil || alg.bound == nil || alg.actBound == nil || alg.costBound == nil || alg.longRuns == nil || alg.bench.allow == nil || alg.bench.deny == nil {
			t.Errorf("%s: build, setRate, setOverride, bound, actBound, costBound, longRuns and bench are required", alg.name)
		}
		if (alg.stepFuzz == nil) == (alg.windowFuzz == nil) {
			t.Errorf("%s: exactly one of stepFuzz and windowFuzz is required", alg.name)
		}
		if (alg.window == nil) != (alg.windowFuzz == nil) {
			t.Errorf("%s: a window algorithm has both window and windowFuzz, a bucket neither", alg.name)
		}
		if w := alg.window; w != nil && (w.oracle == nil || len(w.oracleRates) == 0 || w.storm.slide == nil) {
			t.Errorf("%s: the window suite needs an oracle, its rates and the storm's bound", alg.name)
		}
		lim, err := alg.new(suiteLimit, suitePeriod, NewManualClock(suiteT0))
		if err != nil {
			t.Errorf("%s: %v", alg.name, err)
			continue
		}
		if _, ok := lim.(winLimiter); alg.window != nil && !ok {
			t.Errorf("%s: a window algorithm without the window methods", alg.name)
		}
		lim.Close()
	}
}
