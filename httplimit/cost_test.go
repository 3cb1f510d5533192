package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// costHeader is a cost function that believes the client's X-Cost header
// as it stands, the worst a cost function can do: the tests show what the
// middleware does with every value a client can send.
func costHeader(r *http.Request) int {
	n, err := strconv.Atoi(r.Header.Get("X-Cost"))
	if err != nil {
		return 1
	}
	return n
}

// reply is what a test reads back from a real server.
type reply struct {
	code   int
	body   string
	header http.Header
}

// fetchFrom sends a GET with the given headers to srv and reads the reply.
func fetchFrom(t *testing.T, srv *httptest.Server, path string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, string(body), resp.Header}
}

// logLines collects what the default error handler logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// The cost is charged as n events, all or nothing, and the headers show
// the bucket after the charge. Timeline, a bucket of 10 refilled at 1/s:
//
//	t0  cost 3: 200, r=7 (t: 3s to refill)
//	t0  cost 7: 200, r=0
//	t0  cost 1: 429, Retry-After 1
//	t0  cost 0: 200, free even though the bucket is empty; r=0
//	t0+2s cost 3: 429, RetryAfter 1s (2 tokens, 3 asked), nothing charged
//	t0+3s cost 3: 200, r=0
func TestCostCharged(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 10, clock)
	var handled int
	h := Middleware(lim, WithCost(costHeader), WithPolicy("api", 0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		io.WriteString(w, "ok\n")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	steps := []struct {
		at          time.Duration
		cost        string
		code        int
		limit, wait string
	}{
		{0, "3", 200, `"api";r=7;t=3`, ""},
		{0, "7", 200, `"api";r=0;t=10`, ""},
		{0, "1", 429, `"api";r=0;t=1`, "1"},
		{0, "0", 200, `"api";r=0;t=10`, ""},
		{2 * time.Second, "3", 429, `"api";r=2;t=1`, "1"},
		{3 * time.Second, "3", 200, `"api";r=0;t=10`, ""},
	}
	wantHandled := 0
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		got := fetchFrom(t, srv, "/", "X-Cost", s.cost)
		step := fmt.Sprintf("step %d (cost %s at %v)", i, s.cost, s.at)
		if got.code != s.code {
			t.Fatalf("%s: %d %q, want %d", step, got.code, got.body, s.code)
		}
		if s.code == 200 {
			wantHandled++
		}
		if v := got.header.Get("RateLimit"); v != s.limit {
			t.Errorf("%s: RateLimit %q, want %q", step, v, s.limit)
		}
		if v := got.header.Get("Retry-After"); v != s.wait {
			t.Errorf("%s: Retry-After %q, want %q", step, v, s.wait)
		}
		if v := got.header.Get("RateLimit-Policy"); v != `"api";q=10;w=10` {
			t.Errorf("%s: RateLimit-Policy %q", step, v)
		}
	}
	if handled != wantHandled {
		t.Errorf("handler ran %d times, want %d", handled, wantHandled)
	}
}

// A cost the limit cannot charge is refused loudly, never let through:
// not by the default error handler, not by WithFailOpen, whatever the
// client sends. A negative cost is a 500, one above the limit a 429
// without Retry-After; each is logged once, however many come.
func TestCostRefused(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	for _, fo := range []bool{false, true} {
		t.Run(fmt.Sprintf("failOpen=%v", fo), func(t *testing.T) {
			var log logLines
			opts := []LimitOption{WithCost(costHeader), withLog(log.logf)}
			if fo {
				opts = append(opts, WithFailOpen(func(*http.Request, error) { t.Error("a refused cost was reported as a limiter failure") }))
			}
			lim := tokenBucket(t, ratelimit.PerSecond(1), 10, clock)
			h := Middleware(lim, opts...)(okHandler)
			srv := httptest.NewServer(h)
			defer srv.Close()
			for range 3 {
				got := fetchFrom(t, srv, "/", "X-Cost", "-1")
				if got.code != 500 || got.header.Get("RateLimit") != "" || got.header.Get("Retry-After") != "" {
					t.Errorf("cost -1: %d %q %v", got.code, got.body, got.header)
				}
				got = fetchFrom(t, srv, "/", "X-Cost", "11")
				if got.code != 429 || got.header.Get("Retry-After") != "" || got.header.Get("RateLimit") != "" ||
					got.body != "too many requests: this request costs more than the limit allows at once\n" {
					t.Errorf("cost 11: %d %q %v", got.code, got.body, got.header)
				}
				got = fetchFrom(t, srv, "/", "X-Cost", strconv.Itoa(int(^uint(0)>>1)))
				if got.code != 429 {
					t.Errorf("cost MaxInt: %d %q", got.code, got.body)
				}
			}
			// Nothing was charged: the whole bucket is there.
			if got := fetchFrom(t, srv, "/", "X-Cost", "10"); got.code != 200 {
				t.Errorf("cost 10 after the refusals: %d", got.code)
			}
			lines := log.all()
			if len(lines) != 2 ||
				lines[0] != `httplimit: the cost function returned a negative cost, -1 (GET "/"): refused with 500; later such requests are refused without a log line` ||
				lines[1] != `httplimit: a request cost of 11 is more than the limit allows at once (GET "/"): refused with 429; later such requests are refused without a log line` {
				t.Errorf("log: %q", lines)
			}
		})
	}
}

// A custom error handler gets the refused cost as an error that matches
// ErrInvalidCost and the limiter's own sentinel.
func TestCostErrorMatches(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	var seen []error
	onError := WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = append(seen, err)
		w.WriteHeader(http.StatusTeapot)
	})
	h := Middleware(tokenBucket(t, ratelimit.PerSecond(1), 2, clock), WithCost(costHeader), onError)(okHandler)
	for _, cost := range []string{"-5", "3"} {
		if w := serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", cost); w.Code != http.StatusTeapot {
			t.Errorf("cost %s: %d", cost, w.Code)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("error handler saw %v", seen)
	}
	for i, want := range []error{ratelimit.ErrNegativeN, ratelimit.ErrExceedsLimit} {
		if !errors.Is(seen[i], ErrInvalidCost) || !errors.Is(seen[i], want) {
			t.Errorf("error %d: %v, want ErrInvalidCost and %v", i, seen[i], want)
		}
	}
	if errors.Is(seen[0], ratelimit.ErrExceedsLimit) || errors.Is(seen[1], ratelimit.ErrNegativeN) {
		t.Errorf("errors match both sentinels: %v, %v", seen[0], seen[1])
	}
}

// A negative cost is refused by the middleware itself, before the limiter
// is asked: a limiter of another package might read n < 0 as a give-back.
type recordingLimiter struct {
	ratelimit.Limiter
	mu sync.Mutex
	ns []int
}

func (l *recordingLimiter) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	l.mu.Lock()
	l.ns = append(l.ns, n)
	l.mu.Unlock()
	return l.Limiter.AllowN(ctx, key, n)
}

func TestCostNegativeNeverReachesTheLimiter(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rec := &recordingLimiter{Limiter: tokenBucket(t, ratelimit.PerSecond(1), 5, clock)}
	h := Middleware(rec, WithCost(costHeader), withLog(func(string) {}))(okHandler)
	serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "-2")
	serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "2")
	if fmt.Sprint(rec.ns) != "[2]" {
		t.Errorf("the limiter was asked for %v, want [2]", rec.ns)
	}
}

// Without WithCost a request costs one event, as before; an exempt
// request's cost is never asked for, nor a request's without a key.
func TestCostAskedOnlyWhenCharged(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	asked := 0
	cost := WithCost(func(*http.Request) int { asked++; return 2 })
	h := Middleware(tokenBucket(t, ratelimit.PerSecond(1), 4, clock), cost,
		WithExempt(netip.MustParsePrefix("10.0.0.0/8")), WithKey(ByHeader("X-Key")))(okHandler)
	serve(h, "GET", "/", "10.1.2.3:1", "X-Key", "k") // exempt
	serve(h, "GET", "/", "192.0.2.1:1")              // no key: 403
	w := serve(h, "GET", "/", "192.0.2.1:1", "X-Key", "k")
	if asked != 1 || w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=2;t=2` {
		t.Errorf("cost asked %d times; %d %q", asked, w.Code, w.Header().Get("RateLimit"))
	}
}

// RulesMiddleware charges the one cost under every rule of the request's
// class, all or nothing. Per-IP burst 10 and global burst 6, both 1/s:
//
//	t0 cost 4: 200, ip r=6, global r=2; the strictest, global, is reported
//	t0 cost 3: 429 by global alone (ip has 6); nothing charged on ip
//	t0 cost 2: 200, ip r=4, global r=0
//	t0 cost 7: refused, more than global's burst of 6 (429 without Retry-After)
func TestCostRules(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		GET /items: 10/10s per ip as ip
		*:          6/6s   global as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var denied Denial
	h := RulesMiddleware(rules, WithCost(costHeader), withLog(func(string) {}), WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
		denied = d
		deniedText(w, r, d)
	}))(okHandler)
	srv := httptest.NewServer(h)
	defer srv.Close()
	steps := []struct {
		cost        string
		code        int
		limit, wait string
	}{
		{"4", 200, `"global";r=2;t=4`, ""},
		{"3", 429, `"global";r=2;t=1`, "1"},
		{"2", 200, `"global";r=0;t=6`, ""},
		{"7", 429, "", ""},
	}
	for i, s := range steps {
		got := fetchFrom(t, srv, "/items", "X-Cost", s.cost)
		step := fmt.Sprintf("step %d (cost %s)", i, s.cost)
		if got.code != s.code {
			t.Fatalf("%s: %d %q, want %d", step, got.code, got.body, s.code)
		}
		if v := got.header.Get("RateLimit"); v != s.limit {
			t.Errorf("%s: RateLimit %q, want %q", step, v, s.limit)
		}
		if v := got.header.Get("Retry-After"); v != s.wait {
			t.Errorf("%s: Retry-After %q, want %q", step, v, s.wait)
		}
	}
	if strings.Join(denied.Policies, ",") != "global" {
		t.Errorf("denied by %v, want global alone", denied.Policies)
	}
	// The per-IP rule was charged 4+2 and nothing for the denial: 4 left.
	lim := rules.For("GET /items").Rules()[0].Limiter
	if d, _ := lim.AllowN(t.Context(), "127.0.0.1", 0); d.Remaining != 4 {
		t.Errorf("per-IP rule has %d left, want 4", d.Remaining)
	}
}
