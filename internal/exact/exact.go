// Package exact is the exact arithmetic of rates shared by the core and
// its Redis backend: the spacing of a rate, Period/N nanoseconds, as a
// whole part and a fraction, and instants with a fraction of a nanosecond,
// added and compared in integer arithmetic (128-bit where products need
// it) so that long runs never drift: a rate of 3 per second allows exactly
// 3,000,000 events in 1,000,000 seconds.
package exact

import "math/bits"

// Interval is the exact spacing of a rate, Period/N nanoseconds, as a whole
// part Q and a fraction R/Den with 0 <= R < Den. It lets algorithms add
// intervals in integer arithmetic without rounding.
type Interval struct {
	Q, R, Den int64
}

// NewInterval returns the interval of n events per period nanoseconds,
// period/n; both must be positive.
func NewInterval(period, n int64) Interval {
	return Interval{Q: period / n, R: period % n, Den: n}
}

// Within reports whether k intervals span at most span nanoseconds:
// k·Period/N <= span, compared exactly in 128 bits (k, span >= 0).
func (iv Interval) Within(k, span int64) bool {
	period := uint64(iv.Q)*uint64(iv.Den) + uint64(iv.R) // the rate's Period
	hi, lo := bits.Mul64(uint64(k), period)
	shi, slo := bits.Mul64(uint64(span), uint64(iv.Den))
	return hi < shi || (hi == shi && lo <= slo)
}

// Time is an instant in nanoseconds plus a fraction Fr/Den of a
// nanosecond (Den the interval's), 0 <= Fr < Den.
type Time struct {
	Ns int64
	Fr int64
}

// Next returns t + 1 interval: Add(t, 1), without its division, small
// enough to be inlined into a decision.
func (iv Interval) Next(t Time) Time {
	t.Ns += iv.Q
	return t.Carry(iv.R, iv.Den)
}

// Add returns t + k intervals. The caller keeps results within int64 (the
// algorithms bound k by their capacity).
func (iv Interval) Add(t Time, k int64) Time {
	if k == 1 {
		return iv.Next(t)
	}
	hi, lo := bits.Mul64(uint64(iv.R), uint64(k))
	quo, rem := bits.Div64(hi, lo, uint64(iv.Den)) // r < den, so hi < den
	t.Ns += iv.Q*k + int64(quo)
	return t.Carry(int64(rem), iv.Den)
}

// Carry returns t plus f/den of a nanosecond, 0 <= f < den. It compares
// before adding: t.Fr + f may exceed int64 when den is above 2⁶².
func (t Time) Carry(f, den int64) Time {
	if t.Fr >= den-f {
		t.Fr -= den - f
		t.Ns++
	} else {
		t.Fr += f
	}
	return t
}

// Sub returns t - k intervals.
func (iv Interval) Sub(t Time, k int64) Time {
	hi, lo := bits.Mul64(uint64(iv.R), uint64(k))
	quo, rem := bits.Div64(hi, lo, uint64(iv.Den))
	t.Ns -= iv.Q*k + int64(quo)
	t.Fr -= int64(rem)
	if t.Fr < 0 {
		t.Fr += iv.Den
		t.Ns--
	}
	return t
}

// Diff returns a - b.
func (iv Interval) Diff(a, b Time) Time {
	d := Time{Ns: a.Ns - b.Ns, Fr: a.Fr - b.Fr}
	if d.Fr < 0 {
		d.Fr += iv.Den
		d.Ns--
	}
	return d
}

// Count returns how many whole intervals fit in d (zero if d < 0).
func (iv Interval) Count(d Time) int64 {
	if d.Ns < 0 {
		return 0
	}
	// (d.Ns*den + d.Fr) / period, in 128 bits; q*den + r is the period.
	hi, lo := bits.Mul64(uint64(d.Ns), uint64(iv.Den))
	lo, c := bits.Add64(lo, uint64(d.Fr), 0)
	hi += c
	period := uint64(iv.Q)*uint64(iv.Den) + uint64(iv.R)
	if hi >= period {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, period)
	return int64(min(q, 1<<63-1))
}

// NotAfter reports whether a <= b.
func (a Time) NotAfter(b Time) bool {
	return a.Ns < b.Ns || (a.Ns == b.Ns && a.Fr <= b.Fr)
}

// CeilNs returns t rounded up to a whole nanosecond.
func (t Time) CeilNs() int64 {
	if t.Fr > 0 {
		return t.Ns + 1
	}
	return t.Ns
}
