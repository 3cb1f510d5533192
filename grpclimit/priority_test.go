package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A Fair with classes behind RateLimit: calls marked critical by
// WithPriority keep their reserve while the others are refused.
func TestWithPriority(t *testing.T) {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	fw, err := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithClasses(ratelimit.Class{Name: "critical", Reserved: 3}, ratelimit.Class{Name: "rest", Reserved: 0}))
	if err != nil {
		t.Fatal(err)
	}
	s := RateLimit(fair,
		WithKey(func(ctx context.Context, method string) (string, error) { return "acme", nil }),
		WithPriority(func(ctx context.Context, method string) ratelimit.Priority {
			if method == "/shop.Shop/Pay" {
				return 0
			}
			return 1
		}),
	)
	call := func(method string) codes.Code {
		_, err := s.Unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(ctx context.Context, req any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	ok := 0
	for range 20 {
		if call("/shop.Shop/Export") == codes.OK {
			ok++
		}
	}
	if ok != 7 {
		t.Errorf("Export: %d of 20 allowed, want the 7 not reserved", ok)
	}
	for i := range 3 {
		if c := call("/shop.Shop/Pay"); c != codes.OK {
			t.Errorf("Pay %d: %v within the critical reserve", i, c)
		}
	}
	if c := call("/shop.Shop/Pay"); c != codes.ResourceExhausted {
		t.Errorf("Pay past the limit: %v", c)
	}
}
