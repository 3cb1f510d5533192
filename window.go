package ratelimit

import (
	"fmt"
	"time"
)

// The window of each algorithm, under its parameters now: how long a key's allowance takes to come
// back from empty to full if nothing more is consumed. A client that sends
// at most Limit() events in any Window() is never limited. It is what
// RateLimit-Policy calls w, and what Rule.Window is for a rule.

// Window returns capacity/rate, rounded up to the nanosecond: how long an
// empty bucket takes to fill.
func (tb *TokenBucket) Window() time.Duration { return ceilNs(tb.k.ps.p.Load().tau) }

// Window returns capacity/rate, rounded up to the nanosecond: how long a
// full queue takes to drain.
func (lb *LeakyBucket) Window() time.Duration { return ceilNs(lb.k.ps.p.Load().tau) }

// Window returns the window's length, the rate's period.
func (fw *FixedWindow) Window() time.Duration { return time.Duration(fw.k.ps.p.Load().window) }

// Window returns the sliding window's length, the rate's period.
func (sl *SlidingLog) Window() time.Duration { return time.Duration(sl.k.ps.p.Load().window) }

// Window returns the sliding window's length, the rate's period.
func (sc *SlidingWindowCounter) Window() time.Duration { return time.Duration(sc.k.ps.p.Load().window) }

// ceilNs rounds an exact instant up to a whole nanosecond.
func ceilNs(t ftime) time.Duration {
	if t.Fr > 0 {
		return time.Duration(t.Ns + 1)
	}
	return time.Duration(t.Ns)
}

// What the window algorithms share.

// windowParams checks a rate for the window algorithms and returns its
// limit L and window W in nanoseconds.
func windowParams(rate Rate) (limit, window int64, err error) {
	if err := rate.validate(); err != nil {
		return 0, 0, err
	}
	if int64(int(rate.N)) != rate.N {
		return 0, 0, fmt.Errorf("%w: limit %d does not fit in an int", ErrInvalidRate, rate.N)
	}
	if int64(rate.Period) > maxSpan {
		return 0, 0, fmt.Errorf("%w: a window of %s is longer than a window may span (%s)", ErrInvalidRate, readable(int64(rate.Period)), maxSpanText)
	}
	return rate.N, int64(rate.Period), nil
}

// windowStart returns the start of the window of length w holding t:
// t rounded down to a multiple of w, also for negative t.
func windowStart(t, w int64) int64 {
	m := t % w
	if m < 0 {
		m += w
	}
	return t - m
}
