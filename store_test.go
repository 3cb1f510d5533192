package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// The key cap holds under a flood of 1,000,000 random keys, and the
// counters add up.
func TestStoreCapUnderFlood(t *testing.T) {
	const maxKeys = 10_000
	tb, clk := newTB(t, PerMinute(1), 5, WithMaxKeys(maxKeys))
	rng := rand.New(rand.NewPCG(5, 6))
	floodKeys := 1_000_000
	if raceEnabled {
		floodKeys = 200_000 // the race detector makes each eviction's 32 slot locks slow
	}
	var buf [16]byte
	for i := 0; i < floodKeys; i++ {
		if i%(floodKeys/10) == 0 {
			clk.Advance(time.Millisecond)
		}
		key := fmt.Appendf(buf[:0], "%x", rng.Uint64())
		if !tb.Allow(string(key)) {
			t.Fatal("a new key was denied")
		}
		if i%50_000 == 0 {
			if s := tb.Stats(); s.Keys > maxKeys {
				t.Fatalf("%d keys held, cap %d", s.Keys, maxKeys)
			}
		}
	}
	s := tb.Stats()
	if s.Keys > maxKeys || s.Keys < maxKeys*9/10 {
		t.Fatalf("keys %d, cap %d", s.Keys, maxKeys)
	}
	if s.Inserts != uint64(floodKeys) || s.Inserts-s.EvictedAtRest-s.EvictedLRU != uint64(s.Keys) {
		t.Fatalf("counters do not add up: %+v", s)
	}
	// A minute later every bucket is full again: a sweep drops them all and
	// gives the table memory back.
	clk.Advance(time.Minute)
	tb.Sweep()
	if s := tb.Stats(); s.Keys != 0 || s.Slots != 0 {
		t.Fatalf("after sweep: %+v", s)
	}
}

// Eviction is lossless: with a sweep before every decision, a random trace
// gets exactly the decisions it gets without eviction.
func TestTokenBucketEvictionLossless(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	plain, clk1 := newTB(t, Per(3, time.Second), 4)
	swept, clk2 := newTB(t, Per(3, time.Second), 4)
	capped, clk3 := newTB(t, Per(3, time.Second), 4, WithMaxKeys(16), WithShards(1))
	now := epoch
	for i := 0; i < 20_000; i++ {
		now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		for _, c := range []*ManualClock{clk1, clk2, clk3} {
			c.Set(now)
		}
		key := fmt.Sprint(rng.IntN(12)) // fewer keys than the cap: only keys at rest go
		n := rng.IntN(5)
		swept.Sweep()
		a, _ := plain.AllowN(bg, key, n)
		b, _ := swept.AllowN(bg, key, n)
		c, _ := capped.AllowN(bg, key, n)
		if a != b || a != c {
			t.Fatalf("step %d key %s n %d: plain %+v swept %+v capped %+v", i, key, n, a, b, c)
		}
	}
	if s := swept.Stats(); s.EvictedAtRest == 0 {
		t.Fatal("the trace never evicted: the test proves nothing")
	}
	if s := capped.Stats(); s.EvictedLRU != 0 {
		t.Fatalf("capped store dropped busy keys: %+v", s)
	}
}

// A key touched while the sweeper runs keeps its state.
func TestSweeperKeepsTouchedKeys(t *testing.T) {
	clk := NewManualClock(epoch)
	tb, err := NewTokenBucket(PerHour(1), 1, WithClock(clk), WithSweepInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for i := 0; i < 1000; i++ {
		if !tb.Allow("k") == (i == 0) {
			t.Fatalf("step %d: the key lost its state", i)
		}
		if i%10 == 0 {
			clk.Advance(time.Second) // fires the sweeper
		}
	}
	for i := 0; i < 100; i++ {
		tb.Allow(fmt.Sprint("idle", i))
	}
	clk.Advance(2 * time.Hour) // everything refills; the sweeper drops it all
	waitFor(t, func() bool {
		clk.Advance(time.Second) // fire the sweeper's next timer, whenever it is armed
		return tb.Stats().Keys == 0
	})
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb.Close() // twice is fine
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// checkStore fails the test unless st keeps its rules (see Store.Check).
func checkStore[S any](t *testing.T, st *keystore.Store[S]) {
	t.Helper()
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}
