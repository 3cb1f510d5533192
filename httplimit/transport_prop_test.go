package httplimit

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// countingLimiter counts the events its limiter let happen: Waits that
// returned nil. (A Wait that fails takes nothing, by the Limiter contract.)
type countingLimiter struct {
	ratelimit.Limiter
	taken atomic.Int64
}

func (c *countingLimiter) Wait(ctx context.Context, key string) error {
	err := c.Limiter.Wait(ctx, key)
	if err == nil {
		c.taken.Add(1)
	}
	return err
}

// The Transport's bound, on random interleavings of requests, contexts
// ending at random moments, pauses and a clock that moves on: every event
// the limiter let happen belongs to a request handed to Base (nothing
// taken for a request not sent), never more than the bulkhead's limit are
// in flight, and every permit comes back. Seeded: a failing seed reproduces its choices (the
// goroutines' schedule varies, and the bound holds for any).
func TestTransportNeverTakesForNothing(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		clock := ratelimit.NewManualClock(t0)
		lim := &countingLimiter{Limiter: tokenBucket(t, ratelimit.PerSecond(2), 2, clock)}
		sem := bulkhead(t, 1+rng.IntN(3))
		var sent, inFlight, maxInFlight atomic.Int64
		var mu sync.Mutex
		answers := make([]int, 64) // the server's answers, chosen up front
		for i := range answers {
			answers[i] = []int{200, 200, 200, 429}[rng.IntN(4)]
		}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n := sent.Add(1)
			if f := inFlight.Add(1); f > maxInFlight.Load() {
				maxInFlight.Store(f)
			}
			defer inFlight.Add(-1)
			mu.Lock()
			code := answers[int(n-1)%len(answers)]
			mu.Unlock()
			h := http.Header{}
			if code == 429 {
				h.Set("Retry-After", "1")
			}
			return &http.Response{StatusCode: code, Header: h, Body: http.NoBody, Request: r}, nil
		})
		tr := &Transport{Base: base, Limiter: lim, Concurrency: sem, Clock: clock}
		const requests = 24
		var wg sync.WaitGroup
		cancels := make([]context.CancelFunc, requests)
		for i := range requests {
			ctx, cancel := context.WithCancel(context.Background())
			cancels[i] = cancel
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.example.com/x", nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		// Move the clock on and end contexts in a random order.
		order := rng.Perm(requests)
		for _, i := range order {
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			clock.Advance(time.Duration(rng.IntN(600)) * time.Millisecond)
			if rng.IntN(3) == 0 {
				cancels[i]()
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
	drain:
		for {
			select {
			case <-done:
				break drain
			case <-time.After(time.Millisecond):
				clock.Advance(time.Second) // the rest go, or end
			}
		}
		for _, c := range cancels {
			c()
		}
		if taken := lim.taken.Load(); taken != sent.Load() {
			t.Errorf("seed %d: the limiter let %d events happen for %d requests sent", seed, taken, sent.Load())
		}
		if maxInFlight.Load() > int64(sem.Limit()) || sem.InFlight() != 0 || sem.Waiting() != 0 {
			t.Errorf("seed %d: %d in flight at most (limit %d); %d in flight and %d waiting at the end", seed, maxInFlight.Load(), sem.Limit(), sem.InFlight(), sem.Waiting())
		}
		if sent.Load() == 0 {
			t.Errorf("seed %d: nothing sent: the test does not test", seed)
		}
	}
}
