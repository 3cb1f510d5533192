package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// End to end, in real time: our own middleware (200 requests a second in
// bursts of 200) behind a loopback server, and a client driven well above
// that (4 goroutines sending 260 requests as fast as they can). With
// pacing, it gets no 429 and keeps close to the allowed rate; without, it
// gets 429s. About 1.3s per paced run, and a fraction of a second
// unpaced.
func TestPacingEndToEnd(t *testing.T) {
	const rate, requests, workers = 200, 260, 4
	// run sends n requests from the workers, stopping early at the first
	// 429 if untilLimited.
	run := func(t *testing.T, headers Headers, pacer *Pacer, n int64, untilLimited bool) (ok, limited int64, elapsed time.Duration) {
		lim, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), rate)
		if err != nil {
			t.Fatal(err)
		}
		hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		srv := httptest.NewServer(Middleware(lim, WithKey(Constant("all")), WithHeaders(headers))(hello))
		defer srv.Close()
		client := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Pacer: pacer, MaxPause: -1}, Timeout: 10 * time.Second}
		var okN, limitedN atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= n && !(untilLimited && limitedN.Load() > 0) {
					resp, err := client.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						okN.Add(1)
					case http.StatusTooManyRequests:
						limitedN.Add(1)
					default:
						t.Errorf("status %d", resp.StatusCode)
					}
				}
			})
		}
		wg.Wait()
		return okN.Load(), limitedN.Load(), time.Since(start)
	}
	for _, tc := range []struct {
		name    string
		headers Headers
	}{
		{"RateLimit", IETFHeaders},
		{"X-RateLimit", XRateLimitHeaders},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, limited, elapsed := run(t, tc.headers, &Pacer{}, requests, false)
			// No conforming client can be faster than the burst plus the
			// rest at the rate; the pacer spreads the whole quota instead
			// of spending the burst, so about requests/rate. Generous
			// bounds on a shared machine: at least half the allowed rate.
			fastest := time.Duration(requests-rate) * time.Second / rate
			slowest := 2 * time.Duration(requests) * time.Second / rate
			if limited != 0 || ok != requests {
				t.Errorf("paced: %d served, %d refused with 429; want all %d served", ok, limited, requests)
			}
			if elapsed < fastest || elapsed > slowest {
				t.Errorf("paced: %d requests in %v, want within [%v, %v]", requests, elapsed, fastest, slowest)
			}
			t.Logf("paced: %d requests in %v (%.0f/s, allowed %d/s)", requests, elapsed, float64(requests)/elapsed.Seconds(), rate)
		})
	}
	// Unpaced, the same client meets 429s: it sends until the first one
	// (within 20 times as many requests, however slow the machine).
	t.Run("unpaced", func(t *testing.T) {
		ok, limited, elapsed := run(t, IETFHeaders, nil, 20*requests, true)
		if limited == 0 {
			t.Errorf("unpaced: %d served in %v, no 429", ok, elapsed)
		}
		t.Logf("unpaced: first 429 after %d served in %v", ok, elapsed)
	})
}

// Through Transport, on a manual clock: the headers of a response pace the
// next request; a request whose turn would come after its deadline fails
// at once, unsent; a request to another host is not held.
func TestTransportPacing(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("RateLimit", `"api";r=1;t=60`)
	}))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	clock := ratelimit.NewManualClock(paceT0)
	tr := &Transport{Base: srv.Client().Transport, Clock: clock, Pacer: &Pacer{Clock: clock}}
	client := &http.Client{Transport: tr}
	get := func(ctx context.Context, url string) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	// The first paced turn is at once; the one after is 60s away.
	if err := get(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := get(short, srv.URL)
	if !errors.Is(err, ratelimit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a turn 60s away on a 100ms deadline: %v", err)
	}
	if hits.Load() != 2 {
		t.Errorf("server saw %d requests, want 2", hits.Load())
	}
	if err := get(context.Background(), other.URL); err != nil {
		t.Errorf("another host: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- get(context.Background(), srv.URL) }()
	for clock.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(60 * time.Second)
	if err := <-done; err != nil || hits.Load() != 3 {
		t.Errorf("after the spacing: %v, %d requests", err, hits.Load())
	}
}

// A request not sent (here, its limiter wait would outlast its deadline)
// gives its paced turn back: the next request does not wait for it.
func TestTransportPacingGivesBackTurn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	clock := ratelimit.NewManualClock(paceT0)
	lim, _ := ratelimit.NewTokenBucket(ratelimit.Every(time.Hour), 1, ratelimit.WithClock(clock))
	lim.Allow(HostKey(mustURL(t, srv.URL))) // the limiter's one token is spent
	p := &Pacer{Clock: clock}
	tr := &Transport{Base: srv.Client().Transport, Clock: clock, Limiter: lim, Pacer: p}
	key := HostKey(mustURL(t, srv.URL))
	p.Observe(key, hdr("RateLimit", `"api";r=1;t=60`)) // turns 60s apart
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(short, "GET", srv.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("limiter wait past the deadline: %v", err)
	}
	if d := p.Reserve(key).Delay(); d != 0 {
		t.Errorf("the unsent request's turn was kept: the next waits %v, want 0", d)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
