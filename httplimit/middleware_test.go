package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/field"
)

// t0 is where the manual clocks of these tests start.
var t0 = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

func tokenBucket(t testing.TB, rate ratelimit.Rate, capacity int, clock ratelimit.Clock) *ratelimit.TokenBucket {
	t.Helper()
	tb, err := ratelimit.NewTokenBucket(rate, capacity, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func serve(h http.Handler, method, path, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkHeaders compares the rate-limit headers of w with want, where ""
// means absent.
func checkHeaders(t *testing.T, step string, w *httptest.ResponseRecorder, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := w.Header().Values(k)
		if v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Errorf("%s: %s = %q, want %q", step, k, got, v)
		}
	}
}

func TestMiddlewareHeaders(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 2, clock)
	h := Middleware(lim, WithPolicy("api", 2*time.Second))(okHandler)
	steps := []struct {
		at     time.Duration
		status int
		limit  string
		retry  string
		body   string
	}{
		{0, 200, `"api";r=1;t=1`, "", "ok\n"},
		{0, 200, `"api";r=0;t=2`, "", "ok\n"},
		{0, 429, `"api";r=0;t=1`, "1", "too many requests, retry after 1s\n"},
		{500 * time.Millisecond, 429, `"api";r=0;t=1`, "1", "too many requests, retry after 1s\n"},
		{time.Second, 200, `"api";r=0;t=2`, "", "ok\n"},
		{4 * time.Second, 200, `"api";r=1;t=1`, "", "ok\n"},
	}
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		w := serve(h, "GET", "/", "192.0.2.1:1234")
		step := fmt.Sprintf("step %d at %v", i, s.at)
		if w.Code != s.status || w.Body.String() != s.body {
			t.Errorf("%s: %d %q, want %d %q", step, w.Code, w.Body.String(), s.status, s.body)
		}
		checkHeaders(t, step, w, map[string]string{
			"RateLimit-Policy": `"api";q=2;w=2`, "RateLimit": s.limit, "Retry-After": s.retry,
			"X-RateLimit-Limit": "",
		})
	}
	// Another client has its own allowance.
	if w := serve(h, "GET", "/", "192.0.2.2:1234"); w.Code != 200 {
		t.Errorf("second client: %d", w.Code)
	}
}

func TestMiddlewareXRateLimitHeaders(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerMinute(1), 2, clock)
	h := Middleware(lim, WithHeaders(XRateLimitHeaders))(okHandler)
	want := []map[string]string{
		{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60", "RateLimit": "", "RateLimit-Policy": ""},
		{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "120", "Retry-After": ""},
		{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60", "Retry-After": "60"},
	}
	for i, hdr := range want {
		checkHeaders(t, fmt.Sprintf("request %d", i), serve(h, "GET", "/", "192.0.2.1:1"), hdr)
	}
	both := Middleware(tokenBucket(t, ratelimit.PerMinute(1), 2, clock), WithHeaders(IETFHeaders|XRateLimitHeaders))(okHandler)
	checkHeaders(t, "both", serve(both, "GET", "/", "192.0.2.1:1"), map[string]string{
		"RateLimit-Policy": `"default";q=2;w=120`, "RateLimit": `"default";r=1;t=60`, "X-RateLimit-Remaining": "1",
	})
	none := Middleware(tokenBucket(t, ratelimit.PerMinute(1), 1, clock), WithHeaders(0))(okHandler)
	serve(none, "GET", "/", "192.0.2.1:1")
	checkHeaders(t, "none", serve(none, "GET", "/", "192.0.2.1:1"), map[string]string{
		"RateLimit": "", "X-RateLimit-Limit": "", "Retry-After": "60",
	})
}

// Retry-After is honest: the Decision's exact RetryAfter is when a retry
// succeeds (1ns earlier it fails), and the header, in whole seconds, is
// never earlier than that.
func TestMiddlewareRetryAfterIsHonest(t *testing.T) {
	for _, rate := range []ratelimit.Rate{
		ratelimit.Per(3, 2*time.Second), // 666,666,666⅔ns apart
		ratelimit.PerSecond(7),
		ratelimit.PerMinute(1),
		ratelimit.Per(2, 2500*time.Millisecond),
		ratelimit.PerSecond(1000),
	} {
		t.Run(rate.String(), func(t *testing.T) {
			clock := ratelimit.NewManualClock(t0)
			lim := tokenBucket(t, rate, 1, clock)
			var denied Denial
			h := Middleware(lim, WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
				denied = d
				deniedText(w, r, d)
			}))(okHandler)
			if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 {
				t.Fatalf("first: %d", w.Code)
			}
			clock.Advance(rate.Period / time.Duration(3*rate.N)) // off the whole seconds
			w := serve(h, "GET", "/", "192.0.2.1:1")
			retry := denied.RetryAfter
			if w.Code != 429 || retry <= 0 {
				t.Fatalf("second: %d, %+v", w.Code, denied)
			}
			secs, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
			if err != nil || time.Duration(secs)*time.Second < retry || time.Duration(secs-1)*time.Second >= retry {
				t.Fatalf("Retry-After %q for an exact delay of %v", w.Header().Get("Retry-After"), retry)
			}
			clock.Advance(retry - 1)
			if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 429 {
				t.Fatalf("1ns before RetryAfter (%v): %d", retry, w.Code)
			}
			clock.Advance(1)
			if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 {
				t.Fatalf("at RetryAfter (%v): %d", retry, w.Code)
			}
		})
	}
}

// Retrying after the Retry-After header's whole seconds succeeds.
func TestMiddlewareRetryAfterHeaderWorks(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	h := Middleware(tokenBucket(t, ratelimit.Per(3, 2*time.Second), 1, clock))(okHandler)
	serve(h, "GET", "/", "192.0.2.1:1")
	clock.Advance(123 * time.Millisecond)
	w := serve(h, "GET", "/", "192.0.2.1:1")
	secs, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != 429 || secs != 1 {
		t.Fatalf("%d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	clock.Advance(time.Duration(secs) * time.Second)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 {
		t.Errorf("after Retry-After: %d", w.Code)
	}
}

func TestMiddlewareProblemJSON(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	h := Middleware(tokenBucket(t, ratelimit.PerSecond(1), 1, clock), WithPolicy("api", time.Second), WithProblemJSON())(okHandler)
	serve(h, "GET", "/", "192.0.2.1:1")
	w := serve(h, "GET", "/", "192.0.2.1:1")
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":             "Too Many Requests",
		"status":            429.0,
		"detail":            "retry after 1 seconds",
		"violated-policies": []any{"api"},
	}
	if fmt.Sprint(p) != fmt.Sprint(want) {
		t.Errorf("problem %v, want %v", p, want)
	}
}

func TestMiddlewareDeniedHandler(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	var got Denial
	h := Middleware(tokenBucket(t, ratelimit.PerSecond(1), 1, clock), WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
		got = d
		w.WriteHeader(http.StatusTeapot)
	}))(okHandler)
	serve(h, "GET", "/", "192.0.2.1:1")
	w := serve(h, "GET", "/", "192.0.2.1:1")
	if w.Code != http.StatusTeapot || got.RetryAfter != time.Second || got.Allowed || len(got.Policies) != 1 || got.Policies[0] != "default" {
		t.Errorf("%d, %+v", w.Code, got)
	}
	if w.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After not set before the denied handler: %q", w.Header().Get("Retry-After"))
	}
}

// failing is a limiter whose backend is down.
type failing struct{ ratelimit.Limiter }

var errDown = errors.New("backend down")

func (failing) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errDown
}

func TestMiddlewareErrors(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 1, clock)

	// No key: refused, never unlimited, even when failing open.
	for _, opts := range [][]LimitOption{nil, {WithFailOpen(nil)}} {
		h := Middleware(lim, append(opts, WithKey(ByHeader("X-Api-Key")))...)(okHandler)
		if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 403 {
			t.Errorf("no key: %d", w.Code)
		}
	}
	// Backend down, failing closed (the default).
	h := Middleware(failing{lim})(okHandler)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 503 || w.Header().Get("RateLimit") != "" {
		t.Errorf("fail closed: %d %v", w.Code, w.Header())
	}
	// Backend down, failing open: served, reported, no headers.
	var reported error
	h = Middleware(failing{lim}, WithFailOpen(func(r *http.Request, err error) { reported = err }))(okHandler)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit") != "" || !errors.Is(reported, errDown) {
		t.Errorf("fail open: %d %v, reported %v", w.Code, w.Header(), reported)
	}
	// A custom error handler sees the error.
	var seen error
	h = Middleware(failing{lim}, WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(500)
	}))(okHandler)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 500 || !errors.Is(seen, errDown) {
		t.Errorf("error handler: %d %v", w.Code, seen)
	}
	defer func() {
		if recover() == nil {
			t.Error("Middleware(nil) did not panic")
		}
	}()
	Middleware(nil)
}

// Over a real loopback connection, the headers arrive as written.
func TestMiddlewareOverTheWire(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 1, clock)
	srv := httptest.NewServer(Middleware(lim, WithPolicy("api", time.Second))(okHandler))
	defer srv.Close()
	var codes []int
	var last *http.Response
	for range 2 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("codes %v", codes)
	}
	for k, v := range map[string]string{"RateLimit-Policy": `"api";q=1;w=1`, "RateLimit": `"api";r=0;t=1`, "Retry-After": "1"} {
		if got := last.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

const socialRules = `
	POST /posts: 1/s per user as posts
	GET /feed:   2/s per ip   as feed
	*:           3/s global   as global
`

func socialMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /posts", okHandler)
	mux.Handle("GET /feed", okHandler)
	mux.Handle("GET /about", okHandler)
	return mux
}

func userHeader(r *http.Request) (string, bool) {
	u := r.Header.Get("X-User") // tests only: a real server authenticates
	return u, u != ""
}

func TestRulesMiddleware(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(socialRules, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	// Wrapping the mux itself: the middleware asks it for the pattern.
	h := RulesMiddleware(rules, WithUser(ByUser(userHeader)))(socialMux())
	policyPosts := `"posts";q=1;w=1, "global";q=3;w=1`
	policyFeed := `"feed";q=2;w=1, "global";q=3;w=1`
	policyGlobal := `"global";q=3;w=1`
	steps := []struct {
		method, path, ip, user string
		status                 int
		policy, limit, retry   string
	}{
		{"POST", "/posts", "192.0.2.1", "alice", 200, policyPosts, `"posts";r=0;t=1`, ""},
		{"POST", "/posts", "192.0.2.1", "alice", 429, policyPosts, `"posts";r=0;t=1`, "1"},
		{"GET", "/feed", "192.0.2.9", "", 200, policyFeed, `"feed";r=1;t=1`, ""},
		{"GET", "/about", "192.0.2.9", "", 200, policyGlobal, `"global";r=0;t=1`, ""},
		// The global limit is spent: bob's post is denied by it alone, and
		// costs bob's own allowance nothing.
		{"POST", "/posts", "192.0.2.2", "bob", 429, policyPosts, `"global";r=0;t=1`, "1"},
		// A per-user class without a user is refused, not unlimited.
		{"POST", "/posts", "192.0.2.3", "", 403, "", "", ""},
		// No route, no rule of its own: the global rule still applies.
		{"GET", "/nowhere", "192.0.2.3", "", 429, policyGlobal, `"global";r=0;t=1`, "1"},
	}
	for i, s := range steps {
		w := serve(h, s.method, s.path, s.ip+":1", "X-User", s.user)
		step := fmt.Sprintf("step %d (%s %s %s)", i, s.method, s.path, s.user)
		if w.Code != s.status {
			t.Errorf("%s: status %d, want %d", step, w.Code, s.status)
		}
		checkHeaders(t, step, w, map[string]string{"RateLimit-Policy": s.policy, "RateLimit": s.limit, "Retry-After": s.retry})
	}
	// bob's denied post left his allowance whole.
	var posts ratelimit.Limiter
	for _, r := range rules.For("POST /posts").Rules() {
		if r.Name == "posts" {
			posts = r.Limiter
		}
	}
	if d, _ := posts.AllowN(context.Background(), "bob", 0); d.Remaining != 1 {
		t.Errorf("bob's posts: %d remaining after a global denial, want 1", d.Remaining)
	}
	clock.Advance(time.Second)
	if w := serve(h, "POST", "/posts", "192.0.2.2:1", "X-User", "bob"); w.Code != 200 {
		t.Errorf("bob after the global refill: %d", w.Code)
	}
}

func TestRulesMiddlewareDenial(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules("POST /posts: 1/s per user as posts\nPOST /posts: 1/min per ip as posts-ip\n*: 1/s global as global", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var got Denial
	mux := http.NewServeMux()
	deny := WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) { got = d; w.WriteHeader(429) })
	// Wrapping the handler: Request.Pattern is set.
	mux.Handle("POST /posts", RulesMiddleware(rules, WithUser(ByUser(userHeader)), deny)(okHandler))
	serve(mux, "POST", "/posts", "192.0.2.1:1", "X-User", "alice")
	w := serve(mux, "POST", "/posts", "192.0.2.1:1", "X-User", "alice")
	// All three deny; Retry-After covers the longest (the per-IP minute)
	// while RateLimit names the strictest.
	if w.Code != 429 || strings.Join(got.Policies, ",") != "posts,posts-ip,global" || got.RetryAfter != time.Minute {
		t.Errorf("%d %+v", w.Code, got)
	}
	checkHeaders(t, "denial", w, map[string]string{"RateLimit": `"posts-ip";r=0;t=60`, "Retry-After": "60"})
}

func TestRulesMiddlewareNoRules(t *testing.T) {
	rules, _ := ratelimit.ParseRules("POST /posts: 1/s per ip")
	h := RulesMiddleware(rules)(socialMux())
	for range 3 {
		if w := serve(h, "GET", "/about", "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("unlimited class: %d %v", w.Code, w.Header())
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("per-user rules without WithUser did not panic")
			}
		}()
		RulesMiddleware(mustRules(t, "*: 1/s per user"))
	}()
	// WithClass overrides the pattern.
	h = RulesMiddleware(rules, WithClass(func(*http.Request) string { return "POST /posts" }))(okHandler)
	serve(h, "GET", "/x", "192.0.2.1:1")
	if w := serve(h, "GET", "/x", "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("WithClass: %d", w.Code)
	}
}

func mustRules(t *testing.T, config string) *ratelimit.Rules {
	t.Helper()
	rs, err := ratelimit.ParseRules(config)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"default":       `"default"`,
		`say "hi" \o/`:  `"say \"hi\" \\o/"`,
		"caf\u00e9\n":   `"caf???"`,
		"POST /posts/*": `"POST /posts/*"`,
	} {
		if got := field.String(in); got != want {
			t.Errorf("field.String(%q) = %s, want %s", in, got, want)
		}
	}
}

// Without a window of its own, the policy takes the limiter's: how long its
// allowance takes to refill. A negative window writes none; a limiter that
// cannot say gets none.
func TestMiddlewarePolicyWindow(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	multi, err := ratelimit.NewMulti(ratelimit.MultiLimit{Limiter: tokenBucket(t, ratelimit.PerSecond(1), 2, clock)})
	if err != nil {
		t.Fatal(err)
	}
	fw, _ := ratelimit.NewFixedWindow(ratelimit.PerMinute(100), ratelimit.WithClock(clock))
	for _, tc := range []struct {
		name string
		lim  ratelimit.Limiter
		opts []LimitOption
		want string
	}{
		{"token bucket", tokenBucket(t, ratelimit.PerSecond(1), 2, clock), nil, `"default";q=2;w=2`},
		{"token bucket, named", tokenBucket(t, ratelimit.Per(3, 2*time.Second), 2, clock), []LimitOption{WithPolicy("api", 0)}, `"api";q=2;w=2`}, // 1⅓s, rounded up
		{"fixed window", fw, nil, `"default";q=100;w=60`},
		{"given", tokenBucket(t, ratelimit.PerSecond(1), 2, clock), []LimitOption{WithPolicy("api", time.Hour)}, `"api";q=2;w=3600`},
		{"none", tokenBucket(t, ratelimit.PerSecond(1), 2, clock), []LimitOption{WithPolicy("api", -1)}, `"api";q=2`},
		{"no Window method", multi, nil, `"default";q=2`},
	} {
		w := serve(Middleware(tc.lim, tc.opts...)(okHandler), "GET", "/", "192.0.2.1:1")
		checkHeaders(t, tc.name, w, map[string]string{"RateLimit-Policy": tc.want})
	}
}
