package httplimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// A server says 4 requests remain for the next 2 seconds: the pacer
// spaces the next ones 500ms apart. When it says none remain for 30
// seconds, the pacer holds the next request that long.
func ExamplePacer() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := &httplimit.Pacer{Clock: clock}
	const host = "api.example.com"

	h := http.Header{}
	h.Set("RateLimit", `"default";r=4;t=2`)
	p.Observe(host, h)
	for i := 1; i <= 4; i++ {
		fmt.Printf("request %d goes in %v\n", i, p.Reserve(host).Delay())
	}

	clock.Advance(2 * time.Second)
	h.Set("RateLimit", `"default";r=0;t=30`)
	p.Observe(host, h)
	fmt.Println("then in", p.Reserve(host).Delay())
	// Output:
	// request 1 goes in 0s
	// request 2 goes in 500ms
	// request 3 goes in 1s
	// request 4 goes in 1.5s
	// then in 30s
}
