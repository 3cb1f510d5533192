package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchPrefetch checks what a batch's prefetch (one MGET and one
// EXISTS for every call's key, see prefetch in luaPrelude) must keep: each
// decision of a batch that holds a key of another type, keys with state
// and missing keys, in one order or another, is the decision it would have
// been alone, and only the key of another type is reported corrupt.
func TestBatchPrefetch(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	rate := ratelimit.Per(5, time.Minute)
	builds := []struct {
		name string
		sfx  string
		new  func(p string, o ...Option) (ratelimit.Limiter, error)
	}{
		{"TokenBucket", ":tb", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewTokenBucket(c, rate, 5, append(o, WithPrefix(p))...)
		}},
		{"LeakyBucket", ":lb", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewLeakyBucket(c, rate, 5, append(o, WithPrefix(p))...)
		}},
		{"FixedWindow", ":fw", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewFixedWindow(c, rate, append(o, WithPrefix(p))...)
		}},
		{"SlidingWindowCounter", ":swc", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingWindowCounter(c, rate, append(o, WithPrefix(p))...)
		}},
		// The sliding log's string key is its third, the log.
		{"SlidingLog", ":slp", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, rate, append(o, WithPrefix(p))...)
		}},
	}
	// Every order of: a key of another type (w), a key with state (s), a
	// missing key (m), and the key with state again.
	orders := [][]string{{"w", "s", "m", "s"}, {"m", "w", "s", "s"}, {"s", "m", "s", "w"}, {"m", "s", "s", "m"}}
	for _, b := range builds {
		for _, order := range orders {
			t.Run(b.name+"/"+order[0]+order[1]+order[2]+order[3], func(t *testing.T) {
				mc := ratelimit.NewManualClock(start)
				clock := []Option{WithClock(mc), withClockTime(60_000)}
				prefix := testPrefix(t)
				var mu sync.Mutex
				var hooked []string
				lim, err := b.new(prefix, append(clock, WithOnError(func(key string, err error) {
					mu.Lock()
					defer mu.Unlock()
					if errors.Is(err, ErrCorruptState) {
						hooked = append(hooked, key)
					}
				}))...)
				if err != nil {
					t.Fatal(err)
				}
				alone, err := b.new(prefix+"alone:", append(clock, WithCoalescing(false))...)
				if err != nil {
					t.Fatal(err)
				}
				// The same state on both sides: s has two events, w holds
				// a list.
				for _, l := range []ratelimit.Limiter{lim, alone} {
					if d, err := l.AllowN(ctx, "s", 2); err != nil || !d.Allowed {
						t.Fatalf("AllowN: %+v %v", d, err)
					}
				}
				for _, p := range []string{prefix, prefix + "alone:"} {
					if err := c.RPush(ctx, redisKey(p, "w", b.sfx), "x").Err(); err != nil {
						t.Fatal(err)
					}
				}
				bt := batcherOf(t, lim)
				hold(bt)
				got := make([]ratelimit.Decision, len(order))
				errs := make([]error, len(order))
				var wg sync.WaitGroup
				for i, k := range order {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i], errs[i] = lim.AllowN(ctx, k, 1)
					}()
					waitQueued(bt, i+1) // in this order
				}
				releaseBatched(t, bt, &wg, len(order))
				for i, k := range order {
					want, err := alone.AllowN(ctx, k, 1)
					if errs[i] != nil || err != nil || got[i] != want {
						t.Errorf("decision %d (%s) = %+v %v, alone %+v %v", i, k, got[i], errs[i], want, err)
					}
				}
				if wantHooked := slices.Contains(order, "w"); len(hooked) != map[bool]int{true: 1}[wantHooked] || (wantHooked && hooked[0] != "w") {
					t.Errorf("reported corrupt: %q, want the key of another type alone", hooked)
				}
			})
		}
	}
}
