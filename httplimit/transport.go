package httplimit

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
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
// its limits. Before each request it waits for its turn of Pacer, if set,
// then out any pause the server asked for, then takes a permit of
// Concurrency, then waits on Limiter (Wait,
// with the request's context), and sends. It holds the permit while the
// request is in flight: until the response body is read to the end or
// closed, or the round trip fails. So close response bodies, as net/http
// asks anyway, or permits leak. (The permit is taken before the limiter's
// turn so that a request that is not sent can give both back: a limiter's
// event that has come due cannot be; so Concurrency also bounds the
// requests waiting for their turn on the limiter.)
//
// When a response is 429 Too Many Requests or 503 Service Unavailable with
// Retry-After (seconds, or an HTTP date, read against the response's Date
// header when it has one), later requests with the same key are held until
// then, at most MaxPause: those yet to start, and those still waiting on
// the limiter or for a permit, which give back their booking and their
// permit and wait out the pause. Requests already sent cannot be called
// back, and a request whose turn on the limiter came as the pause began
// is sent: its event is spent. The response itself is returned as is: Transport never retries,
// as only the caller knows whether a request may be sent twice.
//
// Waiting follows the request's context: if a pause or the limiter's delay
// would outlast the context's deadline (the time left to it measured in
// real time, whatever the Clock, as ratelimit's WaitN does), RoundTrip
// fails at once with an error matching ratelimit.ErrLimited and
// context.DeadlineExceeded; if the context ends during a wait, with its
// error. A request that is not sent gives back everything it took: its
// limiter booking (as Reservation.Cancel does), its permit and its Pacer
// turn (if no later turn was booked); its body is closed. A request handed to Base counts as sent, even if the round
// trip fails: it may have reached the server, so its limiter event stays
// taken.
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
	// means the request's host as HostKey writes it, so that one server
	// spelt several ways ("API.example.com", "api.example.com:443",
	// "api.example.com.") is one key.
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
	// Throttle, if not nil, rejects requests locally while the server
	// refuses too many of them (see ratelimit.ClientThrottle and
	// Accepted): a rejected request fails at once with an error matching
	// ratelimit.ErrThrottled, before any wait, and is not sent.
	Throttle *ratelimit.ClientThrottle
	// Accepted says whether the server accepted a request, for Throttle;
	// nil means DefaultAccepted.
	Accepted func(resp *http.Response, err error) bool

	mu      sync.Mutex
	paused  map[string]time.Time                // key -> hold requests until
	waiting map[string]map[*turnWaiter]struct{} // key -> requests waiting on the limiter
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var key string
	if t.Key == nil {
		key = HostKey(req.URL)
	} else {
		key = t.Key(req)
	}
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if t.Throttle != nil && !t.Throttle.Allow() {
		return fail(ratelimit.ErrThrottled) // holding nothing; nothing sent
	}
	if t.Pacer != nil {
		giveBack, err := t.Pacer.waitTurn(ctx, key)
		if err != nil {
			return fail(err) // holding nothing; the turn given back
		}
		failed := fail
		fail = func(err error) (*http.Response, error) {
			giveBack() // not sent: the turn is the next request's
			return failed(err)
		}
	}
	release := func() {
		if t.Concurrency != nil {
			t.Concurrency.Release()
		}
	}
	for {
		if err := t.waitPause(ctx, key); err != nil {
			return fail(err) // holding nothing
		}
		if t.Concurrency != nil {
			if err := t.Concurrency.Acquire(ctx); err != nil {
				return fail(err) // holding nothing
			}
		}
		paused, err := t.waitTurn(ctx, key)
		if err != nil {
			release()
			return fail(err) // the limiter gave its booking back
		}
		if !paused {
			break // the turn has come: the request goes
		}
		release() // given back: wait out the pause holding nothing
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	t.recordThrottle(resp, err)
	if err != nil {
		release()
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

// waitTurn waits on the limiter for key's turn. It reports paused when a
// pause of key began before the turn came; then, as when it fails, the
// limiter's booking has been given back. Once the turn has come the
// request is sent, even if a pause begins at that instant: its event is
// spent, as for a request already sent.
func (t *Transport) waitTurn(ctx context.Context, key string) (paused bool, err error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &turnWaiter{cancel: cancel}
	t.addWaiter(key, w)
	defer t.removeWaiter(key, w)
	if _, paused := t.PausedUntil(key); paused {
		return true, nil
	}
	if t.Limiter == nil {
		return false, nil
	}
	err = t.Limiter.Wait(wctx, key)
	if err != nil && ctx.Err() == nil && context.Cause(wctx) == errPaused {
		return true, nil // the pause ended the wait, which gave its booking back
	}
	return false, err
}

// errPaused is the cause of a wait on the limiter that a pause ended.
var errPaused = errors.New("httplimit: paused by a server's Retry-After")

// turnWaiter is a request waiting on the limiter; a pause of its key
// cancels its wait, before notePause returns.
type turnWaiter struct {
	cancel context.CancelCauseFunc
}

func (t *Transport) addWaiter(key string, w *turnWaiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		t.waiting = make(map[string]map[*turnWaiter]struct{})
	}
	ws := t.waiting[key]
	if ws == nil {
		ws = make(map[*turnWaiter]struct{})
		t.waiting[key] = ws
	}
	ws[w] = struct{}{}
}

func (t *Transport) removeWaiter(key string, w *turnWaiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ws := t.waiting[key]
	delete(ws, w)
	if len(ws) == 0 {
		delete(t.waiting, key)
	}
}

// HostKey returns the Transport's default key of a request to u: its host
// in lower case, without a trailing dot, with its port unless it is the
// scheme's default (80 for http, 443 for https). IPv6 addresses keep their
// brackets: "[2001:db8::1]:8443".
func HostKey(u *url.URL) string {
	host, port := u.Hostname(), u.Port()
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if port == "" || port == "80" && u.Scheme == "http" || port == "443" && u.Scheme == "https" {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
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
		for w := range t.waiting[key] {
			w.cancel(errPaused)
		}
	}
}

// retryAfter reads the Retry-After header: delay-seconds or an HTTP date.
// Seconds are a whole number of any length (more than a Duration holds
// reads as the longest Duration); a decimal fraction, which some servers
// send, is honoured to the nanosecond, rounded up. A date is measured from
// the response's Date if it has one (so that the two clocks need not
// agree), else from now; one in the past asks for no pause. A value that
// is neither (a sign, inner spaces, garbage) is ignored. With several
// Retry-After lines, the longest valid one counts.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for _, v := range h.Values("Retry-After") {
		d, ok := parseRetryAfter(strings.TrimSpace(v), h, now)
		if ok && (!found || d > longest) {
			longest, found = d, true
		}
	}
	return longest, found
}

func parseRetryAfter(v string, h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		return at.Sub(date), true // Sub saturates: no overflow either way
	}
	return at.Sub(now), true
}

// parseSeconds reads digits[.digits] as a Duration, saturating at the
// longest Duration, a fraction rounded up to the nanosecond.
func parseSeconds(v string) (time.Duration, bool) {
	const maxD = time.Duration(1<<63 - 1)
	whole, frac, dot := strings.Cut(v, ".")
	if whole == "" || dot && frac == "" || !allDigits(whole) || !allDigits(frac) {
		return 0, false
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 19 { // more than 10^19 seconds: far more than maxD
		return maxD, true
	}
	secs, err := strconv.ParseUint(cmp.Or(whole, "0"), 10, 64)
	if err != nil || secs > uint64(maxD/time.Second) {
		return maxD, true
	}
	d := time.Duration(secs) * time.Second
	var ns time.Duration
	for i := range 9 {
		ns *= 10
		if i < len(frac) {
			ns += time.Duration(frac[i] - '0')
		}
	}
	if len(frac) > 9 && strings.Trim(frac[9:], "0") != "" {
		ns++ // rounded up: never earlier than asked
	}
	if d > maxD-ns {
		return maxD, true
	}
	return d + ns, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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
