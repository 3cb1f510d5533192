package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// Behind your own load balancers (here 10.0.0.0/8), the client is the
// right-most X-Forwarded-For address that is not one of them; from anyone
// else the header is ignored.
func ExampleClientIP() {
	proxies, err := httplimit.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		fmt.Println(err)
		return
	}
	clientIP, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: proxies, Header: "X-Forwarded-For"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range []struct{ peer, forwarded string }{
		{"10.0.0.5:4000", "198.51.100.7"},                   // through the load balancer
		{"10.0.0.5:4000", "192.0.2.66, 198.51.100.7"},       // the client prepended an address
		{"203.0.113.9:4000", "198.51.100.7"},                // straight from a client
		{"[2001:db8:1:2::99]:4000", ""},                     // IPv6: grouped by /64
		{"10.0.0.5:4000", "2001:db8:1:2:aaaa::1, 10.0.0.6"}, // two proxies
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.forwarded != "" {
			r.Header.Set("X-Forwarded-For", c.forwarded)
		}
		key, err := clientIP(r)
		fmt.Println(key, err)
	}
	// Output:
	// 198.51.100.7 <nil>
	// 198.51.100.7 <nil>
	// 203.0.113.9 <nil>
	// 2001:db8:1:2::/64 <nil>
	// 2001:db8:1:2::/64 <nil>
}

// A client within someone else's API's limits: the server answers 429 with
// Retry-After: 1 once, and the transport holds that host for a second.
func ExampleTransport() {
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer api.Close()

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	limiter, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 1, ratelimit.WithClock(clock))
	bulkhead, _ := ratelimit.NewBulkhead(2)
	tr := &httplimit.Transport{Limiter: limiter, Concurrency: bulkhead, Clock: clock}
	client := &http.Client{Transport: tr}

	get := func() {
		resp, err := client.Get(api.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // gives the bulkhead's permit back
		fmt.Println(resp.Status)
	}
	get()
	host := api.Listener.Addr().String()
	if until, ok := tr.PausedUntil(host); ok {
		fmt.Println("host held for", until.Sub(clock.Now()))
	}
	clock.Advance(time.Second)
	_, held := tr.PausedUntil(host)
	fmt.Println("held after a second:", held)
	get()
	fmt.Println("in flight:", bulkhead.InFlight())
	// Output:
	// 429 Too Many Requests
	// host held for 1s
	// held after a second: false
	// 200 OK
	// in flight: 0
}

// At most one request in flight: a second one, while the first runs, gets
// 503 with Retry-After.
func ExampleConcurrencyMiddleware() {
	bulkhead, _ := ratelimit.NewBulkhead(1)
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done\n")
	})
	h := httplimit.ConcurrencyMiddleware(bulkhead, httplimit.WithRetryAfter(2*time.Second))(slow)

	first := httptest.NewRecorder()
	finished := make(chan struct{})
	go func() {
		h.ServeHTTP(first, httptest.NewRequest("GET", "/report", nil))
		close(finished)
	}()
	<-entered // the first request holds the only permit

	second := httptest.NewRecorder()
	h.ServeHTTP(second, httptest.NewRequest("GET", "/report", nil))
	fmt.Println("second:", second.Code, "Retry-After:", second.Header().Get("Retry-After"))

	close(release)
	<-finished
	fmt.Println("first:", first.Code, "in flight now:", bulkhead.InFlight())
	// Output:
	// second: 503 Retry-After: 2
	// first: 200 in flight now: 0
}
