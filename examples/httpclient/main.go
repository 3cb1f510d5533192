// Command httpclient calls a rate-limited API through an http.Client whose
// Transport waits on a limiter (5 requests a second per host, no burst) and
// holds a bulkhead permit per request in flight (at most 2), and that stops
// sending to a host for as long as its 429's Retry-After says.
//
// The API is a local server on loopback that takes 300ms per request and
// answers one request with 429 Too Many Requests and Retry-After: 1. The
// program prints when each request left and what came back, in real time.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpclient:", err)
		os.Exit(1)
	}
}

func run() error {
	var served, inFlight, maxInFlight atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(300 * time.Millisecond)
		if served.Add(1) == 4 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "quote of the day\n")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api}
	go srv.Serve(ln)
	defer srv.Close()

	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 1)
	if err != nil {
		return err
	}
	bulkhead, err := ratelimit.NewBulkhead(2)
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport: &httplimit.Transport{Limiter: limiter, Concurrency: bulkhead},
		Timeout:   10 * time.Second,
	}

	fmt.Println("8 requests from 4 goroutines; at most 5/s per host and 2 in flight.")
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				resp, err := client.Get("http://" + ln.Addr().String() + "/quote")
				mu.Lock()
				if err != nil {
					fmt.Printf("  request %d: %v\n", job, err)
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close() // gives the bulkhead permit back
					note := ""
					if ra := resp.Header.Get("Retry-After"); ra != "" {
						note = "  Retry-After: " + ra + " (the transport holds this host)"
					}
					fmt.Printf("  t=%.1fs request %d -> %d%s\n", time.Since(start).Seconds(), job, resp.StatusCode, note)
				}
				mu.Unlock()
			}
		}()
	}
	for job := 1; job <= 8; job++ {
		jobs <- job
	}
	close(jobs)
	wg.Wait()
	fmt.Printf("done in %.1fs; the server saw at most %d requests at once.\n", time.Since(start).Seconds(), maxInFlight.Load())
	return nil
}
