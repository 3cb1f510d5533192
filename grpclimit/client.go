package grpclimit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// DefaultMaxPause is the longest a Client holds calls after a server's
// RetryInfo, unless its MaxPause says otherwise: a server (or something
// between) asking for days is not obeyed blindly.
const DefaultMaxPause = 10 * time.Minute

// maxPauses bounds the pauses a Client remembers at once. Pauses that are
// over are dropped first; past the bound a new pause is not recorded.
const maxPauses = 4096

// PauseScope says which calls a server's RetryInfo holds.
type PauseScope uint8

const (
	// PauseMethod holds later calls to the same method ("/pkg.Service/M").
	PauseMethod PauseScope = iota
	// PauseService holds later calls to every method of the same service
	// ("/pkg.Service/").
	PauseService
)

// Client paces the calls of a gRPC client to stay within someone else's
// limits. Its methods Unary and Stream are a grpc.UnaryClientInterceptor
// and a grpc.StreamClientInterceptor:
//
//	c := &grpclimit.Client{Limiter: lim}
//	conn, err := grpc.NewClient(target, grpc.WithChainUnaryInterceptor(c.Unary), grpc.WithChainStreamInterceptor(c.Stream), ...)
//
// Before each call it waits for its turn of Pacer, if set, then out any
// pause a server asked for, then takes a permit of Concurrency, then waits
// on Limiter (Wait, with the call's context), and sends. It holds the
// permit until a unary call returns or a stream ends (its last message
// received, an error, or its context done). The permit is taken before the
// limiter's turn so that a call refused a permit spends nothing of the
// limiter; Concurrency so also bounds the calls waiting on the limiter.
//
// When a call fails with codes.ResourceExhausted and a google.rpc.RetryInfo
// detail, later calls of the same method (or service: Pause) are held for
// the retry delay, at most MaxPause: those yet to start, and those whose
// turn on the limiter came meanwhile, which give back their permit, wait
// out the pause and send (their limiter event is spent). A RetryInfo that is negative, malformed or absent holds nothing;
// a huge one holds for MaxPause. The failed call's error is returned as
// is: Client never retries.
//
// Waiting follows the call's context: if a pause or the limiter's delay
// would outlast its deadline (measured in real time, whatever the Clock,
// as ratelimit's WaitN does), the call fails at once, unsent, with a
// codes.ResourceExhausted status error that also matches
// ratelimit.ErrLimited and context.DeadlineExceeded with errors.Is; if the
// context ends during a wait, with the context's status (Canceled,
// DeadlineExceeded), matching ctx.Err(). A full Concurrency refuses with
// ResourceExhausted matching ratelimit.ErrBulkheadFull; another limiter
// error gives codes.Unavailable wrapping it.
//
// The zero Client limits nothing and honours RetryInfo. Set the fields
// before first use and do not change them afterwards; a Client is safe for
// concurrent use and must not be copied after first use.
type Client struct {
	// Limiter, if not nil, spaces calls: one event per call or stream,
	// keyed by Key.
	Limiter ratelimit.Limiter
	// Key returns the key of a call for Limiter; nil means the full method
	// name.
	Key func(ctx context.Context, fullMethod string) string
	// Concurrency, if not nil, bounds the calls in flight (across all
	// keys), such as a *ratelimit.Bulkhead.
	Concurrency Concurrency
	// Clock times pauses; nil means ratelimit.SystemClock(). Use the
	// Limiter's clock.
	Clock ratelimit.Clock
	// MaxPause caps the pause after a RetryInfo: 0 means DefaultMaxPause;
	// a negative value ignores RetryInfo.
	MaxPause time.Duration
	// Pause says which calls a RetryInfo holds (default PauseMethod), and
	// which calls share the Pacer's turns.
	Pause PauseScope
	// Pacer, if not nil, spaces calls so that the quota the server's
	// response metadata says remains ("ratelimit", as ServerLimit writes
	// it, or "x-ratelimit-remaining" and "x-ratelimit-reset") lasts until
	// it resets, as httplimit.Pacer does for HTTP: each call first waits
	// for its turn, keyed as Pause says. Off by default. Give it the same
	// Clock.
	Pacer *httplimit.Pacer
	// Throttle, if not nil, rejects calls locally while the server refuses
	// too many of them (see ratelimit.ClientThrottle and Accepted): a
	// rejected call fails at once, unsent, with a codes.Unavailable status
	// error matching ratelimit.ErrThrottled.
	Throttle *ratelimit.ClientThrottle
	// Accepted says whether the server accepted a call, from the error
	// the call (or the stream's creation) returned, for Throttle; nil
	// means DefaultAccepted.
	Accepted func(err error) bool

	mu     sync.Mutex
	paused map[string]time.Time // pause key -> hold calls until
}

// Unary is a grpc.UnaryClientInterceptor.
func (c *Client) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := c.throttleAllow(ctx); err != nil {
		return err
	}
	release, err := c.before(ctx, method)
	if err != nil {
		return err
	}
	var md metadata.MD
	if c.Pacer != nil {
		opts = append(opts[:len(opts):len(opts)], grpc.Header(&md))
	}
	err = invoker(ctx, method, req, reply, cc, opts...)
	c.throttleRecord(err)
	release()
	c.observe(method, md)
	c.after(method, err)
	return err
}

// observe gives the Pacer the header metadata of a call's response.
func (c *Client) observe(method string, md metadata.MD) {
	if c.Pacer == nil || len(md) == 0 {
		return
	}
	h := make(http.Header, len(md))
	for k, v := range md {
		h[http.CanonicalHeaderKey(k)] = v
	}
	c.Pacer.Observe(c.pauseKey(method), h)
}

// Stream is a grpc.StreamClientInterceptor.
func (c *Client) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := c.throttleAllow(ctx); err != nil {
		return nil, err
	}
	release, err := c.before(ctx, method)
	if err != nil {
		return nil, err
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	c.throttleRecord(err)
	if err != nil {
		release()
		c.after(method, err)
		return nil, err
	}
	once := sync.OnceFunc(release)
	// The stream's context ends when the stream does, however it ends.
	stop := context.AfterFunc(cs.Context(), once)
	return &clientStream{ClientStream: cs, c: c, method: method, release: func() { stop(); once() }}, nil
}

type clientStream struct {
	grpc.ClientStream
	c        *Client
	method   string
	release  func()
	observed bool // the header metadata went to the Pacer
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if s.c.Pacer != nil && !s.observed {
		// Headers have come (or never will) once a message or an error has.
		s.observed = true
		if md, herr := s.ClientStream.Header(); herr == nil {
			s.c.observe(s.method, md)
		}
	}
	if err != nil {
		s.release()
		s.c.after(s.method, err)
	}
	return err
}

// before waits for a pause, the limiter and a permit, and returns the
// function that gives the permit back.
func (c *Client) before(ctx context.Context, method string) (func(), error) {
	pk := c.pauseKey(method)
	if c.Pacer != nil {
		if err := c.Pacer.Wait(ctx, pk); err != nil {
			return nil, clientError(ctx, err)
		}
	}
	if err := c.waitPause(ctx, pk); err != nil {
		return nil, err
	}
	acquire := func() error {
		if c.Concurrency == nil {
			return nil
		}
		if err := c.Concurrency.Acquire(ctx); err != nil {
			return clientError(ctx, err)
		}
		return nil
	}
	release := func() {
		if c.Concurrency != nil {
			c.Concurrency.Release()
		}
	}
	// The permit first: a call refused a permit has spent nothing of the
	// limiter, whose event cannot be given back once its turn has come.
	if err := acquire(); err != nil {
		return nil, err
	}
	if c.Limiter != nil {
		key := method
		if c.Key != nil {
			key = c.Key(ctx, method)
		}
		if err := c.Limiter.Wait(ctx, key); err != nil {
			release()
			return nil, clientError(ctx, err) // the limiter gave its booking back
		}
	}
	// A pause may have begun while this call waited: wait it out holding
	// no permit (the limiter's event is spent), then send.
	for {
		if _, paused := c.pausedUntil(pk); !paused {
			return release, nil
		}
		release()
		if err := c.waitPause(ctx, pk); err != nil {
			return nil, err
		}
		if err := acquire(); err != nil {
			return nil, err
		}
	}
}

// after records the pause a failed call's RetryInfo asks for.
func (c *Client) after(method string, err error) {
	if err == nil || c.MaxPause < 0 {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return
	}
	d, ok := retryDelay(st)
	if !ok {
		return
	}
	c.notePause(c.pauseKey(method), d)
}

const maxDelaySeconds = math.MaxInt64/int64(time.Second) - 1

// retryDelay returns the delay of st's first RetryInfo, if it has a valid,
// positive one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, det := range st.Details() {
		ri, ok := det.(*errdetails.RetryInfo)
		if !ok {
			continue
		}
		rd := ri.GetRetryDelay()
		secs, nanos := rd.GetSeconds(), rd.GetNanos()
		switch {
		case secs < 0 || nanos < 0 || nanos >= 1e9 || secs == 0 && nanos == 0:
			return 0, false // negative, malformed or none
		case secs >= maxDelaySeconds:
			return math.MaxInt64, true // beyond a Duration, beyond any MaxPause
		}
		return time.Duration(secs)*time.Second + time.Duration(nanos), true
	}
	return 0, false
}

func (c *Client) maxPause() time.Duration {
	if c.MaxPause == 0 {
		return DefaultMaxPause
	}
	return c.MaxPause
}

func (c *Client) notePause(key string, d time.Duration) {
	now := c.clock().Now()
	until := now.Add(min(d, c.maxPause()))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(map[string]time.Time)
	}
	if _, ok := c.paused[key]; !ok && len(c.paused) >= maxPauses/2 {
		for k, u := range c.paused { // drop pauses that are over
			if !u.After(now) {
				delete(c.paused, k)
			}
		}
		if len(c.paused) >= maxPauses {
			return
		}
	}
	if until.After(c.paused[key]) {
		c.paused[key] = until
	}
}

func (c *Client) pauseKey(method string) string {
	if c.Pause == PauseService {
		if i := strings.LastIndexByte(method, '/'); i >= 0 {
			return method[:i+1]
		}
	}
	return method
}

func (c *Client) clock() ratelimit.Clock {
	if c.Clock == nil {
		return ratelimit.SystemClock()
	}
	return c.Clock
}

// PausedUntil returns the time until which calls of fullMethod are held
// because of a server's RetryInfo, and whether they are.
func (c *Client) PausedUntil(fullMethod string) (time.Time, bool) {
	return c.pausedUntil(c.pauseKey(fullMethod))
}

func (c *Client) pausedUntil(key string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.paused[key]
	if !ok || !until.After(c.clock().Now()) {
		return time.Time{}, false
	}
	return until, true
}

// waitPause blocks until calls under key are not paused.
func (c *Client) waitPause(ctx context.Context, key string) error {
	clock := c.clock()
	for {
		until, paused := c.pausedUntil(key)
		if !paused {
			if err := ctx.Err(); err != nil {
				return clientError(ctx, err)
			}
			return nil
		}
		d := until.Sub(clock.Now())
		// A deadline is an instant of real time, as for Limiter.WaitN.
		if dl, ok := ctx.Deadline(); ok && d > time.Until(dl) {
			return clientError(ctx, &ratelimit.LimitError{RetryAfter: d, Deadline: true})
		}
		timer := clock.NewTimer(d)
		select {
		case <-timer.C():
			// The pause may have been extended meanwhile: look again.
		case <-ctx.Done():
			timer.Stop()
			return clientError(ctx, ctx.Err())
		}
	}
}

// statusError is an error that gRPC reads as a status and errors.Is and
// errors.As read as the error it wraps.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string              { return e.st.Message() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Unwrap() error              { return e.err }

// clientError gives err, which kept a call from being sent, a status.
func clientError(ctx context.Context, err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, ratelimit.ErrLimited), errors.Is(err, ratelimit.ErrBulkheadFull):
		code = codes.ResourceExhausted
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		code = status.FromContextError(err).Code()
	default:
		code = codes.Unavailable
	}
	return &statusError{st: status.New(code, "grpclimit: call not sent: "+strings.TrimPrefix(err.Error(), "ratelimit: ")), err: err}
}
