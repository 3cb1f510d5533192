package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// costMD is a cost function that believes the client's x-cost metadata as
// it stands, the worst a cost function can do: the tests show what the
// interceptor does with every value a client can send.
func costMD(ctx context.Context, _ string) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-cost"); len(v) == 1 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			return n
		}
	}
	return 1
}

func withCost(ctx context.Context, n int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-cost", strconv.Itoa(n))
}

func hasRetryInfo(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// The cost is charged as n events, and the metadata shows the bucket after
// the charge; a cost the limit cannot charge is refused loudly, even when
// failing open. A bucket of 10 refilled at 1/s:
//
//	cost 3: OK, r=7
//	cost 7: OK, r=0
//	cost 1: ResourceExhausted, RetryInfo 1s
//	cost 0: OK, free though empty, r=0
//	cost -1: Internal; cost 11: ResourceExhausted without RetryInfo
func TestCostUnary(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(clock))
	failOpen := WithFailOpen(func(context.Context, string, error) { t.Error("a refused cost was reported as a limiter failure") })
	conn, e := serve(t, serverOpts(RateLimit(lim, WithCost(costMD), WithPolicy("api", 0), failOpen)))
	ctx := testCtx(t)
	for i, s := range []struct {
		cost  int
		code  codes.Code
		limit string
	}{
		{3, codes.OK, `"api";r=7;t=3`},
		{7, codes.OK, `"api";r=0;t=10`},
		{1, codes.ResourceExhausted, `"api";r=0;t=1`},
		{0, codes.OK, `"api";r=0;t=10`},
		{-1, codes.Internal, ""},
		{11, codes.ResourceExhausted, ""},
	} {
		var md metadata.MD
		err := say(withCost(ctx, s.cost), conn, methodSay, grpc.Header(&md))
		step := fmt.Sprintf("step %d (cost %d)", i, s.cost)
		if status.Code(err) != s.code {
			t.Fatalf("%s: %v, want %v", step, err, s.code)
		}
		got := md.Get(MDRateLimit)
		if s.limit == "" && len(got) != 0 || s.limit != "" && (len(got) != 1 || got[0] != s.limit) {
			t.Errorf("%s: ratelimit %q, want %q", step, got, s.limit)
		}
		if s.limit == "" && hasRetryInfo(err) {
			t.Errorf("%s: a cost that can never pass got a RetryInfo: %v", step, err)
		}
	}
	if e.Calls() != 3 {
		t.Errorf("handler ran %d times, want 3", e.Calls())
	}
	clock.Advance(10 * time.Second)
	if err := say(withCost(ctx, 10), conn, methodSay); err != nil {
		t.Errorf("a full bucket after the refusals: %v", err)
	}
}

// A custom error handler sees the refused cost as an error matching
// ErrInvalidCost and the limiter's sentinel; a stream's opening is
// charged its cost too.
func TestCostErrorsAndStreams(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 4, ratelimit.WithClock(clock))
	seen := make(chan error, 4)
	onError := WithErrorHandler(func(_ context.Context, _ string, err error) error {
		seen <- err
		return status.Error(codes.FailedPrecondition, "refused")
	})
	conn, _ := serve(t, serverOpts(RateLimit(lim, WithCost(costMD), onError)))
	ctx := testCtx(t)
	for _, n := range []int{-2, 5} {
		if err := say(withCost(ctx, n), conn, methodSay); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("cost %d: %v", n, err)
		}
	}
	for i, want := range []error{ratelimit.ErrNegativeN, ratelimit.ErrExceedsLimit} {
		err := <-seen
		if !errors.Is(err, ErrInvalidCost) || !errors.Is(err, want) {
			t.Errorf("error %d: %v, want ErrInvalidCost and %v", i, err, want)
		}
	}
	cs, err := chat(withCost(ctx, 3), conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("m")); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	md, err := cs.Header()
	if err != nil || len(md.Get(MDRateLimit)) != 1 || md.Get(MDRateLimit)[0] != `"default";r=1;t=3` {
		t.Errorf("stream opened at cost 3: %v %v", md, err)
	}
	cs.CloseSend()
	if err := say(withCost(ctx, 2), conn, methodSay); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("cost 2 after a stream of cost 3 in a bucket of 4: %v", err)
	}
}

// RulesLimit charges the one cost under every rule of the method, all or
// nothing; a cost above the smallest burst can never pass.
func TestCostRulesLimit(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		/test.Echo/Say: 10/10s per ip as ip
		*:              6/6s   global as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := serve(t, serverOpts(RulesLimit(rules, WithCost(costMD))))
	ctx := testCtx(t)
	var md metadata.MD
	if err := say(withCost(ctx, 4), conn, methodSay, grpc.Header(&md)); err != nil || md.Get(MDRateLimit)[0] != `"global";r=2;t=4` {
		t.Fatalf("cost 4: %v %v", err, md)
	}
	err = say(withCost(ctx, 3), conn, methodSay)
	if _, qf := details(t, err); len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "global" {
		t.Errorf("cost 3: violations %v, want global", qf.Violations)
	}
	if err := say(withCost(ctx, 7), conn, methodSay); status.Code(err) != codes.ResourceExhausted || hasRetryInfo(err) {
		t.Errorf("cost 7: %v", err)
	}
	if d, _ := rules.For(methodSay).Rules()[0].Limiter.AllowN(ctx, "127.0.0.1", 0); d.Remaining != 6 {
		t.Errorf("per-IP rule has %d left, want 6: charged only for the allowed call", d.Remaining)
	}
}
