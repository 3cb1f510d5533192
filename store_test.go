package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// testState is a state whose "at rest" is set by the test: at rest when
// its value is even.
type testState struct{ v int64 }

func newTestStore(maxKeys, shards int) *store[testState] {
	cfg := config{clock: SystemClock(), shards: shards, maxKeys: maxKeys}
	return newStore(cfg, func(s *testState, now int64) {}, func(s *testState, now int64) bool { return s.v%2 == 0 })
}

func storeGet(st *store[testState], key string) (int64, bool) {
	sh, s, fresh := st.lock(key, 0, false)
	defer sh.mu.Unlock()
	if fresh {
		return 0, false
	}
	return s.v, true
}

func storeSet(st *store[testState], key string, v int64) (fresh bool) {
	sh, s, fresh := st.lock(key, 0, true)
	s.v = v
	sh.mu.Unlock()
	return fresh
}

// The table against a map on random inserts, updates and sweeps, so that
// probing, backward-shift deletion, growth and shrinking are all exercised.
// Keys at rest (even values) may vanish at any insert; others never do.
func TestStoreAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shards := range []int{1, 4} {
		st := newTestStore(0, shards)
		ref := map[string]int64{}
		check := func(i int, key string) {
			got, ok := storeGet(st, key)
			want, wok := ref[key]
			switch {
			case ok && wok && got == want:
			case !ok && (!wok || want%2 == 0):
				delete(ref, key) // at rest: dropping it is allowed
			default:
				t.Fatalf("step %d: get %q = %d,%v want %d,%v", i, key, got, ok, want, wok)
			}
		}
		for i := 0; i < 200_000; i++ {
			key := fmt.Sprint(rng.IntN(3000))
			switch op := rng.IntN(100); {
			case op < 60:
				check(i, key)
				_, had := ref[key]
				v := rng.Int64N(1000)
				if fresh := storeSet(st, key, v); fresh == had {
					t.Fatalf("step %d: fresh=%v but key present=%v", i, fresh, had)
				}
				ref[key] = v
			case op < 99:
				check(i, key)
			default:
				st.sweep(0)
				for k, v := range ref {
					if v%2 == 0 {
						delete(ref, k)
					}
				}
			}
		}
		for k := range ref {
			check(-1, k)
		}
		if s := st.stats(); s.Keys != len(ref) {
			t.Fatalf("store holds %d keys, reference %d", s.Keys, len(ref))
		}
	}
}

// A table about to grow is swept first: keys at rest do not pile up even
// if Sweep is never called.
func TestStoreLazySweep(t *testing.T) {
	st := newTestStore(0, 1)
	for i := 0; i < 100_000; i++ {
		storeSet(st, fmt.Sprint(i), 0) // at rest at once
	}
	if s := st.stats(); s.Keys > 2000 || s.EvictedAtRest < 98_000 {
		t.Fatalf("lazy sweep kept %+v", s)
	}
}

func TestStoreCapDropsAtRestFirstThenLRU(t *testing.T) {
	// A cap of evictProbe keys in one shard: the sample is the whole shard.
	st := newTestStore(evictProbe, 1)
	for i := 0; i < evictProbe; i++ {
		storeSet(st, fmt.Sprint("busy", i), 1) // not at rest
	}
	storeSet(st, "busy0", 1) // touch: busy0 is now the most recently used
	storeSet(st, "new", 1)
	s := st.stats()
	if s.Keys != evictProbe || s.EvictedLRU != 1 || s.EvictedAtRest != 0 {
		t.Fatalf("after one insert at the cap: %+v", s)
	}
	if _, ok := storeGet(st, "busy0"); !ok {
		t.Fatal("the most recently used key was evicted")
	}
	if _, ok := storeGet(st, "busy1"); ok {
		t.Fatal("busy1, the least recently used, survived")
	}
	storeSet(st, "busy5", 2) // now at rest
	storeSet(st, "new2", 1)
	if _, ok := storeGet(st, "busy5"); ok {
		t.Fatal("the key at rest was kept while a busy key was dropped")
	}
	if s := st.stats(); s.EvictedAtRest != 1 || s.EvictedLRU != 1 || s.Keys != evictProbe {
		t.Fatalf("%+v", s)
	}
}

// The key cap holds under a flood of 1,000,000 random keys, and the
// counters add up.
func TestStoreCapUnderFlood(t *testing.T) {
	const maxKeys = 10_000
	tb, clk := newTB(t, PerMinute(1), 5, WithMaxKeys(maxKeys))
	rng := rand.New(rand.NewPCG(5, 6))
	var buf [16]byte
	for i := 0; i < 1_000_000; i++ {
		if i%100_000 == 0 {
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
	if s.Inserts != 1_000_000 || s.Inserts-s.EvictedAtRest-s.EvictedLRU != uint64(s.Keys) {
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

func TestStoreShardsWithCap(t *testing.T) {
	for _, tc := range []struct{ maxKeys, shards int }{{1, 1}, {100, 4}, {10_000, 64}, {1 << 20, 64}} {
		st := newTestStore(tc.maxKeys, 64)
		if len(st.shards) != tc.shards {
			t.Errorf("maxKeys %d: %d shards, want %d", tc.maxKeys, len(st.shards), tc.shards)
		}
		if st.perShardMax*len(st.shards) > tc.maxKeys {
			t.Errorf("maxKeys %d: shards could hold %d", tc.maxKeys, st.perShardMax*len(st.shards))
		}
	}
}
