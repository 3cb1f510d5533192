package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// bulkhead returns a *ratelimit.Bulkhead of limit permits.
func bulkhead(t testing.TB, limit int) *ratelimit.Bulkhead {
	t.Helper()
	b, err := ratelimit.NewBulkhead(limit)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// blocking returns a handler that signals when it starts and returns when
// released.
func blocking() (h http.Handler, started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}, 10), make(chan struct{})
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		w.WriteHeader(200)
	})
	return h, started, release
}

func TestConcurrencyMiddleware(t *testing.T) {
	sem := bulkhead(t, 2)
	next, started, release := blocking()
	h := ConcurrencyMiddleware(sem, WithRetryAfter(1500*time.Millisecond))(next)
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(h, "GET", "/", "192.0.2.1:1").Code
		}()
	}
	<-started
	<-started
	w := serve(h, "GET", "/", "192.0.2.1:1")
	if w.Code != 503 || w.Header().Get("Retry-After") != "2" || w.Body.String() != "service busy, retry after 2s\n" {
		t.Errorf("full: %d %v %q", w.Code, w.Header(), w.Body.String())
	}
	if sem.InFlight() != 2 {
		t.Errorf("a refused request holds a permit: %d in flight", sem.InFlight())
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("admitted request: %d", c)
		}
	}
	if sem.InFlight() != 0 {
		t.Errorf("%d permits leaked", sem.InFlight())
	}
}

func TestConcurrencyMiddlewareReleasesOnPanic(t *testing.T) {
	sem := bulkhead(t, 1)
	h := ConcurrencyMiddleware(sem)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() { recover() }()
		serve(h, "GET", "/", "192.0.2.1:1")
	}()
	if sem.InFlight() != 0 {
		t.Error("a panicking handler leaked its permit")
	}
}

func TestConcurrencyMiddlewareWait(t *testing.T) {
	sem := bulkhead(t, 1)
	next, started, release := blocking()
	h := ConcurrencyMiddleware(sem, WithWait())(next)
	first := make(chan int, 1)
	go func() { first <- serve(h, "GET", "/", "192.0.2.1:1").Code }()
	<-started
	second := make(chan int, 1)
	go func() { second <- serve(h, "GET", "/", "192.0.2.1:1").Code }()
	select {
	case c := <-second:
		t.Fatalf("second request did not wait: %d", c)
	case <-time.After(20 * time.Millisecond):
	}
	release <- struct{}{} // first returns, second takes its permit
	<-started
	release <- struct{}{}
	if a, b := <-first, <-second; a != 200 || b != 200 {
		t.Errorf("codes %d %d", a, b)
	}
	// A waiting request whose context ends gets 503.
	sem.TryAcquire()
	r, cancel := withTimeout(10 * time.Millisecond)
	defer cancel()
	w := serveRequest(h, r)
	if w.Code != 503 {
		t.Errorf("wait cut short: %d", w.Code)
	}
}

func TestConcurrencyMiddlewareProblemJSON(t *testing.T) {
	sem := bulkhead(t, 1)
	sem.TryAcquire()
	w := serve(ConcurrencyMiddleware(sem, WithProblemJSON())(okHandler), "GET", "/", "192.0.2.1:1")
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 503 ||
		p["type"] != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" || p["status"] != 503.0 {
		t.Errorf("%d %q %v", w.Code, w.Body.String(), err)
	}
	w = serve(ConcurrencyMiddleware(sem, WithBusyHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) }))(okHandler), "GET", "/", "192.0.2.1:1")
	if w.Code != 599 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("busy handler: %d %v", w.Code, w.Header())
	}
}

func withTimeout(d time.Duration) (*http.Request, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.RemoteAddr = "192.0.2.1:1"
	return r, cancel
}

func serveRequest(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
