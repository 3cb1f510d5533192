package ratelimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The limiter's time line is Unix nanoseconds within [minNanos, maxNanos],
// 1970 to 2116. Invariants: a clock reading outside acts as the nearest end
// of the range (never as some other instant: time.Time.UnixNano wraps
// outside 1678–2262); a Reservation's Delay is measured on the same line as
// the decision, so Delay right after Reserve equals the decision's
// RetryAfter whatever the clock reads; Wait returns once the limiter's time
// reaches the time to act, and not before.

var (
	year1    = time.Time{}
	year1600 = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	year2300 = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	year9999 = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func TestClampNanos(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{year1, minNanos},
		{time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC), minNanos},
		{year1600, minNanos},
		{time.Date(1677, 9, 21, 0, 0, 0, 0, time.UTC), minNanos},
		{time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), minNanos},
		{time.Unix(0, 0), 0},
		{time.Unix(0, 1), 1},
		{suiteT0, suiteT0.UnixNano()},
		{time.Unix(0, maxNanos-1), maxNanos - 1},
		{time.Unix(0, maxNanos), maxNanos},
		{time.Unix(0, maxNanos+1), maxNanos},
		{time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), maxNanos},
		{year2300, maxNanos},
		{year9999, maxNanos},
	} {
		if got := clampNanos(c.at); got != c.want {
			t.Errorf("clampNanos(%v) = %d, want %d", c.at, got, c.want)
		}
		nc := newNanoClock(NewManualClock(c.at))
		if got := nc.now(); got != c.want {
			t.Errorf("now at %v = %d, want %d", c.at, got, c.want)
		}
		if got := nc.nanosOf(nc.timeOf(c.want)); got != c.want {
			t.Errorf("nanosOf(timeOf(%d)) = %d", c.want, got)
		}
	}
}

// An exhausted key stays exhausted when the clock reads before 1970 (a
// clock gone back never frees capacity) and is free again in the present
// once its period has passed; a clock after 2116 acts as 2116, later than
// the present, so the key is free there.
func TestClockOutsideRangeClamps(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			lim, clk := newLimiterAt(t, alg, suiteLimit)
			makeBusy(t, alg, lim, "k")
			for _, at := range []time.Time{year1, year1600, time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)} {
				clk.Set(at)
				if lim.Allow("k") {
					t.Fatalf("at %v an exhausted key was allowed", at.Year())
				}
			}
			clk.Set(suiteT0.Add(2 * suitePeriod))
			if !lim.Allow("k") {
				t.Fatal("back in the present, two periods later, the key is denied")
			}
			makeBusy(t, alg, lim, "f")
			clk.Set(year2300)
			if !lim.Allow("f") {
				t.Fatal("at 2300 (acting as 2116) the key is denied")
			}
			makeBusy(t, alg, lim, "g")
			clk.Set(year9999)
			if lim.Allow("g") {
				t.Fatal("at 9999 a key exhausted at 2300 is allowed: both act as 2116")
			}
		})
	}
}

// On a clock outside the range, a request that is allowed has a
// Reservation due at once, Wait returns at once, and a Cancel gives back.
func TestReserveOutsideRange(t *testing.T) {
	for _, alg := range algorithms {
		for _, at := range []time.Time{year1, year1600, year2300, year9999} {
			t.Run(alg.name+"/"+at.Format("2006"), func(t *testing.T) {
				clk := NewManualClock(at)
				lim, err := alg.new(suiteLimit, suitePeriod, clk)
				if err != nil {
					t.Fatal(err)
				}
				defer lim.Close()
				ctx := context.Background()
				if err := promptly(t, "Wait", func() error { return lim.Wait(ctx, "w") }); err != nil {
					t.Fatalf("Wait of an allowed request: %v", err)
				}
				r := suiteReserve(t, lim, "r", 1)
				if !r.OK() || !r.Decision().Allowed {
					t.Fatalf("fresh key: reservation %+v", r.Decision())
				}
				if d := r.Delay(); d != 0 {
					t.Fatalf("allowed reservation has Delay %v", d)
				}
				want := time.Unix(0, clampNanos(at))
				if !r.TimeToAct().Equal(want) {
					t.Fatalf("TimeToAct %v, want %v", r.TimeToAct(), want)
				}
				r.Cancel()
				if d := suitePeek(t, lim, "r"); d.Remaining != suiteLimit {
					t.Fatalf("after Cancel, Remaining %d, want %d", d.Remaining, suiteLimit)
				}
				// A booking ahead: its Delay is the decision's wait.
				makeBusy(t, alg, lim, "b")
				r = suiteReserve(t, lim, "b", 1)
				if !r.OK() {
					t.Fatalf("booking ahead refused: %+v", r.Decision())
				}
				if r.Decision().RetryAfter == 0 || r.Delay() != r.Decision().RetryAfter {
					t.Fatalf("Delay %v, decision's RetryAfter %v", r.Delay(), r.Decision().RetryAfter)
				}
				if got := r.TimeToAct().Sub(want); got != r.Decision().RetryAfter {
					t.Fatalf("TimeToAct is %v after the limiter's now, RetryAfter %v", got, r.Decision().RetryAfter)
				}
			})
		}
	}
}

// A wait booked in the present stays pending while the clock is set back
// before 1970, and returns once the clock reaches the time to act; one
// booked before 1970 waits until the clock comes into the range and reaches
// it, not for the raw length of the delay.
func TestWaitAcrossTheClamp(t *testing.T) {
	for _, alg := range algorithms {
		for _, from := range []time.Time{suiteT0, year1600} {
			t.Run(alg.name+"/"+from.Format("2006"), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					clk := NewManualClock(from)
					lim, err := alg.new(suiteLimit, suitePeriod, clk)
					if err != nil {
						t.Fatal(err)
					}
					defer lim.Close()
					makeBusy(t, alg, lim, "k")
					r := suiteReserve(t, lim, "k", 1)
					delay := r.Decision().RetryAfter
					r.Cancel()
					act := time.Unix(0, clampNanos(from)).Add(delay)
					done := make(chan error, 1)
					go func() { done <- lim.Wait(context.Background(), "k") }()
					pending := func(when string) {
						t.Helper()
						synctest.Wait() // the waiter has returned or blocks on its timer
						select {
						case err := <-done:
							t.Fatalf("Wait returned %v %s", err, when)
						default:
						}
					}
					pending("at once")
					clk.Set(year1600)
					pending("with the clock set back to 1600")
					clk.Advance(delay)
					pending("after the delay's length past 1600")
					clk.Set(act.Add(-1))
					pending("1ns before the time to act")
					clk.Set(act)
					synctest.Wait()
					select {
					case err := <-done:
						if err != nil {
							t.Fatalf("Wait: %v", err)
						}
					default:
						t.Fatal("Wait pending at its time to act")
					}
				})
			})
		}
	}
}
