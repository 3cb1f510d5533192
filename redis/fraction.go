package redis

import (
	"math/bits"

	"github.com/ratelimitkit/ratelimit"
)

// interval is the exact spacing of a rate, Period/N ns, as a whole part q
// and a fraction r/den, 0 <= r < den, the same representation as the
// core's. The Go side computes products (n intervals) and quotients (how
// many intervals fit in a span) in 128-bit integer arithmetic and hands the
// scripts only sums and comparisons, which stay exact in Lua's doubles.
type interval struct {
	q, r, den int64
}

func newInterval(rate ratelimit.Rate) interval {
	return interval{q: int64(rate.Period) / rate.N, r: int64(rate.Period) % rate.N, den: rate.N}
}

// times returns k intervals as whole ns and a numerator over den.
func (iv interval) times(k int64) (ns, fr int64) {
	hi, lo := bits.Mul64(uint64(iv.r), uint64(k))
	quo, rem := bits.Div64(hi, lo, uint64(iv.den)) // r < den, so hi < den
	return iv.q*k + int64(quo), int64(rem)
}

// count returns how many whole intervals fit in ns + fr/den (0 if negative).
func (iv interval) count(ns, fr int64) int64 {
	if ns < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(ns), uint64(iv.den))
	lo, c := bits.Add64(lo, uint64(fr), 0)
	hi += c
	period := uint64(iv.q)*uint64(iv.den) + uint64(iv.r)
	if hi >= period {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, period)
	return int64(min(q, 1<<63-1))
}
