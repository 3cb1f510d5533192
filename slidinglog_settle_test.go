package ratelimit

import (
	"context"
	"testing"
	"time"
)

// A debt settled on a sliding log that holds more instants than a limit
// lowered since: the later instants alone fill the log, so the debt's
// instants, older than all of them, drop out at once and change nothing
// (they used to drive the count of instants to insert below zero, and
// panic). The log then decides as if the booking had been settled at its
// estimate.
func TestSlidingLogDebtAfterLowering(t *testing.T) {
	ctx := context.Background()
	run := func(actual int) []bool {
		clk := NewManualClock(time.Unix(1000, 0))
		sl, err := NewSlidingLog(PerSecond(4), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		b, err := sl.Reserve(ctx, "k", 1)
		if err != nil || !b.OK() {
			t.Fatal(err)
		}
		clk.Advance(1)
		if d, err := sl.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		clk.Advance(1)
		if r, err := sl.Reserve(ctx, "k", 1); err != nil || !r.OK() {
			t.Fatal(err)
		}
		if err := sl.SetRate(PerSecond(2)); err != nil {
			t.Fatal(err)
		}
		d, err := b.Settle(actual)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 0 {
			t.Errorf("settled at %d: %+v, want nothing remaining", actual, d)
		}
		var got []bool
		for range 40 {
			clk.Advance(100 * time.Millisecond)
			got = append(got, sl.Allow("k"))
		}
		return got
	}
	debt, none := run(3), run(1)
	for i := range debt {
		if debt[i] != none[i] {
			t.Fatalf("step %d: with the debt %v, without %v", i, debt[i], none[i])
		}
	}
}
