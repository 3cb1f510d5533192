package ratelimit

import "time"

// The window of each algorithm: how long a key's allowance takes to come
// back from empty to full if nothing more is consumed. A client that sends
// at most Limit() events in any Window() is never limited. It is what
// RateLimit-Policy calls w, and what Rule.Window is for a rule.

// Window returns capacity/rate, rounded up to the nanosecond: how long an
// empty bucket takes to fill.
func (tb *TokenBucket) Window() time.Duration { return ceilNs(tb.alg.tau) }

// Window returns capacity/rate, rounded up to the nanosecond: how long a
// full queue takes to drain.
func (lb *LeakyBucket) Window() time.Duration { return ceilNs(lb.alg.tau) }

// Window returns the window's length, the rate's period.
func (fw *FixedWindow) Window() time.Duration { return time.Duration(fw.alg.window) }

// Window returns the sliding window's length, the rate's period.
func (sl *SlidingLog) Window() time.Duration { return time.Duration(sl.alg.window) }

// Window returns the sliding window's length, the rate's period.
func (sc *SlidingWindowCounter) Window() time.Duration { return time.Duration(sc.alg.window) }

// ceilNs rounds an exact instant up to a whole nanosecond.
func ceilNs(t ftime) time.Duration {
	if t.fr > 0 {
		return time.Duration(t.ns + 1)
	}
	return time.Duration(t.ns)
}
