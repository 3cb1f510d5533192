package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// settleBy makes Say settle its call at the actual cost the request
// message names ("" leaves it unsettled), and fail with the Settle error.
func settleBy(ctx context.Context, in string) error {
	if in == "" {
		return nil
	}
	actual, err := strconv.Atoi(in)
	if err != nil {
		return status.Error(codes.InvalidArgument, in)
	}
	if err := Settle(ctx, actual); err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return nil
}

func sayActual(ctx context.Context, conn *grpc.ClientConn, actual string, opts ...grpc.CallOption) error {
	return conn.Invoke(ctx, methodSay, wrapperspb.String(actual), new(wrapperspb.StringValue), opts...)
}

// Settle gives back a surplus and books an excess as debt; the header
// metadata shows the charge at admission, the trailer the state after the
// settlement. A bucket of 10 refilled at 1/s:
//
//	cost 5, settled at 2: header r=5, trailer r=8
//	cost 3, settled at 6: header r=5, trailer r=2 (3 of debt)
//	cost 3: ResourceExhausted, 2 left, retry in 1s
//	cost 2, unsettled: r=0, no trailer
func TestSettleUnary(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(clock))
	conn, e := serve(t, serverOpts(RateLimit(lim, WithCost(costMD), WithPolicy("api", 0))))
	e.work = settleBy
	ctx := testCtx(t)
	for i, s := range []struct {
		cost           int
		actual         string
		code           codes.Code
		header, trailr string
	}{
		{5, "2", codes.OK, `"api";r=5;t=5`, `"api";r=8;t=2`},
		{3, "6", codes.OK, `"api";r=5;t=5`, `"api";r=2;t=8`},
		{3, "1", codes.ResourceExhausted, `"api";r=2;t=1`, ""},
		{2, "", codes.OK, `"api";r=0;t=10`, ""},
	} {
		var hdr, tlr metadata.MD
		err := sayActual(withCost(ctx, s.cost), conn, s.actual, grpc.Header(&hdr), grpc.Trailer(&tlr))
		step := fmt.Sprintf("step %d (cost %d, actual %q)", i, s.cost, s.actual)
		if status.Code(err) != s.code {
			t.Fatalf("%s: %v, want %v", step, err, s.code)
		}
		if got := hdr.Get(MDRateLimit); len(got) != 1 || got[0] != s.header {
			t.Errorf("%s: header ratelimit %q, want %q", step, got, s.header)
		}
		got := tlr.Get(MDRateLimit)
		if s.trailr == "" && len(got) != 0 || s.trailr != "" && (len(got) != 1 || got[0] != s.trailr) {
			t.Errorf("%s: trailer ratelimit %q, want %q", step, got, s.trailr)
		}
		if s.trailr != "" && (len(tlr.Get(MDRateLimitPolicy)) != 1 || len(tlr.Get(MDRetryAfter)) != 0) {
			t.Errorf("%s: trailer %v, want a policy and no retry-after", step, tlr)
		}
	}
}

// A stream is charged when it opens and settled from its handler; its
// trailer shows the settlement.
func TestSettleStream(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(clock))
	l := RateLimit(lim, WithCost(costMD))
	ln := serveStream(t, l, func(ss grpc.ServerStream) error {
		n := 0
		for {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			n++
		}
		return Settle(ss.Context(), n) // one event per message received
	})
	ctx := testCtx(t)
	cs, err := ln.NewStream(withCost(ctx, 6), &echoDesc.Streams[0], methodChat)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := cs.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
	}
	cs.CloseSend()
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	if got := cs.Trailer().Get(MDRateLimit); len(got) != 1 || got[0] != `"default";r=8;t=2` {
		t.Errorf("stream trailer ratelimit %q, want r=8 (charged 6, settled at 2)", got)
	}
	if d, _ := lim.AllowN(ctx, "127.0.0.1", 0); d.Remaining != 8 {
		t.Errorf("%d left after the stream, want 8", d.Remaining)
	}
}

// serveStream serves test.Echo/Chat with handler behind l on 127.0.0.1.
func serveStream(t *testing.T, l *ServerLimit, handler func(grpc.ServerStream) error) *grpc.ClientConn {
	t.Helper()
	desc := echoDesc
	desc.Methods = nil
	desc.Streams = []grpc.StreamDesc{{StreamName: "Chat", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error { return handler(ss) }}}
	conn, _ := serveDesc(t, serverOpts(l), &desc)
	return conn
}

// Settle says what it cannot do; a negative actual settles nothing, and a
// second Settle is refused.
func TestSettleErrorsGRPC(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	if err := Settle(context.Background(), 1); !errors.Is(err, ratelimit.ErrCannotSettle) ||
		err.Error() != "grpclimit: nothing to settle: the call went through no interceptor with WithCost, or it was exempt or let through unlimited by WithFailOpen" {
		t.Errorf("no interceptor: %v", err)
	}
	newLim := func() *ratelimit.TokenBucket {
		lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 5, ratelimit.WithClock(clock))
		return lim
	}
	ctx := testCtx(t)
	for _, c := range []struct {
		name string
		l    *ServerLimit
		cost int
		want string
	}{
		{"without WithCost", RateLimit(newLim()), 1,
			"grpclimit: nothing to settle: the call went through no interceptor with WithCost, or it was exempt or let through unlimited by WithFailOpen"},
		{"no Taker", RateLimit(struct{ ratelimit.Limiter }{newLim()}, WithCost(costMD)), 1,
			"grpclimit: nothing to settle: the interceptor's limiter cannot book for a settlement (it is no ratelimit.Taker)"},
		{"free", RateLimit(newLim(), WithCost(costMD)), 0,
			"grpclimit: nothing to settle: the call cost 0, so nothing was booked"},
	} {
		conn, e := serve(t, serverOpts(c.l))
		e.work = settleBy
		err := sayActual(withCost(ctx, c.cost), conn, "1")
		if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	lim := newLim()
	conn, e := serve(t, serverOpts(RateLimit(lim, WithCost(costMD))))
	errs := make(chan error, 3)
	e.work = func(ctx context.Context, _ string) error {
		errs <- Settle(ctx, -1)
		errs <- Settle(ctx, 1)
		errs <- Settle(ctx, 2)
		return nil
	}
	if err := say(withCost(ctx, 3), conn, methodSay); err != nil {
		t.Fatal(err)
	}
	if e1, e2, e3 := <-errs, <-errs, <-errs; !errors.Is(e1, ratelimit.ErrNegativeN) || e2 != nil || !errors.Is(e3, ratelimit.ErrSettled) {
		t.Errorf("Settle(-1), Settle(1), Settle(2): %v, %v, %v", e1, e2, e3)
	}
	if d, _ := lim.AllowN(ctx, "127.0.0.1", 0); d.Remaining != 4 {
		t.Errorf("%d left, want 4 (charged 3, settled at 1)", d.Remaining)
	}
}

// RulesLimit settles every rule the call was charged under; a call the
// global rule denies books nothing on the per-IP one. Per-IP burst 10,
// global burst 6, both refilled at 1/s.
func TestSettleRulesLimit(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		/test.Echo/Say: 10/10s per ip as ip
		*:              6/6s   global as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	conn, e := serve(t, serverOpts(RulesLimit(rules, WithCost(costMD))))
	e.work = settleBy
	ctx := testCtx(t)
	ip, global := rules.For(methodSay).Rules()[0].Limiter, rules.For(methodSay).Rules()[1].Limiter
	left := func(l ratelimit.Limiter, key string) int {
		d, _ := l.AllowN(ctx, key, 0)
		return d.Remaining
	}
	var tlr metadata.MD
	if err := sayActual(withCost(ctx, 4), conn, "1", grpc.Trailer(&tlr)); err != nil {
		t.Fatal(err)
	}
	if got := tlr.Get(MDRateLimit); len(got) != 1 || got[0] != `"global";r=5;t=1` || left(ip, "127.0.0.1") != 9 || left(global, "") != 5 {
		t.Errorf("cost 4 settled at 1: trailer %q, ip %d, global %d", got, left(ip, "127.0.0.1"), left(global, ""))
	}
	if err := sayActual(withCost(ctx, 5), conn, "9", grpc.Trailer(&tlr)); err != nil {
		t.Fatal(err)
	}
	if got := tlr.Get(MDRateLimit); len(got) != 1 || got[0] != `"global";r=0;t=10` {
		t.Errorf("cost 5 settled at 9: trailer %q", got)
	}
	clock.Advance(5 * time.Second) // ip has 5, global 1
	err = sayActual(withCost(ctx, 2), conn, "")
	if retry, qf := details(t, err); retry != time.Second || len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "global" {
		t.Errorf("cost 2: retry %v, %v", retry, qf.Violations)
	}
	if left(ip, "127.0.0.1") != 5 {
		t.Errorf("the denied call booked on ip: %d left, want 5", left(ip, "127.0.0.1"))
	}
}

// The bound of a token bucket of capacity C refilled one event per T,
// through the interceptor, as httplimit's TestSettleKeepsBound states and
// proves it: for calls i before j that it allowed, each counted at its
// settled cost except j, counted at its charge,
// Σ_{k=i}^{j-1} settled_k + charge_j ≤ C + ⌊(t_j − t_i)/T⌋. Random costs,
// settlements and clock moves, seeded.
func TestSettleKeepsBoundGRPC(t *testing.T) {
	const C, T = 6, 200 * time.Millisecond
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.Per(1, T), C, ratelimit.WithClock(clock))
	conn, e := serve(t, serverOpts(RateLimit(lim, WithCost(costMD))))
	e.work = settleBy
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(3, 5))
	type event struct {
		at             time.Time
		charge, settle int
	}
	var es []event
	denied, debts := 0, 0
	for range 200 {
		clock.Advance(time.Duration(rng.Int64N(int64(2 * T))))
		cost := rng.IntN(C + 1)
		actual, in := cost, ""
		if cost > 0 && rng.IntN(3) != 0 {
			actual = rng.IntN(2 * C)
			in = strconv.Itoa(actual)
		}
		err := sayActual(withCost(ctx, cost), conn, in)
		if status.Code(err) == codes.ResourceExhausted {
			denied++
			continue
		}
		if err != nil {
			t.Fatalf("cost %d actual %q: %v", cost, in, err)
		}
		if cost == 0 {
			continue // free: let through without a decision, it takes nothing
		}
		if actual > cost {
			debts++
		}
		es = append(es, event{clock.Now(), cost, actual})
	}
	for j := range es {
		sum := es[j].charge
		for i := j - 1; i >= 0; i-- {
			sum += es[i].settle
			if room := C + int(es[j].at.Sub(es[i].at)/T); sum > room {
				t.Fatalf("calls %d..%d cost %d in %v, more than %d", i, j, sum, es[j].at.Sub(es[i].at), room)
			}
		}
	}
	if denied == 0 || debts == 0 {
		t.Fatalf("denied %d, debts %d: the run checks little", denied, debts)
	}
}
