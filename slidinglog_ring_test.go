package ratelimit

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// ringOfKey is the size of key's ring and how many instants it holds.
func ringOfKey(sl *SlidingLog, key string, now int64) (size, n int) {
	h, _ := sl.k.st.Take(key, now, false)
	defer h.Release()
	return len(h.State().ring), int(h.State().n)
}

// TestSlidingLogNoRingAllocUnderLock: whatever the mix of Allow, AllowN,
// Reserve, Cancel, Take and Settle (excess and surplus), SetRate,
// SetOverride and Reset, with the clock jumping both ways, no ring is
// allocated with a key's slot lock held (keystore rule 2), while the
// rings do grow and shrink. And the decisions are the model's (the
// oracle of TestSlidingLogNeverExceeds's kind is in slidinglog_test.go;
// here AllowN is checked against it on a key only AllowN touches).
func TestSlidingLogNoRingAllocUnderLock(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 30))
		sl, clock := newTestSlidingLog(t, PerSecond(64), winT0)
		o := newSLOracle(64, int64(time.Second))
		before := slLockedAllocs.Load()
		grew, shrank := false, false
		var pending []*Reservation
		keys := []string{"a", "b", "c"}
		for range 3000 {
			key := keys[r.IntN(len(keys))]
			size0, _ := ringOfKey(sl, key, clock.Now().UnixNano())
			switch op := r.IntN(100); {
			case op < 30:
				sl.Allow(key)
			case op < 50:
				sl.AllowN(ctx, key, 1+r.IntN(8))
			case op < 60:
				if res, err := sl.Reserve(ctx, key, 1+r.IntN(8)); err == nil {
					pending = append(pending, res)
				}
			case op < 70:
				if res, err := sl.Take(ctx, key, 1+r.IntN(4)); err == nil {
					pending = append(pending, res)
				}
			case op < 82 && len(pending) > 0:
				i := r.IntN(len(pending))
				res := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				if r.IntN(2) == 0 {
					res.Cancel()
				} else {
					res.Settle(r.IntN(200)) // excess beyond L too
				}
			case op < 84:
				sl.SetRate(PerSecond(1 + r.Int64N(128)))
			case op < 86:
				sl.SetOverride(key, PerSecond(1+r.Int64N(128)))
			case op < 87:
				sl.Reset(key)
			case op < 89:
				clock.Advance(-time.Duration(r.IntN(50)) * time.Millisecond)
			default:
				clock.Advance(time.Duration(r.Int64N(int64(2 * time.Second / 10))))
			}
			if r.IntN(200) == 0 {
				clock.Advance(3 * time.Second) // every instant leaves the window
			}
			size1, _ := ringOfKey(sl, key, clock.Now().UnixNano())
			grew = grew || size1 > size0
			shrank = shrank || (size1 < size0 && size1 > 0)
		}
		// AllowN on a key of its own, exact against the model.
		sl.SetRate(PerSecond(64))
		for range 2000 {
			clock.Advance(time.Duration(r.Int64N(int64(40 * time.Millisecond))))
			n := 1 + r.IntN(6)
			now := clock.Now().UnixNano()
			got, err := sl.AllowN(ctx, "model", n)
			if err != nil {
				t.Fatal(err)
			}
			if want := o.allowN("model", now, n); got.Allowed != want.Allowed || got.Remaining != want.Remaining {
				t.Fatalf("seed %d: AllowN(%d) at %d: %+v, model %+v", seed, n, now, got, want)
			}
		}
		if d := slLockedAllocs.Load() - before; d != 0 {
			t.Fatalf("seed %d: %d rings allocated with a slot lock held", seed, d)
		}
		if !grew || !shrank {
			t.Fatalf("seed %d: rings grew %v, shrank %v: the test did not resize", seed, grew, shrank)
		}
	}
}

// TestSlidingLogRingGrowsConcurrently: goroutines logging on one key at
// one instant, its ring growing from nothing to L while they race, admit
// exactly L events in all; the ring ends holding them, and no ring was
// allocated with the key's lock held. Run it with -race.
func TestSlidingLogRingGrowsConcurrently(t *testing.T) {
	const limit, workers, each = 4096, 8, 1000
	ctx := context.Background()
	for round := range 4 {
		sl, clock := newTestSlidingLog(t, PerSecond(limit), winT0)
		before := slLockedAllocs.Load()
		var wg sync.WaitGroup
		counts := make([]int, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					switch (i + w + round) % 4 {
					case 0, 1:
						if sl.Allow("k") {
							counts[w]++
						}
					case 2:
						if d, _ := sl.AllowN(ctx, "k", 2); d.Allowed {
							counts[w] += 2
						}
					case 3: // a Take, booked as AllowN books
						if r, _ := sl.Take(ctx, "k", 1); r.OK() {
							counts[w]++
						}
					}
				}
			}()
		}
		wg.Wait()
		total := 0
		for _, c := range counts {
			total += c
		}
		if total != limit {
			t.Fatalf("round %d: %d events admitted at one instant, want %d", round, total, limit)
		}
		size, n := ringOfKey(sl, "k", clock.Now().UnixNano())
		if n != limit || size != limit {
			t.Fatalf("round %d: a ring of %d holding %d, want %d of %d", round, size, n, limit, limit)
		}
		if d := slLockedAllocs.Load() - before; d != 0 {
			t.Fatalf("round %d: %d rings allocated with the slot lock held", round, d)
		}
	}
}

// TestSlidingLogSettleGrowsConcurrently: excesses settled from many
// goroutines on one key grow its ring outside the lock and log every
// instant (up to L).
func TestSlidingLogSettleGrowsConcurrently(t *testing.T) {
	const limit, workers = 1024, 8
	ctx := context.Background()
	sl, clock := newTestSlidingLog(t, PerSecond(limit), winT0)
	before := slLockedAllocs.Load()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if r, _ := sl.Take(ctx, "k", 1); r.OK() {
					r.Settle(6) // 5 more instants
				}
			}
		}()
	}
	wg.Wait()
	_, n := ringOfKey(sl, "k", clock.Now().UnixNano())
	if n != workers*20*6 {
		t.Fatalf("%d instants logged, want %d", n, workers*20*6)
	}
	if d := slLockedAllocs.Load() - before; d != 0 {
		t.Fatalf("%d rings allocated with the slot lock held", d)
	}
}

// TestSlPlanReady: a grow asks for the size wanted slExactTries times,
// then for the limit's; a shrink is asked for once, then skipped; a ring
// at hand that fits is handed over.
func TestSlPlanReady(t *testing.T) {
	s := slState{ring: make([]int64, 8), n: 8}
	var pl slPlan
	for try := 1; try <= slExactTries; try++ {
		if ring, size := pl.ready(&s, 9, 100); ring != nil || size != 16 {
			t.Fatalf("grow, try %d: %v, %d; want a ring of 16 asked for", try, ring, size)
		}
	}
	if ring, size := pl.ready(&s, 9, 100); ring != nil || size != 100 {
		t.Fatalf("grow, try %d: %v, %d; want the limit's 100", slExactTries+1, ring, size)
	}
	pl.alloc(10) // a smaller ring than asked for, but room enough
	if ring, size := pl.ready(&s, 9, 100); len(ring) != 10 || size != 0 {
		t.Fatalf("grow with a ring of 10 for 9: %d, %d", len(ring), size)
	}

	s = slState{ring: make([]int64, 64), n: 20}
	pl = slPlan{}
	if ring, size := pl.ready(&s, 2, 100); ring != nil || size != 4 {
		t.Fatalf("shrink: %v, %d; want a ring of 4 asked for", ring, size)
	}
	if ring, size := pl.ready(&s, 3, 100); ring != nil || size != 0 {
		t.Fatalf("shrink, second try with no ring of 6: %v, %d; want it skipped", ring, size)
	}
	pl = slPlan{try: 1}
	pl.alloc(6)
	if ring, size := pl.ready(&s, 3, 100); len(ring) != 6 || size != 0 {
		t.Fatalf("shrink with its ring: %d, %d", len(ring), size)
	}
	if ring, size := pl.ready(&s, 0, 100); ring != nil || size != 0 {
		t.Fatalf("a step that logs nothing: %v, %d", ring, size)
	}
}

// TestSlidingLogStepAllocsNothing: with its ring handed in, a step that
// resizes the log allocates nothing (what runs with the lock held).
func TestSlidingLogStepAllocsNothing(t *testing.T) {
	p := &slParams{limit: 1 << 10, window: int64(time.Second)}
	var s slState
	p.init(&s, 0)
	rings := make([][]int64, 0, 16)
	for size := 4; size <= 1<<10; size *= 2 {
		rings = append(rings, make([]int64, size))
	}
	var now int64
	var i int
	if a := testing.AllocsPerRun(5, func() {
		p.init(&s, 0)
		now, i = 0, 0
		for range 1 << 10 {
			now++
			ring := []int64(nil)
			if s.fitSize(s.n+1, int32(p.limit)) != 0 {
				ring, i = rings[i], i+1
			}
			if _, ok := p.admitRing(&s, now, 1, 0, ring); !ok {
				t.Fatal("refused")
			}
		}
	}); a != 0 {
		t.Fatalf("%v allocations growing a log with its rings handed in", a)
	}
	if len(s.ring) != 1<<10 || i != len(rings) {
		t.Fatalf("a ring of %d after %d rings", len(s.ring), i)
	}
}
