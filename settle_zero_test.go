package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSettleZeroBooking: a booking of 0 events (Reserve or Take of 0)
// holds nothing and cannot be settled: Settle is ErrSettled, before or
// after a Cancel, and the key is left as it was.
func TestSettleZeroBooking(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for _, how := range []string{"Reserve", "Take", "Reserve+Cancel", "Take+Cancel"} {
				clk := NewManualClock(time.Unix(1000, 0))
				l, err := alg.new(6, time.Second, clk)
				must(t, err)
				before, _ := l.AllowN(ctx, "k", 0)
				var r *Reservation
				if how[0] == 'R' {
					r, err = l.Reserve(ctx, "k", 0)
				} else {
					r, err = l.(Taker).Take(ctx, "k", 0)
				}
				must(t, err)
				if len(how) > 7 && how[len(how)-6:] == "Cancel" {
					r.Cancel()
				}
				if _, err := r.Settle(4); !errors.Is(err, ErrSettled) {
					t.Errorf("%s of 0, then Settle(4): %v, want ErrSettled", how, err)
				}
				if after, _ := l.AllowN(ctx, "k", 0); after != before {
					t.Errorf("%s of 0, then Settle(4): the key went from %+v to %+v", how, before, after)
				}
				l.Close()
			}
		})
	}
}
