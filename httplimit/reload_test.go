package httplimit

import (
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// RulesMiddleware follows a reload of its rules: new classes and rates
// apply from the next request, an unchanged rule keeps its keys' state, a
// refused configuration changes nothing, and under concurrent requests
// (-race) every response describes one whole configuration.
func TestRulesMiddlewareReload(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	const a = "POST /posts: 1/h per ip as posts\n*: 1000000/h global as a-all"
	const b = "POST /posts: 1/h per ip as posts\nGET /feed: 1000000/h global as b-feed\n*: 1000000/h global as b-all"
	rules, err := ratelimit.ParseRules(a, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h := RulesMiddleware(rules)(okHandler)
	if w := serve(h, "POST", "/posts", "192.0.2.1:1"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if w := serve(h, "POST", "/posts", "192.0.2.1:1"); w.Code != 429 {
		t.Fatal(w.Code)
	}
	if err := rules.Reload(b); err != nil {
		t.Fatal(err)
	}
	if w := serve(h, "POST", "/posts", "192.0.2.1:1"); w.Code != 429 {
		t.Fatalf("exhausted before the reload, %d after", w.Code)
	}
	if got := serve(h, "GET", "/feed", "192.0.2.1:1").Header().Get("RateLimit-Policy"); !strings.Contains(got, `"b-feed"`) {
		t.Fatalf("new class not followed: policy %q", got)
	}
	if err := rules.Reload("GET /feed: 1/s per somebody"); err == nil {
		t.Fatal("bad config accepted")
	}
	if got := serve(h, "GET", "/feed", "192.0.2.1:1").Header().Get("RateLimit-Policy"); !strings.Contains(got, `"b-feed"`) {
		t.Fatalf("after a refused reload: policy %q", got)
	}

	// Concurrent requests and reloads.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := serve(h, "GET", "/feed", "192.0.2.9:1").Header().Get("RateLimit-Policy")
				okA := p == `"a-all";q=1000000;w=3600`
				okB := p == `"b-feed";q=1000000;w=3600, "b-all";q=1000000;w=3600`
				if !okA && !okB {
					t.Errorf("goroutine %d: policy %q is neither configuration", g, p)
					return
				}
			}
		}()
	}
	for i := range 200 {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if err := rules.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// A reload to rules the middleware cannot serve (a per-user rule, no
	// WithUser) refuses requests, loudly, rather than let them through.
	var logged []string
	h = RulesMiddleware(rules, withLog(func(s string) { logged = append(logged, s) }))(okHandler)
	if err := rules.Reload("*: 1/h per user"); err != nil {
		t.Fatal(err)
	}
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code == 200 {
		t.Fatalf("per-user rule without WithUser after a reload: %d", w.Code)
	}
	if len(logged) == 0 || !strings.Contains(logged[0], "WithUser") {
		t.Errorf("not logged: %q", logged)
	}
}
