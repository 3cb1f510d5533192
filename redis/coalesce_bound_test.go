package redis

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestBoundsThroughBatches: random concurrent callers (Take and Reserve of
// random sizes on one key) whose decisions go out in batches; each
// algorithm's bound (see bound_test.go) must hold over the instants at
// which the booked events act, as recorded by the callers. Two modes: the
// callers queued behind a held batcher in order while the clock moves
// between them (batches with several instants), and free-running
// goroutines with a pipeline depth of 1 on a clock fixed per round (the
// arrival order up to the scheduler).
func TestBoundsThroughBatches(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(3) {
				mc := ratelimit.NewManualClock(start)
				_, rds := pairFor(t, c.algoCase, mc, client, WithCoalescingLimits(defaultMaxBatch, defaultMaxBytes, 1))
				acted := batchedBoundTrace(t, c, mc, rds, seed)
				if err := c.check(acted); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
}

func batchedBoundTrace(t *testing.T, c boundCase, mc *ratelimit.ManualClock, rds ratelimit.Limiter, seed uint64) []booked {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 77))
	b := batcherOf(t, rds)
	var mu sync.Mutex
	var acted []booked
	call := func(take bool, n int) {
		var res *ratelimit.Reservation
		var err error
		if take {
			res, err = rds.(ratelimit.Taker).Take(ctx, "k", n)
		} else {
			res, err = rds.Reserve(ctx, "k", n)
		}
		if err != nil {
			t.Error(err)
			return
		}
		if res.OK() {
			mu.Lock()
			acted = append(acted, booked{res.TimeToAct().UnixNano(), n})
			mu.Unlock()
		}
	}
	for round := range 30 {
		size := 1 + rng.IntN(16)
		var wg sync.WaitGroup
		ordered := round%2 == 0
		if ordered {
			waitIdle(b)
			hold(b)
		}
		for i := range size {
			take, n := rng.IntN(3) > 0, 1+rng.IntN(c.limit)
			if ordered && rng.IntN(2) == 0 {
				mc.Advance(time.Duration(rng.Int64N(int64(c.step)/2 + 1)))
			}
			wg.Add(1)
			go func() { defer wg.Done(); call(take, n) }()
			if ordered {
				waitQueued(b, i+1)
			}
		}
		if ordered {
			release(b)
		}
		wg.Wait()
		mc.Advance(time.Duration(rng.Int64N(int64(c.step)*2 + 1)))
	}
	if b.q.multi.Load() == 0 {
		t.Fatal("no batch of several decisions ran")
	}
	return acted
}
