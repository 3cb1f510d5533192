package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// Every configuration a constructor accepts bounds events as documented.
// Over the instants from the first event to the furthest instant reached
// (elapsed E; the clock may also go back), the events allowed, or booked
// to act by then, number at most:
//
//	TokenBucket, LeakyBucket (what its queue admits): C + ⌊E·N/Period⌋
//	FixedWindow:           L·(⌊E/W⌋ + 2), and L at one instant
//	SlidingLog:            L·(⌊E/W⌋ + 1)
//	SlidingWindowCounter:  2L·(⌊E/W⌋ + 1), and L at one instant
//
// A configuration too large to represent is refused with ErrInvalidRate
// or ErrInvalidCapacity, never accepted with the limit switched off.

// These bounds are the bound field of each algorithm's entry in the
// registry (algorithms_test.go).

// bucketBound is C + ⌊E·N/Period⌋, saturating.
func bucketBound(r Rate, c, e int64) int64 {
	hi, lo := bits.Mul64(uint64(e), uint64(r.N))
	if hi >= uint64(r.Period) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(r.Period))
	return satAdd(c, int64(min(q, math.MaxInt64)))
}

func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi > 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// checkConfigBound drives lim through ops on clk from start and fails if the
// events allowed or booked exceed the algorithm's bound. Each op is 9
// bytes: a clock step (the low bits pick the call) and a count.
func checkConfigBound(t *testing.T, alg algorithm, rate Rate, lim Limiter, clk *ManualClock, ops []byte) {
	t.Helper()
	ctx := context.Background()
	limit := int64(lim.(interface{ Limit() int }).Limit())
	first := int64(-1)
	var furthest int64
	var events int64
	add := func(n int64, act int64) {
		if first < 0 {
			first, furthest = clampNanos(clk.Now()), clampNanos(clk.Now())
		}
		events = satAdd(events, n)
		furthest = max(furthest, act)
		if b := alg.bound(rate, limit, furthest-first); events > b {
			t.Fatalf("%s %v limit %d: %d events within %dns of the first, bound %d",
				alg.name, rate, limit, events, furthest-first, b)
		}
	}
	for len(ops) >= 9 {
		step := int64(binary.LittleEndian.Uint64(ops))
		c := ops[8]
		ops = ops[9:]
		if step&4 != 0 { // move the clock, both ways, within the range
			now := clampNanos(clk.Now())
			clk.Set(time.Unix(0, min(max(satAdd(now, step>>8), minNanos), maxNanos)))
		}
		// The count: the whole limit, one, or a share of the limit.
		n := limit
		switch c % 4 {
		case 1:
			n = 1
		case 2:
			n = max(limit/int64(c|1), 1)
		}
		now := clampNanos(clk.Now())
		switch step & 3 {
		case 0, 1:
			if lim.Allow("k") {
				add(1, now)
			}
		case 2:
			d, err := lim.AllowN(ctx, "k", int(n))
			if err != nil {
				t.Fatalf("AllowN(%d): %v", n, err)
			}
			if d.Allowed {
				add(n, now)
			}
		case 3:
			r, err := lim.Reserve(ctx, "k", int(n))
			if err != nil {
				t.Fatalf("Reserve(%d): %v", n, err)
			}
			if r.OK() {
				add(n, now+int64(r.Delay()))
			}
		}
	}
}

// frozen is a trace at one instant: the whole limit, then single events.
var frozen = func() []byte {
	var b []byte
	op := func(step uint64, c byte) { b = binary.LittleEndian.AppendUint64(b, step); b = append(b, c) }
	op(2, 0) // AllowN(limit)
	for range 20 {
		op(0, 1) // Allow
		op(2, 1) // AllowN(1)
		op(3, 1) // Reserve(1)
	}
	return b
}()

// advancing is a trace of single events and whole-limit calls while the
// clock moves forward by steps of 1ns up to hours.
var advancing = func() []byte {
	var b []byte
	op := func(step uint64, c byte) { b = binary.LittleEndian.AppendUint64(b, step); b = append(b, c) }
	for i, dt := range []uint64{1, 7, 1000, 1e6, 1e9, 3600e9, 1, 1 << 40} {
		op(dt<<8|4|uint64(i%3), byte(i))
		op(0, 1)
		op(2, 0)
		op(3, 1)
	}
	return b
}()

// extremes are configurations at the edges of what constructors accept or
// refuse; each was once accepted with the limit off, or is its neighbour.
var extremes = []struct {
	name     string
	rate     Rate
	capacity int
}{
	{"every max duration", Every(math.MaxInt64), 1},
	{"every max duration, capacity 1000", Every(math.MaxInt64), 1000},
	{"every max duration less 1ns", Every(math.MaxInt64 - 1), 1},
	{"every 2^62", Every(1 << 62), 1},
	{"every maxSpan", Every(time.Duration(maxSpan)), 1},
	{"every maxSpan plus 1ns", Every(time.Duration(maxSpan) + 1), 1},
	{"capacity x interval is maxSpan", Per(1, 1<<30), 1 << 30},
	{"capacity x interval is maxSpan plus 1", Per(1, 1<<30), 1<<30 + 1},
	{"capacity x fractional interval just above maxSpan", Per(3, 1<<31+1), 3 << 29},
	{"huge count 1e18/ns", Per(1e18, 1), math.MaxInt},
	{"huge count 1e18/ns, capacity 1", Per(1e18, 1), 1},
	{"max count per ns", Per(math.MaxInt64, 1), math.MaxInt},
	{"max count per max duration", Per(math.MaxInt64, math.MaxInt64), 3},
	{"count above 2^62, fraction near 1", Per(math.MaxInt64, math.MaxInt64-1), 3},
	{"count above 2^62, fraction near 1, capacity 1", Per(math.MaxInt64-1, math.MaxInt64-2), 1},
	{"count above 2^62 per second", Per(1<<62+1, time.Second), 5},
	{"n > period in ns", Per(1000, 7), 10},
	{"n > period in ns, huge capacity", Per(1000, 7), math.MaxInt},
	{"fractional 3/s", PerSecond(3), 5},
	{"fractional 7 per 13s", Per(7, 13*time.Second), 7},
	{"1 per ns", Per(1, 1), 1},
	{"window of maxSpan", Per(2, time.Duration(maxSpan)), 2},
	{"window of maxSpan plus 1", Per(2, time.Duration(maxSpan)+1), 2},
	{"window of max duration", Per(2, math.MaxInt64), 2},
	{"huge limit per 1ns window", Per(math.MaxInt64, 1), 1},
	{"sliding log at its cap", Per(maxLogLimit, time.Second), 1},
}

var extremeStarts = []time.Time{suiteT0, time.Unix(0, minNanos), time.Unix(0, maxNanos)}

func TestExtremeConfigurationsBoundEvents(t *testing.T) {
	for _, alg := range algorithms {
		for _, c := range extremes {
			t.Run(alg.name+"/"+c.name, func(t *testing.T) {
				for _, start := range extremeStarts {
					for _, ops := range [][]byte{frozen, advancing} {
						clk := NewManualClock(start)
						lim, err := alg.build(c.rate, c.capacity, WithClock(clk))
						if err != nil {
							if !errors.Is(err, ErrInvalidRate) && !errors.Is(err, ErrInvalidCapacity) {
								t.Fatalf("error %v matches neither ErrInvalidRate nor ErrInvalidCapacity", err)
							}
							return
						}
						checkConfigBound(t, alg, c.rate, lim, clk, ops)
					}
				}
			})
		}
	}
}

// The configurations refused because they do not fit say so in units a
// person reads.
func TestSpanErrorsAreReadable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{second(NewTokenBucket(Every(math.MaxInt64), 1)), "ratelimit: invalid capacity: a capacity of 1 at 1/2562047h47m16.854775807s takes 292 years to refill, more than a bucket may span (2^60 ns, about 36.5 years)"},
		{second(NewLeakyBucket(Per(1, 1<<30), 1<<30+1)), "ratelimit: invalid capacity: a capacity of 1073741825 at 1/1.073741824s takes 36.5 years to refill, more than a bucket may span (2^60 ns, about 36.5 years)"},
		{second(NewTokenBucket(PerDay(1), 20000)), "ratelimit: invalid capacity: a capacity of 20000 at 1/day takes 54.8 years to refill, more than a bucket may span (2^60 ns, about 36.5 years)"},
		{second(NewFixedWindow(Per(1, 40*365*24*time.Hour))), "ratelimit: invalid rate: a window of 40 years is longer than a window may span (2^60 ns, about 36.5 years)"},
	} {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("error\n %v\nwant\n %s", c.err, c.want)
		}
	}
	for _, d := range []struct {
		ns   int64
		want string
	}{
		{int64(1500 * time.Millisecond), "1.5s"},
		{int64(36 * time.Hour), "36h"},
		{int64(90 * time.Minute), "1h30m"},
		{int64(47 * time.Hour), "47h"},
		{int64(48 * time.Hour), "2 days"},
		{int64(400 * 24 * time.Hour), "1.1 years"},
		{maxSpan, "36.5 years"},
		{math.MaxInt64, "292 years"},
	} {
		if got := readable(d.ns); got != d.want {
			t.Errorf("readable(%d) = %q, want %q", d.ns, got, d.want)
		}
	}
	if got := (&LimitError{RetryAfter: time.Duration(maxSpan)}).Error(); got != "ratelimit: rate limited, retry after 36.5 years" {
		t.Errorf("LimitError text %q", got)
	}
	if got := (&LimitError{RetryAfter: 1500 * time.Millisecond, Deadline: true}).Error(); got != "ratelimit: wait of 1.5s would exceed the context deadline" {
		t.Errorf("LimitError text %q", got)
	}
	if s := readable(int64(1e9 * 3600 * 24 * 3)); strings.Contains(s, "h") {
		t.Errorf("readable of 3 days = %q", s)
	}
}

func second[T any](_ T, err error) error { return err }

// FuzzConstructorBounds: whatever the rate, capacity and starting instant,
// a constructor either refuses the configuration with ErrInvalidRate or
// ErrInvalidCapacity or the limiter keeps its documented bound over
// arbitrary Allow, AllowN and Reserve calls and clock moves.
func FuzzConstructorBounds(f *testing.F) {
	for i := range algorithms {
		for _, c := range extremes {
			f.Add(uint8(i), c.rate.N, int64(c.rate.Period), int64(c.capacity), suiteT0.UnixNano(), frozen)
			f.Add(uint8(i), c.rate.N, int64(c.rate.Period), int64(c.capacity), int64(maxNanos), advancing)
		}
	}
	f.Fuzz(func(t *testing.T, a uint8, n, period, capacity, start int64, ops []byte) {
		alg := algorithms[int(a)%len(algorithms)]
		rate := Rate{N: n, Period: time.Duration(period)}
		if capacity > math.MaxInt || capacity < math.MinInt {
			capacity = math.MaxInt
		}
		if rate.Valid() && rate.N <= maxLogLimit && alg.name == "SlidingLog" && rate.N > 1<<16 {
			rate.N = 1 << 16 // keep the log's memory small for the fuzzer
		}
		clk := NewManualClock(time.Unix(0, min(max(start, minNanos), maxNanos)))
		lim, err := alg.build(rate, int(capacity), WithClock(clk))
		if err != nil {
			if !errors.Is(err, ErrInvalidRate) && !errors.Is(err, ErrInvalidCapacity) {
				t.Fatalf("error %v matches neither ErrInvalidRate nor ErrInvalidCapacity", err)
			}
			return
		}
		if len(ops) > 9*64 {
			ops = ops[:9*64]
		}
		checkConfigBound(t, alg, rate, lim, clk, ops)
	})
}
