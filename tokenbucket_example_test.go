package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A token bucket of capacity 4 refilled at 2 tokens per second, on a manual
// clock: a burst of 4 passes, the 5th waits half a second.
func ExampleTokenBucket() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 4, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 5; i++ {
		fmt.Println(i, lim.Allow("client-1"))
	}
	d, _ := lim.AllowN(context.Background(), "client-1", 1)
	fmt.Println("retry after", d.RetryAfter)
	clock.Advance(d.RetryAfter)
	fmt.Println("then", lim.Allow("client-1"))
	// Output:
	// 1 true
	// 2 true
	// 3 true
	// 4 true
	// 5 false
	// retry after 500ms
	// then true
}

// Reserve books events ahead; Cancel gives back a booking not yet due.
func ExampleTokenBucket_Reserve() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(4), 1, ratelimit.WithClock(clock))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		r, _ := lim.Reserve(ctx, "job", 1)
		fmt.Println("act in", r.Delay())
		if i == 2 {
			r.Cancel()
		}
	}
	r, _ := lim.Reserve(ctx, "job", 1)
	fmt.Println("after a cancel, act in", r.Delay())
	// Output:
	// act in 0s
	// act in 250ms
	// act in 500ms
	// after a cancel, act in 500ms
}

// A limit per client IP in a plain handler, without httplimit (here on a
// manual clock, so that no token comes back while the burst runs).
func ExampleTokenBucket_perIP() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20, ratelimit.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		if !lim.Allow(ip) {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "hello")
	})

	codes := map[int]int{}
	for i := 0; i < 25; i++ { // a burst of 25 from one address
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "198.51.100.7:4711"
		handler.ServeHTTP(rec, req)
		codes[rec.Code]++
	}
	fmt.Println(codes[http.StatusOK], "ok,", codes[http.StatusTooManyRequests], "too many")
	// Output: 20 ok, 5 too many
}

// SetRate changes a running limiter's rate and capacity: each key keeps
// the tokens it has (capped at the new capacity) and refills at the new
// rate from then on. Reset gives one key its full allowance back.
func ExampleTokenBucket_SetRate() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock))
	ctx := context.Background()
	lim.AllowN(ctx, "user-1", 2) // the burst: empty
	lim.AllowN(ctx, "user-2", 2)

	// During an incident the operator raises the limit, without a restart.
	if err := lim.SetRate(ratelimit.PerSecond(10), 20); err != nil {
		panic(err)
	}
	clock.Advance(500 * time.Millisecond) // 5 tokens at the new rate
	d, _ := lim.AllowN(ctx, "user-1", 0)
	fmt.Println("user-1 after 500ms:", d.Remaining, "of", d.Limit)

	// Support gives user-2 a fresh start.
	lim.Reset("user-2")
	d, _ = lim.AllowN(ctx, "user-2", 0)
	fmt.Println("user-2 after Reset:", d.Remaining, "of", d.Limit)

	// A bad change is refused whole; the limiter keeps serving as it was.
	err := lim.SetRate(ratelimit.PerSecond(10), 0)
	fmt.Println(err)
	fmt.Println("limit still", lim.Limit())
	// Output:
	// user-1 after 500ms: 5 of 20
	// user-2 after Reset: 20 of 20
	// ratelimit: invalid capacity: capacity must be positive, got 0
	// limit still 20
}
