package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Each option reaches exactly the middleware that read it: the types say
// so, and a middleware given an option it does not read would not compile.
func TestOptionsReachTheirMiddleware(t *testing.T) {
	f := func(*http.Request) (string, error) { return "", nil }
	for _, o := range []struct {
		name               string
		opt                any
		limit, rules, conc bool
	}{
		{"WithKey", WithKey(f), true, false, false},
		{"WithPolicy", WithPolicy("p", 0), true, false, false},
		{"WithUser", WithUser(f), true, true, false}, // Middleware: for exemptions
		{"WithClientIP", WithClientIP(f), true, true, false},
		{"WithExempt", WithExempt(), true, true, false},
		{"WithExemptUsers", WithExemptUsers(), true, true, false},
		{"WithClass", WithClass(func(*http.Request) string { return "" }), false, true, false},
		{"WithCost", WithCost(func(*http.Request) int { return 1 }), true, true, false},
		{"WithHeaders", WithHeaders(0), true, true, false},
		{"WithDeniedHandler", WithDeniedHandler(nil), true, true, false},
		{"WithErrorHandler", WithErrorHandler(nil), true, true, false},
		{"WithFailOpen", WithFailOpen(nil), true, true, false},
		{"WithProblemJSON", WithProblemJSON(), true, true, true},
		{"WithBusyHandler", WithBusyHandler(nil), false, false, true},
		{"WithWait", WithWait(), false, false, true},
		{"WithRetryAfter", WithRetryAfter(time.Second), false, false, true},
	} {
		_, limit := o.opt.(LimitOption)
		_, rules := o.opt.(RulesOption)
		_, conc := o.opt.(ConcurrencyOption)
		if limit != o.limit || rules != o.rules || conc != o.conc {
			t.Errorf("%s: Middleware %v, RulesMiddleware %v, ConcurrencyMiddleware %v; want %v %v %v",
				o.name, limit, rules, conc, o.limit, o.rules, o.conc)
		}
	}
}

// noKeyLimiter is a limiter that says the request has no key.
type noKeyLimiter struct{ ratelimit.Limiter }

func (noKeyLimiter) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, fmt.Errorf("%w: no tenant", ErrNoKey)
}

// Both middlewares answer what they cannot decide by one path: a missing
// key or class is refused whatever the failure policy, and a limiter that
// fails is let through only under WithFailOpen, after the report.
func TestUndecidedRequests(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules := func(l ratelimit.Limiter) *ratelimit.Rules {
		rs, err := ratelimit.NewRules([]ratelimit.Rule{
			{Class: "GET /", Rate: ratelimit.PerSecond(1), Burst: 1, Scope: ratelimit.PerIP, Limiter: l},
			{Class: "POST /posts", Rate: ratelimit.PerSecond(1), Scope: ratelimit.PerUser},
		}, ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	noUser := WithUser(func(*http.Request) (string, error) { return "", ErrNoKey })
	var logged []string
	quiet := withLog(func(s string) { logged = append(logged, s) })
	down := failing{tokenBucket(t, ratelimit.PerSecond(1), 1, clock)}
	for _, failOpen := range []bool{false, true} {
		var reported []error
		report := func(r *http.Request, err error) { reported = append(reported, err) }
		var lopts []LimitOption
		ropts := []RulesOption{noUser, quiet}
		if failOpen {
			lopts = append(lopts, WithFailOpen(report))
			ropts = append(ropts, WithFailOpen(report))
		}
		for _, c := range []struct {
			name   string
			h      http.Handler
			method string
			want   int // failing closed; failing open, a limiter error is 200
			limErr bool
		}{
			{"Middleware, no key", Middleware(down, append(lopts, WithKey(ByHeader("X-Key")))...)(okHandler), "GET", 403, false},
			{"Middleware, limiter finds no key", Middleware(noKeyLimiter{down}, lopts...)(okHandler), "GET", 403, false},
			{"Middleware, limiter down", Middleware(down, lopts...)(okHandler), "GET", 503, true},
			{"RulesMiddleware, limiter down", RulesMiddleware(rules(down), ropts...)(okHandler), "GET", 503, true},
			{"RulesMiddleware, limiter finds no key", RulesMiddleware(rules(noKeyLimiter{down}), ropts...)(okHandler), "GET", 403, false},
			{"RulesMiddleware, no user", RulesMiddleware(rules(down), ropts...)(okHandler), "POST", 403, false},
			{"RulesMiddleware, no class", RulesMiddleware(rules(down), append(ropts, WithClass(func(*http.Request) string { return "" }))...)(okHandler), "GET", 500, false},
		} {
			reported = nil
			want := c.want
			if failOpen && c.limErr {
				want = 200
			}
			path := "/"
			if c.method == "POST" {
				path = "/posts"
			}
			w := serve(c.h, c.method, path, "192.0.2.1:1")
			if w.Code != want || w.Header().Get("RateLimit") != "" {
				t.Errorf("fail open %v, %s: %d %v, want %d and no headers", failOpen, c.name, w.Code, w.Header(), want)
			}
			if wantReport := failOpen && c.limErr; (len(reported) == 1 && errors.Is(reported[0], errDown)) != wantReport || len(reported) > 1 {
				t.Errorf("fail open %v, %s: reported %v", failOpen, c.name, reported)
			}
		}
	}
}
