package grpclimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
)

// A Client with a Throttle: while the server fails every call most calls
// fail locally (Unavailable, matching ErrThrottled, the invoker not
// called), and after the server recovers the throttle lifts.
func TestClientThrottle(t *testing.T) {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src := rand.New(rand.NewPCG(3, 4))
	th, err := ratelimit.NewClientThrottle(2, time.Second, ratelimit.WithThrottleClock(clock), ratelimit.WithThrottleRand(src.Float64))
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Clock: clock, MaxPause: -1, Throttle: th}
	failing := true
	invoked := 0
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		invoked++
		if failing {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	}
	call := func() (throttled bool) {
		clock.Advance(time.Millisecond)
		before := invoked
		err := c.Unary(context.Background(), "/svc/M", nil, nil, nil, invoker)
		if errors.Is(err, ratelimit.ErrThrottled) {
			if invoked != before {
				t.Fatal("a throttled call reached the invoker")
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("throttled call's code %v, want Unavailable", status.Code(err))
			}
			return true
		}
		return false
	}
	throttled := 0
	for range 3000 {
		if call() {
			throttled++
		}
	}
	if throttled < 2500 {
		t.Fatalf("throttled %d of 3000 calls to a server failing them all", throttled)
	}
	failing = false
	for range 12_000 {
		call()
	}
	for range 1000 {
		if call() {
			t.Fatal("throttled a call after the server recovered")
		}
	}
}

func TestClientAccepted(t *testing.T) {
	for code, want := range map[codes.Code]bool{codes.OK: true, codes.NotFound: true, codes.InvalidArgument: true,
		codes.ResourceExhausted: false, codes.Unavailable: false, codes.Internal: false, codes.DeadlineExceeded: false} {
		var err error
		if code != codes.OK {
			err = status.Error(code, "x")
		}
		if got := DefaultAccepted(err); got != want {
			t.Errorf("DefaultAccepted(%v) = %v, want %v", code, got, want)
		}
	}
	if DefaultAccepted(errors.New("plain")) {
		t.Error("DefaultAccepted counts a plain error (Unknown) as accepted")
	}
	acc := AcceptCodes(codes.OK)
	if !acc(nil) || acc(status.Error(codes.NotFound, "x")) {
		t.Error("AcceptCodes(OK) misjudges")
	}
}
