package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// A Transport that stops sending to a server that fails every request:
// after the first refusals most requests fail locally with ErrThrottled.
func ExampleTransport_throttle() {
	sent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th, err := ratelimit.NewClientThrottle(2, time.Minute,
		ratelimit.WithThrottleClock(clock),
		ratelimit.WithThrottleRand(func() float64 { return 0.7 })) // fixed, for a deterministic output
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &httplimit.Transport{Throttle: th, Clock: clock, MaxPause: -1}}
	throttled := 0
	for range 10 {
		resp, err := client.Get(srv.URL)
		if errors.Is(err, ratelimit.ErrThrottled) {
			throttled++
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}
	fmt.Printf("sent %d, throttled %d\n", sent, throttled)
	// Output:
	// sent 3, throttled 7
}
