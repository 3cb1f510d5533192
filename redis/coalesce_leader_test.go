package redis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchLeaderGaveUp: a batch is handed to its first caller to send;
// when that caller gives up between the batch's taking and its hand-off,
// the batch still goes out (sent by another of its callers, or on a
// goroutine of its own if none is left) and every other caller of it gets
// its answer, and the queue ends with nothing in flight.
func TestBatchLeaderGaveUp(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	lim, err := NewTokenBucket(client, ratelimit.PerSecond(1000), 1000, WithPrefix(testPrefix(t)),
		WithFailurePolicy(FailClosed), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b := batcherOf(t, lim)
	hold(b)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := lim.AllowN(ctx, "k", 1)
		first <- err
	}()
	waitQueued(b, 1)
	const others = 5
	var wg sync.WaitGroup
	allowed := make(chan bool, others)
	for range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := lim.AllowN(context.Background(), "k", 1)
			if err != nil {
				t.Error(err)
			}
			allowed <- d.Allowed
		}()
	}
	waitQueued(b, 1+others)
	// Take the batch as done would, then let its first caller give up
	// before the hand-off.
	b.q.mu.Lock()
	buf := b.q.take()
	b.q.inflight -= b.q.depth - 1 // end hold; one call counted for buf
	b.q.mu.Unlock()
	if buf == nil || len(buf.ps) != 1+others {
		t.Fatalf("batch of %v", buf)
	}
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the caller that gave up got an answer from Redis")
	}
	b.q.hand(buf)
	wg.Wait()
	close(allowed)
	n := 0
	for a := range allowed {
		if a {
			n++
		}
	}
	if n != others {
		t.Fatalf("%d of %d allowed", n, others)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.q.mu.Lock()
		idle := b.q.inflight == 0 && len(b.q.queue) == 0
		b.q.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a call stays in flight")
		}
	}
}
