package httplimit

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// DefaultMaxPause is the longest a Transport holds requests after a
// server's Retry-After, unless its MaxPause says otherwise: a server (or
// something between) asking for days is not obeyed blindly.
const DefaultMaxPause = 10 * time.Minute

// Transport is an http.RoundTripper for calling someone else's API within
// its limits. Before each request it waits out any pause the server asked
// for, then waits on Limiter (Wait, with the request's context), then takes
// a permit of Concurrency, which it holds while the request is in flight:
// until the response body is read to the end or closed, or the round trip
// fails. So close response bodies, as net/http asks anyway, or permits
// leak.
//
// When a response is 429 Too Many Requests or 503 Service Unavailable with
// Retry-After (seconds, or an HTTP date, read against the response's Date
// header when it has one), later requests with the same key are held until
// then, at most MaxPause: those yet to start, and those still waiting on
// the limiter or for a permit, which look again just before sending (the
// limiter's event they already took stays taken). Requests already sent
// cannot be called back. The response itself is returned as is: Transport
// never retries, as only the caller knows whether a request may be sent
// twice.
//
// Waiting follows the request's context: if a pause or the limiter's delay
// would outlast the context's deadline (the time left to it measured in
// real time, whatever the Clock, as ratelimit's WaitN does), RoundTrip
// fails at once with an
// error matching ratelimit.ErrLimited and context.DeadlineExceeded; if the
// context ends during a wait, with its error. Nothing is sent then, the
// request body is closed, and the limiter's booking is given back.
//
// The zero Transport sends through http.DefaultTransport with no limit.
// Set the fields before first use and do not change them afterwards; a
// Transport is safe for concurrent use and must not be copied after first
// use.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Limiter, if not nil, spaces requests: one event per request, keyed
	// by Key.
	Limiter ratelimit.Limiter
	// Key returns the key of a request, for Limiter and for pauses; nil
	// means the request's host (URL.Host, with its port if given).
	Key func(r *http.Request) string
	// Concurrency, if not nil, bounds the requests in flight (across all
	// keys), such as a *ratelimit.Bulkhead.
	Concurrency Concurrency
	// Clock times pauses; nil means ratelimit.SystemClock(). Use the
	// Limiter's clock.
	Clock ratelimit.Clock
	// MaxPause caps the pause after a Retry-After: 0 means
	// DefaultMaxPause; a negative value ignores Retry-After.
	MaxPause time.Duration
	// Pacer, if not nil, spaces the requests of each key so that the
	// quota the server's rate-limit headers say remains lasts until it
	// resets (see Pacer): each request first waits for its turn, and every
	// response's headers are observed. Off by default. Give it the same
	// Clock.
	Pacer *Pacer

	mu     sync.Mutex
	paused map[string]time.Time // key -> hold requests until
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key := req.URL.Host
	if t.Key != nil {
		key = t.Key(req)
	}
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if t.Pacer != nil {
		if err := t.Pacer.Wait(ctx, key); err != nil {
			return fail(err)
		}
	}
	if err := t.waitPause(ctx, key); err != nil {
		return fail(err)
	}
	if t.Limiter != nil {
		if err := t.Limiter.Wait(ctx, key); err != nil {
			return fail(err)
		}
	}
	// A pause may have begun while this request waited: look again just
	// before sending, holding no permit while paused.
	for {
		if err := t.waitPause(ctx, key); err != nil {
			return fail(err)
		}
		if t.Concurrency == nil {
			break
		}
		if err := t.Concurrency.Acquire(ctx); err != nil {
			return fail(err)
		}
		if _, paused := t.PausedUntil(key); !paused {
			break
		}
		t.Concurrency.Release()
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		if t.Concurrency != nil {
			t.Concurrency.Release()
		}
		return nil, err
	}
	if t.Pacer != nil {
		t.Pacer.Observe(key, resp.Header)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		t.notePause(key, resp)
	}
	if t.Concurrency != nil {
		resp.Body = holdPermit(resp.Body, t.Concurrency.Release)
	}
	return resp, nil
}

func (t *Transport) clock() ratelimit.Clock {
	if t.Clock == nil {
		return ratelimit.SystemClock()
	}
	return t.Clock
}

// PausedUntil returns the time until which requests with key are held
// because of a server's Retry-After, and whether they are.
func (t *Transport) PausedUntil(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.paused[key]
	if ok && !until.After(t.clock().Now()) {
		return time.Time{}, false
	}
	return until, ok
}

// waitPause blocks until key is not paused.
func (t *Transport) waitPause(ctx context.Context, key string) error {
	clock := t.clock()
	for {
		until, paused := t.PausedUntil(key)
		if !paused {
			return ctx.Err()
		}
		d := until.Sub(clock.Now())
		// A deadline is an instant of real time, as for Limiter.WaitN.
		if dl, ok := ctx.Deadline(); ok && d > time.Until(dl) {
			return &ratelimit.LimitError{RetryAfter: d, Deadline: true}
		}
		timer := clock.NewTimer(d)
		select {
		case <-timer.C():
			// The pause may have been extended meanwhile: look again.
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

// notePause records the pause a 429 or 503 response asks for.
func (t *Transport) notePause(key string, resp *http.Response) {
	maxPause := t.MaxPause
	if maxPause < 0 {
		return
	}
	if maxPause == 0 {
		maxPause = DefaultMaxPause
	}
	now := t.clock().Now()
	d, ok := retryAfter(resp.Header, now)
	if !ok || d <= 0 {
		return
	}
	until := now.Add(min(d, maxPause))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.paused == nil {
		t.paused = make(map[string]time.Time)
	}
	for k, u := range t.paused { // drop pauses that are over
		if !u.After(now) {
			delete(t.paused, k)
		}
	}
	if until.After(t.paused[key]) {
		t.paused[key] = until
	}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date. A
// date is measured from the response's Date if it has one (so that the
// two clocks need not agree), else from now.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(1<<63-1)/int64(time.Second))) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		return at.Sub(date), true
	}
	return at.Sub(now), true
}

// holdPermit returns body wrapped to call release once, at the end of the
// body or when it is closed, whichever comes first.
func holdPermit(body io.ReadCloser, release func()) io.ReadCloser {
	if body == nil || body == http.NoBody {
		release()
		return body
	}
	pb := &permitBody{ReadCloser: body, release: release}
	if rw, ok := body.(io.ReadWriteCloser); ok { // a 101 Switching Protocols body
		return &permitRWBody{permitBody: pb, w: rw}
	}
	return pb
}

type permitBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *permitBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *permitBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

type permitRWBody struct {
	*permitBody
	w io.Writer
}

func (b *permitRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }
