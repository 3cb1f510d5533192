package httplimit

import (
	"context"
	"net/http"

	"github.com/ratelimitkit/ratelimit"
)

// Concurrency bounds how many calls are in flight at once: a semaphore.
// *ratelimit.Bulkhead implements it, and so does *ratelimit.AdaptiveBulkhead,
// whose limit follows the latency of the calls it admits.
type Concurrency interface {
	// TryAcquire takes a permit if one is free now, and reports whether
	// it did.
	TryAcquire() bool
	// Acquire takes a permit, waiting as the implementation allows; on
	// failure it holds none.
	Acquire(ctx context.Context) error
	// Release gives back a permit taken by TryAcquire or Acquire.
	Release()
}

// ConcurrencyMiddleware returns middleware that holds a permit of c while
// the next handler runs, released when it returns (or panics). When none
// is free it answers at once, or, with WithWait, when Acquire fails (the
// bulkhead's bounds on waiting, or the request's context ending): 503
// Service Unavailable with Retry-After (WithRetryAfter, default 1 second)
// and a one-line body (WithProblemJSON: the draft's
// "temporary-reduced-capacity" problem; WithBusyHandler: your own).
//
// It panics if c is nil.
func ConcurrencyMiddleware(c Concurrency, opts ...ConcurrencyOption) func(http.Handler) http.Handler {
	if c == nil {
		panic("httplimit: ConcurrencyMiddleware with a nil Concurrency")
	}
	cfg := newConcurrencyConfig(opts)
	retryAfter := formatSeconds(cfg.retryAfter)
	busy := cfg.busy
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ok := false
			if cfg.wait {
				ok = c.Acquire(r.Context()) == nil
			} else {
				ok = c.TryAcquire()
			}
			if !ok {
				w.Header()[hdrRetryAfter] = []string{retryAfter}
				busy(w, r)
				return
			}
			defer c.Release()
			next.ServeHTTP(w, r)
		})
	}
}

func busyText(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "service busy, retry after "+w.Header().Get(hdrRetryAfter)+"s", http.StatusServiceUnavailable)
}

func busyProblem(w http.ResponseWriter, r *http.Request) {
	writeProblem(w, problem{
		Type:   problemBaseURI + "temporary-reduced-capacity",
		Title:  "Service Unavailable",
		Status: http.StatusServiceUnavailable,
		Detail: "too many requests in flight; retry after " + w.Header().Get(hdrRetryAfter) + " seconds",
	})
}

// Compile-time checks that both bulkheads are a Concurrency.
var (
	_ Concurrency = (*ratelimit.Bulkhead)(nil)
	_ Concurrency = (*ratelimit.AdaptiveBulkhead)(nil)
)
