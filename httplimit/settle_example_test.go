package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// Downloads charged by their size: 1,000 KB a second per client, in
// bursts of up to 2,000 KB. The size is known only once the handler has
// found the file, so the middleware charges the most a download may be
// (512 KB), and the handler settles the charge at the file's size before
// writing the response: the surplus comes back, and the headers show it.
func ExampleSettle() {
	clock := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 2000, ratelimit.WithClock(clock))
	sizes := map[string]int{"/small.txt": 100, "/large.bin": 500} // KB
	download := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := sizes[r.URL.Path]
		if err := httplimit.Settle(r, size); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%d KB\n", size) // a real handler sends the file
	})
	estimate := httplimit.WithCost(func(*http.Request) int { return 512 })
	h := httplimit.Middleware(lim, estimate, httplimit.WithPolicy("kb", 0))(download)

	for _, path := range []string{"/small.txt", "/large.bin", "/large.bin", "/large.bin", "/large.bin"} {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:4321"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %d RateLimit: %s Retry-After: %q\n", path, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// /small.txt: 200 RateLimit: "kb";r=1900;t=1 Retry-After: ""
	// /large.bin: 200 RateLimit: "kb";r=1400;t=1 Retry-After: ""
	// /large.bin: 200 RateLimit: "kb";r=900;t=2 Retry-After: ""
	// /large.bin: 200 RateLimit: "kb";r=400;t=2 Retry-After: ""
	// /large.bin: 429 RateLimit: "kb";r=400;t=1 Retry-After: "1"
}
