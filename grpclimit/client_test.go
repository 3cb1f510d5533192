package grpclimit

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func clientOpts(c *Client) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.Unary), grpc.WithChainStreamInterceptor(c.Stream)}
}

// A client waiting on its own limiter: the ctx deadline is respected, the
// call failing at once and unsent when the wait would outlast it.
func TestClientLimiterDeadline(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithClock(clock))
	c := &Client{Limiter: lim, Clock: clock}
	conn, e := serve(t, nil, clientOpts(c)...)
	if err := say(testCtx(t), conn, methodSay); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := say(short, conn, methodSay)
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait of 1s on a 200ms deadline: %v (code %v)", err, status.Code(err))
	}
	if el := time.Since(start); el > 150*time.Millisecond {
		t.Errorf("refused after %v, want at once", el)
	}
	if e.Calls() != 1 {
		t.Errorf("server saw %d calls, want 1", e.Calls())
	}
	// Without a deadline the call waits for the clock, then goes.
	done := make(chan error, 1)
	go func() { done <- say(testCtx(t), conn, methodSay) }()
	waitTimers(t, clock, 1)
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A cancelled wait returns the context's status and error.
	ctx, cancelNow := context.WithCancel(context.Background())
	go func() { done <- say(ctx, conn, methodSay) }()
	waitTimers(t, clock, 1)
	cancelNow()
	if err := <-done; status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	if e.Calls() != 2 {
		t.Errorf("server saw %d calls, want 2", e.Calls())
	}
}

// After the server's limiter denies with RetryInfo, the client holds the
// method, not others, for exactly the delay, and does not send meanwhile.
func TestClientHoldsAfterRetryInfo(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 1, ratelimit.WithClock(clock))
	c := &Client{Clock: clock}
	conn, e := serve(t, serverOpts(RateLimit(lim, WithKey(ByMethod()))), clientOpts(c)...)
	ctx := testCtx(t)
	if err := say(ctx, conn, methodSay); err != nil {
		t.Fatal(err)
	}
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v", err)
	}
	until, ok := c.PausedUntil(methodSay)
	if !ok || !until.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("paused until %v, %v; want t0+500ms", until, ok)
	}
	if _, ok := c.PausedUntil(methodPing); ok {
		t.Error("another method is paused")
	}
	if err := say(ctx, conn, methodPing); err != nil {
		t.Errorf("another method: %v", err)
	}
	// A call on a deadline shorter than the pause fails at once, unsent.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := say(short, conn, methodSay); !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paused call on a short deadline: %v", err)
	}
	before := e.Calls()
	// Another waits, and goes when the pause is over: the server, whose
	// token is back exactly then, serves it.
	done := make(chan error, 1)
	go func() { done <- say(ctx, conn, methodSay) }()
	waitTimers(t, clock, 1)
	clock.Advance(499 * time.Millisecond)
	if e.Calls() != before {
		t.Errorf("a call was sent during the pause")
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Errorf("after the pause: %v", err)
	}
	if got := e.Calls() - before; got != 1 {
		t.Errorf("%d calls served after the pause, want 1", got)
	}
}

// A hostile or broken RetryInfo never pauses beyond MaxPause, and a
// negative, malformed or absent one pauses nothing.
func TestClientHostileRetryInfo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay *durationpb.Duration
		want  time.Duration // 0: no pause
	}{
		{"huge", &durationpb.Duration{Seconds: math.MaxInt64}, 3 * time.Second},
		{"past a Duration", &durationpb.Duration{Seconds: 1 << 40}, 3 * time.Second},
		{"negative", &durationpb.Duration{Seconds: -5}, 0},
		{"malformed", &durationpb.Duration{Seconds: 1, Nanos: -1}, 0},
		{"nil delay", nil, 0},
		{"zero", &durationpb.Duration{}, 0},
		{"small", &durationpb.Duration{Nanos: 1}, time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := ratelimit.NewManualClock(t0)
			c := &Client{Clock: clock, MaxPause: 3 * time.Second}
			conn, e := serve(t, nil, clientOpts(c)...)
			st, _ := status.New(codes.ResourceExhausted, "go away").WithDetails(&errdetails.RetryInfo{RetryDelay: tc.delay})
			e.fail = st.Err()
			if err := say(testCtx(t), conn, methodSay); status.Code(err) != codes.ResourceExhausted {
				t.Fatal(err)
			}
			until, ok := c.PausedUntil(methodSay)
			if got := until.Sub(t0); ok != (tc.want > 0) || (ok && got != tc.want) {
				t.Errorf("paused %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
	// A negative MaxPause ignores RetryInfo; other codes are not pauses.
	clock := ratelimit.NewManualClock(t0)
	for _, c := range []*Client{{Clock: clock, MaxPause: -1}, {Clock: clock}} {
		conn, e := serve(t, nil, clientOpts(c)...)
		code := codes.ResourceExhausted
		if c.MaxPause == 0 {
			code = codes.Unavailable
		}
		st, _ := status.New(code, "go away").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Minute)})
		e.fail = st.Err()
		say(testCtx(t), conn, methodSay)
		if _, ok := c.PausedUntil(methodSay); ok {
			t.Errorf("MaxPause %v, code %v: paused", c.MaxPause, code)
		}
	}
}

func TestClientPauseService(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	c := &Client{Clock: clock, Pause: PauseService}
	conn, e := serve(t, nil, clientOpts(c)...)
	st, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	e.fail = st.Err()
	say(testCtx(t), conn, methodSay)
	if _, ok := c.PausedUntil("/test.Echo/Other"); !ok {
		t.Error("another method of the service is not paused")
	}
	if _, ok := c.PausedUntil(methodPing); ok {
		t.Error("another service is paused")
	}
}

// The client's bulkhead is held for a whole stream and given back however
// the stream ends; concurrent unary calls never exceed it.
func TestClientConcurrency(t *testing.T) {
	bh, _ := ratelimit.NewBulkhead(1)
	c := &Client{Concurrency: bh}
	conn, _ := serve(t, nil, clientOpts(c)...)
	ctx := testCtx(t)

	cs, err := chat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if bh.InFlight() != 1 {
		t.Fatalf("stream open: %d permits held, want 1", bh.InFlight())
	}
	cs.CloseSend()
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err == nil {
		t.Fatal("want EOF")
	}
	if bh.InFlight() != 0 {
		t.Fatalf("stream ended: %d permits held", bh.InFlight())
	}
	// A stream abandoned by cancelling its context gives its permit back.
	sctx, cancel := context.WithCancel(ctx)
	if _, err := chat(sctx, conn); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for bh.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the stream's context ends asynchronously
	}
	if bh.InFlight() != 0 {
		t.Fatalf("cancelled stream: %d permits held", bh.InFlight())
	}

	// Unary calls under -race: the server never sees more than the
	// bulkhead's limit at once.
	if err := bh.SetLimit(2); err != nil {
		t.Fatal(err)
	}
	var active, peak atomic.Int64
	track := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 100 { // stay in the handler a little
			runtime.Gosched()
		}
		return h(ctx, req)
	}
	conn, e := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(track)}, clientOpts(c)...)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := say(ctx, conn, methodSay); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 2 || p < 1 {
		t.Errorf("peak of %d calls at the server, client bulkhead of 2", p)
	}
	if bh.InFlight() != 0 {
		t.Errorf("%d permits held after the calls", bh.InFlight())
	}
	if e.Calls() != 20 {
		t.Errorf("server saw %d calls", e.Calls())
	}

	// A full bulkhead: waiting past the deadline gives DeadlineExceeded;
	// past the bulkhead's own maximum wait, ResourceExhausted.
	full, _ := ratelimit.NewBulkhead(1, ratelimit.WithMaxWait(time.Millisecond))
	full.TryAcquire()
	conn2, _ := serve(t, nil, clientOpts(&Client{Concurrency: full})...)
	if err := say(ctx, conn2, methodSay); status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Errorf("full bulkhead past its maximum wait: %v", err)
	}
	unbounded, _ := ratelimit.NewBulkhead(1)
	unbounded.TryAcquire()
	conn3, _ := serve(t, nil, clientOpts(&Client{Concurrency: unbounded})...)
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := say(short, conn3, methodSay); status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("full bulkhead past the deadline: %v", err)
	}
}

// With a Pacer, the client spaces its calls by the server's "ratelimit"
// metadata before it is refused: 2 left for the next second, so the next
// two calls go 500ms apart, and one that would have to wait past its
// deadline fails at once, unsent.
func TestClientPacer(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 3, ratelimit.WithClock(clock))
	c := &Client{Clock: clock, Pacer: &httplimit.Pacer{Clock: clock}, Pause: PauseService}
	conn, e := serve(t, serverOpts(RateLimit(lim)), clientOpts(c)...)
	ctx := testCtx(t)
	if err := say(ctx, conn, methodSay); err != nil { // r=2;t=1: 500ms apart
		t.Fatal(err)
	}
	if err := say(ctx, conn, methodSay); err != nil { // the first turn: at once
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := say(short, conn, methodSay)
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a turn past the deadline: %v", err)
	}
	if e.Calls() != 2 {
		t.Errorf("server saw %d calls, want 2", e.Calls())
	}
	// Streams are paced too, here sharing the service's turns.
	done := make(chan error, 1)
	go func() {
		cs, err := chat(ctx, conn)
		if err == nil {
			cs.CloseSend()
			err = cs.RecvMsg(new(wrapperspb.StringValue))
		}
		done <- err
	}()
	waitTimers(t, clock, 1)
	clock.Advance(time.Second)
	if err := <-done; err == nil || err.Error() != "EOF" {
		t.Errorf("paced stream: %v, want EOF", err)
	}
}

// A call refused a permit spends nothing of the limiter: the permit is
// taken before the limiter's turn.
func TestClientPermitBeforeLimiter(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.Every(time.Hour), 1, ratelimit.WithClock(clock))
	bh, _ := ratelimit.NewBulkhead(1, ratelimit.WithMaxWait(time.Millisecond))
	bh.TryAcquire() // full
	conn, e := serve(t, nil, clientOpts(&Client{Limiter: lim, Concurrency: bh, Clock: clock})...)
	ctx := testCtx(t)
	if err := say(ctx, conn, methodSay); !errors.Is(err, ratelimit.ErrBulkheadFull) {
		t.Fatalf("full bulkhead: %v", err)
	}
	bh.Release()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := say(short, conn, methodSay); err != nil {
		t.Fatalf("the limiter's one token was spent by the refused call: %v", err)
	}
	if e.Calls() != 1 {
		t.Errorf("server saw %d calls, want 1", e.Calls())
	}
}
