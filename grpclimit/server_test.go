package grpclimit

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// details returns the RetryInfo delay and the QuotaFailure of err, failing
// the test if either is missing.
func details(t *testing.T, err error) (time.Duration, *errdetails.QuotaFailure) {
	t.Helper()
	st := status.Convert(err)
	var retry *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if retry == nil || qf == nil {
		t.Fatalf("status %v: want RetryInfo and QuotaFailure details, got %v", st, st.Details())
	}
	return retry.GetRetryDelay().AsDuration(), qf
}

func TestRateLimitUnary(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 2, ratelimit.WithClock(clock))
	conn, e := serve(t, serverOpts(RateLimit(lim, WithPolicy("api", time.Second))))
	ctx := testCtx(t)

	// Timeline, the bucket holding 2 tokens refilled at 2/s:
	// t0: two calls allowed (r=1, r=0), the third denied with a retry
	// delay of exactly 500ms (half a second until a token).
	for i, wantR := range []string{"1", "0"} {
		var md metadata.MD
		if err := say(ctx, conn, methodSay, grpc.Header(&md)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := md.Get(MDRateLimitPolicy); len(got) != 1 || got[0] != `"api";q=2;w=1` {
			t.Errorf("call %d: ratelimit-policy %q", i, got)
		}
		if got := md.Get(MDRateLimit); len(got) != 1 || got[0] != `"api";r=`+wantR+`;t=1` {
			t.Errorf("call %d: ratelimit %q", i, got)
		}
	}
	var hdr metadata.MD
	err := say(ctx, conn, methodSay, grpc.Header(&hdr))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	retry, qf := details(t, err)
	if retry != 500*time.Millisecond {
		t.Errorf("RetryInfo delay %v, want 500ms", retry)
	}
	if len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "api" || qf.Violations[0].QuotaValue != 2 {
		t.Errorf("QuotaFailure %v", qf)
	}
	if msg := status.Convert(err).Message(); msg != "grpclimit: rate limited, retry after 500ms" {
		t.Errorf("message %q", msg)
	}
	if got := hdr.Get(MDRetryAfter); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after %q, want 1 (500ms rounded up)", got)
	}
	if got := hdr.Get(MDRateLimit); len(got) != 1 || got[0] != `"api";r=0;t=1` {
		t.Errorf("denied ratelimit %q", got)
	}
	if e.Calls() != 2 {
		t.Errorf("handler ran %d times, want 2", e.Calls())
	}
	// t0+499ms: still denied; t0+500ms: allowed, exactly when RetryInfo said.
	clock.Advance(499 * time.Millisecond)
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("at 499ms: %v", err)
	}
	clock.Advance(time.Millisecond)
	if err := say(ctx, conn, methodSay); err != nil {
		t.Fatalf("at 500ms: %v", err)
	}
}

func TestRateLimitStreamOpenAndMessages(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	opens, _ := ratelimit.NewTokenBucket(ratelimit.Rate{N: 1, Period: 10 * time.Second}, 1, ratelimit.WithClock(clock))
	msgs, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock))
	conn, _ := serve(t, serverOpts(RateLimit(opens, WithMessages(msgs))))

	// The first stream opens; two messages fit the burst; the third needs
	// a token a second away, well within the stream's deadline, so RecvMsg
	// waits on the manual clock until the test moves it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := chat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := cs.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := cs.SendMsg(wrapperspb.String("m")); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- cs.RecvMsg(new(wrapperspb.StringValue)) }()
	waitTimers(t, clock, 1)
	select {
	case err := <-got:
		t.Fatalf("third message echoed before its token: %v", err)
	default:
	}
	clock.Advance(time.Second)
	if err := <-got; err != nil {
		t.Fatalf("third message after 1s: %v", err)
	}

	// A second stream a second later is refused at open: one per 10s.
	cs2, err := chat(ctx, conn)
	if err == nil {
		err = cs2.RecvMsg(new(wrapperspb.StringValue))
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	if retry, _ := details(t, err); retry != 9*time.Second {
		t.Errorf("second stream's retry delay %v, want 9s", retry)
	}
	if md, _ := cs2.Header(); len(md.Get(MDRetryAfter)) != 1 || md.Get(MDRetryAfter)[0] != "9" {
		t.Errorf("denied stream's header metadata %v, want retry-after 9", md)
	}
	cs.CloseSend()

	// A message whose wait would outlast the stream's deadline is denied
	// at once (on a 100ms deadline, a token 1s away), ending the stream.
	clock.Advance(9 * time.Second) // an open, and a full burst of messages
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	cs3, err := chat(short, conn)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cs3.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := cs3.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	err = cs3.RecvMsg(new(wrapperspb.StringValue))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third message on a short deadline: %v, want ResourceExhausted", err)
	}
	if retry, qf := details(t, err); retry != time.Second || qf.Violations[0].QuotaId != "messages" {
		t.Errorf("message denial: retry %v, %v", retry, qf)
	}
}

// waitTimers waits until clock has n pending timers: a goroutine has
// started to wait on it.
func waitTimers(t *testing.T, clock *ratelimit.ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clock.Timers() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers pending, want %d", clock.Timers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRulesLimit(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		/test.Echo/Say: 1/s     per user as say
		/test.Echo/Say: 100/s   per ip   as say-ip
		*:              3/s     global   as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	user := WithUser(ByMetadata("x-user"))
	conn, e := serve(t, serverOpts(RulesLimit(rules, user)))
	ctx := testCtx(t)
	as := func(u string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-user", u) }

	var md metadata.MD
	if err := say(as("ann"), conn, methodSay, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	wantPolicy := `"say";q=1;w=1, "say-ip";q=100;w=1, "global";q=3;w=1`
	if got := md.Get(MDRateLimitPolicy); len(got) != 1 || got[0] != wantPolicy {
		t.Errorf("ratelimit-policy %q, want %q", got, wantPolicy)
	}
	if got := md.Get(MDRateLimit); len(got) != 1 || got[0] != `"say";r=0;t=1` {
		t.Errorf("ratelimit %q: want the strictest rule, say", got)
	}
	// Ann's second call: her per-user rule denies; the global allowance
	// she would have taken is given back (all or nothing).
	err = say(as("ann"), conn, methodSay)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("ann again: %v", err)
	}
	_, qf := details(t, err)
	if len(qf.Violations) != 1 || qf.Violations[0].QuotaId != "say" {
		t.Errorf("violations %v, want only say", qf.Violations)
	}
	// Bob and a method with only the global rule use the two global
	// tokens left; then the global rule denies.
	if err := say(as("bob"), conn, methodSay); err != nil {
		t.Fatal(err)
	}
	if err := say(ctx, conn, methodPing); err != nil {
		t.Fatal(err)
	}
	err = say(ctx, conn, methodPing)
	if _, qf := details(t, err); qf.Violations[0].QuotaId != "global" {
		t.Errorf("violations %v, want global", qf.Violations)
	}
	if e.Calls() != 3 {
		t.Errorf("handler ran %d times, want 3", e.Calls())
	}
	// A call with no user, where a per-user rule applies: refused.
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.PermissionDenied {
		t.Errorf("no user: %v, want PermissionDenied", err)
	}

	// A per-user rule with no way to find the user must fail loudly.
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "WithUser") {
				t.Errorf("RulesLimit without WithUser: recovered %v", r)
			}
		}()
		RulesLimit(rules)
	}()
}

// failing is a limiter whose backend is down.
type failing struct{ ratelimit.Limiter }

var errBackend = errors.New("backend down")

func (failing) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errBackend
}

func TestFailurePolicy(t *testing.T) {
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
	ctx := testCtx(t)

	conn, e := serve(t, serverOpts(RateLimit(failing{lim})))
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.Unavailable {
		t.Errorf("failing closed: %v, want Unavailable", err)
	}
	var reported atomic.Value
	conn, e2 := serve(t, serverOpts(RateLimit(failing{lim}, WithFailOpen(func(_ context.Context, m string, err error) {
		reported.Store(m + ": " + err.Error())
	}))))
	var md metadata.MD
	if err := say(ctx, conn, methodSay, grpc.Header(&md)); err != nil {
		t.Errorf("failing open: %v", err)
	}
	if got, _ := reported.Load().(string); got != methodSay+": backend down" {
		t.Errorf("reported %q", got)
	}
	if len(md.Get(MDRateLimit)) != 0 {
		t.Errorf("failing open wrote rate-limit metadata %v", md)
	}
	if e.Calls() != 0 || e2.Calls() != 1 {
		t.Errorf("handler calls: closed %d, open %d", e.Calls(), e2.Calls())
	}

	// No key is refused even when failing open.
	conn, _ = serve(t, serverOpts(RateLimit(lim, WithKey(ByMetadata("x-api-key")), WithFailOpen(nil))))
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.PermissionDenied {
		t.Errorf("no key, failing open: %v, want PermissionDenied", err)
	}
	// A custom error handler chooses the status.
	conn, _ = serve(t, serverOpts(RateLimit(lim, WithKey(ByMetadata("x-api-key")), WithErrorHandler(
		func(context.Context, string, error) error { return status.Error(codes.Unauthenticated, "who are you") }))))
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.Unauthenticated {
		t.Errorf("custom error handler: %v", err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		code codes.Code
	}{
		{"default", nil, codes.ResourceExhausted},
		{"unavailable", []Option{WithBusyCode(codes.Unavailable)}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bh, _ := ratelimit.NewBulkhead(2)
			conn, e := serve(t, serverOpts(ConcurrencyLimit(bh, tc.opts...)))
			e.gate, e.entered = make(chan struct{}), make(chan struct{}, 2)
			ctx := testCtx(t)
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if err := say(ctx, conn, methodSay); err != nil {
						t.Errorf("held call: %v", err)
					}
				})
			}
			<-e.entered
			<-e.entered
			err := say(ctx, conn, methodSay)
			if status.Code(err) != tc.code {
				t.Fatalf("third call: %v, want %v", err, tc.code)
			}
			var retry time.Duration
			for _, d := range status.Convert(err).Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					retry = ri.GetRetryDelay().AsDuration()
				}
			}
			if retry != time.Second {
				t.Errorf("busy RetryInfo %v, want 1s", retry)
			}
			close(e.gate)
			wg.Wait()
			if bh.InFlight() != 0 {
				t.Errorf("%d permits held after the calls returned", bh.InFlight())
			}
		})
	}
}

// Many concurrent calls and streams through a bulkhead of 3: never more
// than 3 handlers at once, every call either served or refused with
// ResourceExhausted, and no permit left held.
func TestConcurrencyLimitUnderLoad(t *testing.T) {
	bh, _ := ratelimit.NewBulkhead(3)
	var inHandler, peak atomic.Int64
	track := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 100 { // let other calls run while this one is in the handler
			runtime.Gosched()
		}
		return h(ctx, req)
	}
	l := ConcurrencyLimit(bh, WithWait())
	conn, _ := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary, track), grpc.ChainStreamInterceptor(l.Stream)})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			var err error
			if i%4 == 0 {
				var cs grpc.ClientStream
				if cs, err = chat(ctx, conn); err == nil {
					if err = cs.SendMsg(wrapperspb.String("x")); err == nil {
						err = cs.RecvMsg(new(wrapperspb.StringValue))
					}
					cs.CloseSend()
					for err == nil {
						err = cs.RecvMsg(new(wrapperspb.StringValue))
					}
					if err.Error() == "EOF" {
						err = nil
					}
				}
			} else {
				err = say(ctx, conn, methodSay)
			}
			switch {
			case err == nil:
				served.Add(1)
			case status.Code(err) == codes.ResourceExhausted:
				refused.Add(1)
			default:
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 3 {
		t.Errorf("peak of %d handlers at once, limit 3", p)
	}
	if served.Load()+refused.Load() != 40 || served.Load() == 0 {
		t.Errorf("served %d, refused %d", served.Load(), refused.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for bh.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // a stream's handler returns after the client saw EOF
	}
	if bh.InFlight() != 0 {
		t.Errorf("%d permits still held", bh.InFlight())
	}
}

func TestOptionsFailLoudly(t *testing.T) {
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
	bh, _ := ratelimit.NewBulkhead(1)
	for name, f := range map[string]func(){
		"nil limiter":     func() { RateLimit(nil) },
		"nil rules":       func() { RulesLimit(nil) },
		"nil concurrency": func() { ConcurrencyLimit(nil) },
		"nil messages":    func() { RateLimit(lim, WithMessages(nil)) },
		"busy code":       func() { ConcurrencyLimit(bh, WithBusyCode(codes.Internal)) },
		"negative busy":   func() { ConcurrencyLimit(bh, WithBusyRetryAfter(-time.Second)) },
		// An option the constructor does not read is a mistake, not a no-op.
		"wait on a rate":          func() { RateLimit(lim, WithWait()) },
		"policy on rules":         func() { RulesLimit(&ratelimit.Rules{}, WithPolicy("x", 0)) },
		"user on a rate":          func() { RateLimit(lim, WithUser(ByPeer())) },
		"busy code on rules":      func() { RulesLimit(&ratelimit.Rules{}, WithBusyCode(codes.Unavailable)) },
		"key on a bulkhead":       func() { ConcurrencyLimit(bh, WithKey(ByPeer())) },
		"fail open on a bulkhead": func() { ConcurrencyLimit(bh, WithFailOpen(nil)) },
		"cost on a bulkhead":      func() { ConcurrencyLimit(bh, WithCost(costMD)) },
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.HasPrefix(s, "grpclimit: ") {
					t.Errorf("%s: recovered %v, want a grpclimit panic", name, r)
				}
			}()
			f()
		}()
	}
	// The same options where they apply.
	ConcurrencyLimit(bh, WithKey(ByPeer()), WithFailOpen(nil), WithMessages(lim), WithWait(), WithBusyCode(codes.Unavailable))
	RulesLimit(&ratelimit.Rules{}, WithKey(ByPeer()), WithMessages(lim), WithoutMetadata(), WithClientIP(ByPeer()))
	RateLimit(lim, WithKey(ByPeer()), WithPolicy("x", 0), WithFailOpen(nil), WithErrorHandler(defaultError), WithCost(costMD))
	RulesLimit(&ratelimit.Rules{}, WithCost(costMD))
}

// An adaptive bulkhead works wherever a bulkhead does: calls through it
// never exceed its Max, its limit stays in bounds, and no permit is left.
func TestConcurrencyLimitAdaptive(t *testing.T) {
	ab, err := ratelimit.NewAdaptiveBulkhead(ratelimit.AdaptiveParams{Min: 2, Max: 4, Window: 2, ProbeEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	var active, peak atomic.Int64
	track := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 100 {
			runtime.Gosched()
		}
		return h(ctx, req)
	}
	l := ConcurrencyLimit(ab, WithWait())
	conn, _ := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary, track)})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			if err := say(ctx, conn, methodSay); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 4 {
		t.Errorf("peak of %d calls in the handler, max 4", p)
	}
	if ab.InFlight() != 0 || ab.Limit() < 2 || ab.Limit() > 4 {
		t.Errorf("after the calls: %d in flight, limit %d", ab.InFlight(), ab.Limit())
	}
}
