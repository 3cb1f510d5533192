package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestPenaltyBoxCapProperty: over random keys, refusals and time steps
// with a small cap, the table never exceeds its cap, and a block is lifted
// before its end only when every other entry was a block ending no sooner.
func TestPenaltyBoxCapProperty(t *testing.T) {
	total := 0
	defer func() {
		if !t.Failed() && total == 0 {
			t.Error("no block was dropped early: the test does not exercise the cap")
		}
	}()
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		clk := NewManualClock(time.Unix(1_000_000, 0))
		lim := &scripted{clock: clk}
		maxKeys := 1 + rng.IntN(6)
		var box *PenaltyBox
		var cur string // the key being decided: its new entry is not checked
		box, err := NewPenaltyBox(lim, 1+rng.IntN(3), time.Duration(1+rng.IntN(50)), time.Duration(1+rng.IntN(300)),
			WithClock(clk), WithMaxKeys(maxKeys), WithObserver(ObserverFunc(func(e Event) {
				if e.Kind != EventUnblocked || e.RetryAfter == 0 {
					return
				}
				total++
				// Called with the box's lock released: inspect what is left.
				// Every other entry is a block ending no sooner.
				now := box.clock.now()
				for _, o := range box.blocked {
					if o.key != cur && time.Duration(o.until-now) < e.RetryAfter {
						t.Fatalf("seed %d: dropped a block with %v left, kept one with %v", seed, e.RetryAfter, time.Duration(o.until-now))
					}
				}
				for _, o := range box.hist {
					if o.key == cur {
						continue
					}
					t.Fatalf("seed %d: dropped a block while a history was kept", seed)
				}
			})))
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 2000; step++ {
			clk.Advance(time.Duration(rng.IntN(5)))
			lim.ok = rng.IntN(4) == 0
			cur = "k" + strconv.Itoa(rng.IntN(12))
			box.Allow(cur)
			if n := box.Len(); n > maxKeys {
				t.Fatalf("seed %d step %d: %d entries, cap %d", seed, step, n, maxKeys)
			}
			if len(box.keys) != box.hist.Len()+box.blocked.Len() {
				t.Fatalf("seed %d: table %d, heaps %d+%d", seed, len(box.keys), box.hist.Len(), box.blocked.Len())
			}
		}
	}
}

// TestPenaltyBoxConcurrent runs decisions of every kind on a few keys from
// many goroutines (for -race), and checks that a blocked key stays refused.
func TestPenaltyBoxConcurrent(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	tb, _ := NewTokenBucket(PerSecond(100), 10, WithClock(clk))
	box, err := NewPenaltyBox(tb, 3, time.Second, time.Hour, WithClock(clk), WithMaxKeys(4),
		WithObserver(ObserverFunc(func(Event) {})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := strconv.Itoa((g + i) % 6)
				switch i % 4 {
				case 0:
					box.Allow(k)
				case 1:
					box.AllowN(ctx, k, 1)
				case 2:
					box.Reserve(ctx, k, 1)
				case 3:
					box.Blocked(k)
				}
				if g == 0 && i%50 == 0 {
					clk.Advance(time.Millisecond)
				}
			}
		}(g)
	}
	wg.Wait()
	if box.Len() > 4 {
		t.Fatalf("%d entries, cap 4", box.Len())
	}
	for k := range 6 {
		key := strconv.Itoa(k)
		if box.Blocked(key) > 0 && box.Allow(key) {
			t.Fatalf("blocked key %s allowed", key)
		}
	}
}
