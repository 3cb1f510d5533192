package ratelimit

import (
	"context"
	"testing"
	"time"
)

// A key evicted at the cap while a booking on it is pending, and set up
// again, is a new key: that old booking's Cancel or Settle must not give
// back what the new key's bookings took, even where they leave its state
// exactly where the old booking left it.
func TestEvictedKeyOldBookingGivesNothing(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, settle := range []bool{false, true} {
				clk := NewManualClock(suiteT0)
				lim, err := alg.new(2, 2*time.Second, clk, WithMaxKeys(1))
				if err != nil {
					t.Fatal(err)
				}
				book := func() *Reservation {
					t.Helper()
					if alg.name != "LeakyBucket" { // a queue of 2 takes the booking alone
						if d, err := lim.AllowN(ctx, "v", 2); err != nil || !d.Allowed {
							t.Fatalf("AllowN: %+v %v", d, err)
						}
					}
					r, err := lim.Reserve(ctx, "v", 2)
					if err != nil || !r.OK() {
						t.Fatalf("Reserve: %v", err)
					}
					return r
				}
				old := book()
				if !lim.Allow("x") { // evicts v, its booking pending
					t.Fatal("x refused")
				}
				if st := lim.Stats(); st.EvictedLRU != 1 {
					t.Fatalf("stats %+v, want one key evicted", st)
				}
				book() // v again, afresh: the same state the old booking left
				before, _ := lim.AllowN(ctx, "v", 0)
				if settle {
					if _, err := old.Settle(0); err != nil {
						t.Fatal(err)
					}
				} else {
					old.Cancel()
				}
				if after, _ := lim.AllowN(ctx, "v", 0); after != before {
					t.Errorf("settle %v: the old booking gave back the new key's: %+v, then %+v", settle, before, after)
				}
				lim.Close()
			}
		})
	}
}
