package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchServerClock: on the server's clock (production), a batch of
// decisions well within the rate is allowed whole by every algorithm; the
// leaky bucket reads TIME again for each decision on a key the batch has
// decided, as decisions on a key at one instant could not all depart at
// once.
func TestBatchServerClock(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range testAlgorithms {
		rds, err := c.redis(client, ratelimit.PerSecond(1_000_000), 1000, WithPrefix(testPrefix(t)+c.name))
		if err != nil {
			t.Fatal(err)
		}
		b := batcherOf(t, rds)
		hold(b)
		done := make(chan string, 20)
		for i := range 20 {
			go func() {
				d, err := rds.AllowN(context.Background(), fmt.Sprint("k", i%2), 1)
				done <- fmt.Sprintf("%v %+v %v", d.Allowed, d, err)
			}()
			waitQueued(b, i+1)
		}
		release(b)
		for range 20 {
			s := <-done
			if s[:4] != "true" {
				t.Errorf("%s: %s", c.name, s)
			}
		}
	}
}
