package ratelimit

import (
	"testing"
	"time"
)

// Each algorithm's Window is how long its allowance takes to come back
// from empty to full, the same as a Rule of the same rate and burst says.
func TestWindow(t *testing.T) {
	third := Per(3, time.Second) // 333,333,333⅓ns apart
	tb, _ := NewTokenBucket(third, 2)
	lb, _ := NewLeakyBucket(PerSecond(4), 10)
	fw, _ := NewFixedWindow(PerMinute(100))
	sl, _ := NewSlidingLog(Per(5, 90*time.Second))
	sc, _ := NewSlidingWindowCounter(PerHour(7))
	for _, tc := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"token bucket", tb.Window(), 666666667}, // 2 × 333,333,333⅓ns, rounded up
		{"token bucket as a rule", tb.Window(), Rule{Rate: third, Burst: 2}.Window()},
		{"leaky bucket", lb.Window(), 2500 * time.Millisecond},
		{"fixed window", fw.Window(), time.Minute},
		{"sliding log", sl.Window(), 90 * time.Second},
		{"sliding window counter", sc.Window(), time.Hour},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: Window() = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Refilled after exactly Window, not a nanosecond before.
	clock := NewManualClock(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	tb, _ = NewTokenBucket(third, 2, WithClock(clock))
	tb.Allow("k")
	tb.Allow("k")
	clock.Advance(tb.Window() - 1)
	if d, _ := tb.AllowN(t.Context(), "k", 0); d.Remaining != 1 {
		t.Errorf("1ns before Window: %d remaining, want 1", d.Remaining)
	}
	clock.Advance(1)
	if d, _ := tb.AllowN(t.Context(), "k", 0); d.Remaining != 2 || d.ResetAfter != 0 {
		t.Errorf("at Window: %+v, want full", d)
	}
}
