package redis

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	goredis "github.com/redis/go-redis/v9"
)

// TestMiddlewareWhileRedisIsDown: through httplimit.Middleware, with Redis
// killed, a FailClosed limiter's outage reaches the middleware as an error
// (503 with a Retry-After of at least a second, not a 429 with
// Retry-After 0 that clients would retry at once), and a FailOpen
// limiter's allowed responses do not claim that nothing remains.
func TestMiddlewareWhileRedisIsDown(t *testing.T) {
	srv := ownServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	serve := func(h http.Handler) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(w, r)
		return w
	}
	build := func(p FailurePolicy) http.Handler {
		lim, err := NewTokenBucket(client, ratelimit.PerSecond(5), 10, WithPrefix(testPrefix(t)),
			WithFailurePolicy(p), WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return httplimit.Middleware(lim)(ok)
	}
	closed, open := build(FailClosed), build(FailOpen)
	for _, h := range []http.Handler{closed, open} {
		if w := serve(h); w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit"), "r=9") {
			t.Fatalf("with Redis up: %d %v", w.Code, w.Header())
		}
	}
	srv.kill()
	w := serve(closed)
	retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != http.StatusServiceUnavailable || retry < 1 {
		t.Errorf("FailClosed with Redis down: %d, Retry-After %q; want 503 with Retry-After >= 1", w.Code, w.Header().Get("Retry-After"))
	}
	w = serve(open)
	if w.Code != 200 || strings.Contains(w.Header().Get("RateLimit"), "r=0") {
		t.Errorf("FailOpen with Redis down: %d, RateLimit %q; want 200 without r=0", w.Code, w.Header().Get("RateLimit"))
	}
}

// TestMiddlewareSettlesOnRedis: through httplimit.Middleware with
// WithCost, a Redis limiter's charge is a booking the handler settles,
// and the headers show the settled state. A bucket of 10 refilled at 10
// an hour (so the milliseconds the test takes refill nothing): a request
// charged 5 and settled at 2 leaves 8; one charged 3 and settled at 6
// leaves 2; one charged 3 is then denied, and one charged 2 allowed.
func TestMiddlewareSettlesOnRedis(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	lim, err := NewTokenBucket(client, ratelimit.PerHour(10), 10, WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.Middleware(lim, httplimit.WithCost(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
		return n
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("X-Actual"); a != "" {
			n, _ := strconv.Atoi(a)
			if err := httplimit.Settle(r, n); err != nil {
				t.Errorf("Settle(%d): %v", n, err)
			}
		}
	}))
	for i, s := range []struct {
		cost, actual string
		code         int
		remaining    string
	}{{"5", "2", 200, "r=8"}, {"3", "6", 200, "r=2"}, {"3", "", 429, "r=2"}, {"2", "", 200, "r=0"}} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("X-Cost", s.cost)
		if s.actual != "" {
			r.Header.Set("X-Actual", s.actual)
		}
		h.ServeHTTP(w, r)
		if w.Code != s.code || !strings.Contains(w.Header().Get("RateLimit"), s.remaining+";") {
			t.Errorf("step %d (cost %s, actual %q): %d RateLimit %q, want %d with %s", i, s.cost, s.actual, w.Code, w.Header().Get("RateLimit"), s.code, s.remaining)
		}
	}
}
