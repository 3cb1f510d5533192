package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/grpclimit"
)

// A client interceptor that stops sending to a server failing every call:
// after the first refusals most calls fail locally with ErrThrottled.
func ExampleClient_throttle() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th, err := ratelimit.NewClientThrottle(2, time.Minute,
		ratelimit.WithThrottleClock(clock),
		ratelimit.WithThrottleRand(func() float64 { return 0.7 })) // fixed, for a deterministic output
	if err != nil {
		panic(err)
	}
	c := &grpclimit.Client{Clock: clock, Throttle: th}
	sent := 0
	failing := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		sent++
		return status.Error(codes.Unavailable, "overloaded")
	}
	throttled := 0
	for range 10 {
		if err := c.Unary(context.Background(), "/demo.Svc/Get", nil, nil, nil, failing); errors.Is(err, ratelimit.ErrThrottled) {
			throttled++
		}
	}
	fmt.Printf("sent %d, throttled %d\n", sent, throttled)
	// Output:
	// sent 3, throttled 7
}
