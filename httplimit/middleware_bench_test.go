package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// benchWriter is a ResponseWriter that keeps nothing, so that a benchmark
// measures the handler, not the recorder. Its header map is cleared, not
// replaced, between requests.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(int)             {}

var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })

// roomy is a limiter that never denies in a benchmark's time.
func roomy(b testing.TB) *ratelimit.TokenBucket {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1e9)
	if err != nil {
		b.Fatal(err)
	}
	return tb
}

func benchServe(b *testing.B, h http.Handler, remote string) {
	r := httptest.NewRequest("POST", "/posts", nil)
	r.RemoteAddr = remote
	r.Header.Set("X-User", "alice")
	w := &benchWriter{h: http.Header{}}
	h.ServeHTTP(w, r) // create the key
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// BenchmarkMiddleware measures the middleware's overhead per allowed
// request against the bare handler it wraps.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchServe(b, bareHandler, "192.0.2.1:1234") })
	b.Run("limit/ipv4", func(b *testing.B) {
		benchServe(b, Middleware(roomy(b))(bareHandler), "192.0.2.1:1234")
	})
	b.Run("limit/ipv4+x-headers", func(b *testing.B) {
		benchServe(b, Middleware(roomy(b), WithHeaders(IETFHeaders|XRateLimitHeaders))(bareHandler), "192.0.2.1:1234")
	})
	b.Run("limit/ipv6", func(b *testing.B) {
		benchServe(b, Middleware(roomy(b))(bareHandler), "[2001:db8::1]:1234")
	})
	// A cost per request, booked for a settlement, and settled by the
	// handler before it writes.
	settleHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Settle(r, 2); err != nil {
			b.Fatal(err)
		}
		w.Write([]byte("ok\n"))
	})
	three := WithCost(func(*http.Request) int { return 3 })
	b.Run("limit/ipv4/cost", func(b *testing.B) {
		benchServe(b, Middleware(roomy(b), three)(bareHandler), "192.0.2.1:1234")
	})
	b.Run("limit/ipv4/cost+settle", func(b *testing.B) {
		benchServe(b, Middleware(roomy(b), three)(settleHandler), "192.0.2.1:1234")
	})
	b.Run("rules/3", func(b *testing.B) {
		rules, err := ratelimit.ParseRules(`
			POST /posts: 1000000000/s per user
			POST /posts: 1000000000/s per ip as ip
			*:           1000000000/s global
		`)
		if err != nil {
			b.Fatal(err)
		}
		h := RulesMiddleware(rules, WithUser(ByUser(userHeader)), WithClass(func(*http.Request) string { return "POST /posts" }))(bareHandler)
		benchServe(b, h, "192.0.2.1:1234")
	})
	b.Run("rules/3/cost+settle", func(b *testing.B) {
		rules, err := ratelimit.ParseRules(`
			POST /posts: 1000000000/s per user
			POST /posts: 1000000000/s per ip as ip
			*:           1000000000/s global
		`)
		if err != nil {
			b.Fatal(err)
		}
		h := RulesMiddleware(rules, three, WithUser(ByUser(userHeader)), WithClass(func(*http.Request) string { return "POST /posts" }))(settleHandler)
		benchServe(b, h, "192.0.2.1:1234")
	})
	// The same rules, the class found by matching the rule patterns
	// against the request (as benchServe sends it: GET /, so the "*" rule
	// alone), and against a request of the rules' own class.
	b.Run("rules/3/patterns", func(b *testing.B) {
		rules, err := ratelimit.ParseRules(`
			POST /posts: 1000000000/s per user
			POST /posts: 1000000000/s per ip as ip
			GET /items/{id}: 1000000000/s per ip as items
			*:           1000000000/s global
		`)
		if err != nil {
			b.Fatal(err)
		}
		h := RulesMiddleware(rules, WithUser(ByUser(userHeader)))(bareHandler)
		for _, path := range []string{"/", "/items/7", "/other/path"} {
			b.Run(path, func(b *testing.B) {
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = "192.0.2.1:1234"
				w := &benchWriter{h: http.Header{}}
				b.ReportAllocs()
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, r)
				}
			})
		}
	})
}

// The middleware's allowed path allocates only the headers it writes: one
// string holding every value and one slice backing every header.
func TestMiddlewareAllocations(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := &benchWriter{h: http.Header{}}
	run := func(h http.Handler) float64 {
		h.ServeHTTP(w, r)
		return testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
	}
	bare := run(bareHandler)
	for name, h := range map[string]http.Handler{
		"ietf":      Middleware(roomy(t))(bareHandler),
		"ietf+x":    Middleware(roomy(t), WithHeaders(IETFHeaders|XRateLimitHeaders))(bareHandler),
		"x":         Middleware(roomy(t), WithHeaders(XRateLimitHeaders))(bareHandler),
		"noheaders": Middleware(roomy(t), WithHeaders(0))(bareHandler),
	} {
		want := 2.0
		if name == "noheaders" {
			want = 0
		}
		if got := run(h) - bare; got != want {
			t.Errorf("%s: %v allocations beyond the bare handler, want %v", name, got, want)
		}
	}
}
