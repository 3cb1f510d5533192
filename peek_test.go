package ratelimit

import (
	"context"
	"testing"
	"time"
)

// A peek (n == 0) is allowed whatever the key holds, as the Limiter
// contract says: with bookings ahead or a debt it says nothing remains,
// and takes nothing.
func TestPeekAllowedWithBookingsAhead(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			lim, err := alg.new(2, 2*time.Second, clk)
			if err != nil {
				t.Fatal(err)
			}
			r, err := lim.(Taker).Take(ctx, "v", 2)
			if err != nil || !r.OK() {
				t.Fatalf("Take: %v", err)
			}
			if _, err := r.Settle(4); err != nil { // a debt: the key is owed 2 more
				t.Fatal(err)
			}
			for range 2 {
				d, err := lim.AllowN(ctx, "v", 0)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed || d.Remaining != 0 || d.RetryAfter != 0 || d.ResetAfter <= 0 {
					t.Errorf("peek with a debt: %+v, want allowed, nothing remaining, no retry, a reset ahead", d)
				}
			}
			if lim.Allow("v") {
				t.Error("allowed while in debt")
			}
		})
	}
}
