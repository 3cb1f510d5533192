package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// Two requests a second per client address, in bursts of up to two.
func ExampleMiddleware() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 2, ratelimit.WithClock(clock))
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	// The policy's window, w=1, is the limiter's: 2 tokens at 2 a second.
	h := httplimit.Middleware(lim, httplimit.WithPolicy("api", 0))(hello)

	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:4321"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit-Policy: %s RateLimit: %s Retry-After: %q\n", w.Code,
			w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "api";q=2;w=1 RateLimit: "api";r=1;t=1 Retry-After: ""
	// 200 RateLimit-Policy: "api";q=2;w=1 RateLimit: "api";r=0;t=1 Retry-After: ""
	// 429 RateLimit-Policy: "api";q=2;w=1 RateLimit: "api";r=0;t=1 Retry-After: "1"
}

// Several limits per request, from a configuration: a post must pass the
// per-user and the global limit, all or nothing.
func ExampleRulesMiddleware() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rules, err := ratelimit.ParseRules(`
		POST /posts: 1/s      per user as posts
		*:           10,000/s global   as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A real server takes the user from its authentication.
	user := httplimit.ByUser(func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-Demo-User")
		return u, u != ""
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /posts", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	h := httplimit.RulesMiddleware(rules, httplimit.WithUser(user))(mux)

	for _, who := range []string{"alice", "alice", ""} {
		r := httptest.NewRequest("POST", "/posts", nil)
		r.Header.Set("X-Demo-User", who)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%q: %d RateLimit: %s Retry-After: %q\n", who, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
		if w.Code == http.StatusCreated {
			fmt.Println("  RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
		}
	}
	// Output:
	// "alice": 201 RateLimit: "posts";r=0;t=1 Retry-After: ""
	//   RateLimit-Policy: "posts";q=1;w=1, "global";q=10000;w=1
	// "alice": 429 RateLimit: "posts";r=0;t=1 Retry-After: "1"
	// "": 403 RateLimit:  Retry-After: ""
}
