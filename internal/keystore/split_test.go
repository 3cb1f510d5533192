package keystore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Without a cap, a shard splits instead of growing past splitKeys (rule
// 8): however many keys arrive, no table exceeds the size a shard of
// splitKeys keys grows to, so no rebuild, sweep or split (each one pass
// over a table) costs more than that. Every key stays where the directory
// sends it (Check).
func TestSplitBoundsTables(t *testing.T) {
	st := newTestStore(0, 1)
	maxSlots := splitKeys*125/85 + 2 // 1.25·splitKeys/maxLoad
	for i := range 200_000 {
		storeSet(st, fmt.Sprint("k", i), 1)
		if i%5000 != 0 {
			continue
		}
		for _, sh := range st.allShards() {
			sh.mu.Lock()
			slots, n := sh.slots(), sh.n
			sh.mu.Unlock()
			if slots > maxSlots {
				t.Fatalf("after %d keys: a shard of %d keys in %d slots, more than %d", i+1, n, slots, maxSlots)
			}
		}
	}
	if s := st.Stats(); s.Keys != 200_000 {
		t.Fatalf("%+v", s)
	}
	if n := len(st.allShards()); n < 200_000/(2*splitKeys) {
		t.Fatalf("%d shards for 200k keys", n)
	}
	for i := range 200_000 {
		if v, ok := storeGet(st, fmt.Sprint("k", i)); !ok || v != 1 {
			t.Fatalf("key %d: %d, %v", i, v, ok)
		}
	}
	checkStore(t, st)
}

// Splits while other goroutines use the keys being moved lose no update
// and no key: goroutines add to random keys of a shared pool, most of
// them new when first drawn, so that shards split under calls on their
// keys, some of which wait in a shard's queue or look a key up in a shard
// that has just given it away. Each key's value counts its updates
// exactly (odd values: never at rest, never dropped).
func TestSplitNoLostUpdate(t *testing.T) {
	for round := range 3 {
		st := newTestStore(0, 1)
		const keys = 40_000
		goroutines := max(4, 2*runtime.GOMAXPROCS(0))
		perG := 30_000
		if testing.Short() {
			perG = 15_000
		}
		var counts [keys]atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for range perG {
					// Half the draws from a small hot set, half from all.
					i := rng.IntN(keys)
					if rng.IntN(2) == 0 {
						i = rng.IntN(64)
					}
					h, fresh := st.Take(fmt.Sprint("key-", i), 0, true)
					if fresh {
						h.State().v = 1
					}
					h.State().v += 2
					h.Release()
					counts[i].Add(1)
				}
			}()
		}
		wg.Wait()
		if n := len(st.allShards()); n < 4 {
			t.Fatalf("round %d: %d shards: no split happened", round, n)
		}
		for i := range keys {
			want := counts[i].Load()
			v, ok := storeGet(st, fmt.Sprint("key-", i))
			if want == 0 {
				if ok {
					t.Fatalf("round %d: key %d never taken but held", round, i)
				}
				continue
			}
			if !ok || (v-1)/2 != want {
				t.Fatalf("round %d: key %d: %d updates held (%v), %d made", round, i, (v-1)/2, ok, want)
			}
		}
		checkStore(t, st)
	}
}

// A store under a cap never splits: the cap chose its shards (New).
func TestSplitNotUnderCap(t *testing.T) {
	st := newTestStore(1<<16, 1)
	for i := range 1 << 16 {
		storeSet(st, fmt.Sprint("k", i), 1)
	}
	if n, m := len(st.allShards()), len(st.shards)+1; n != m { // +1: the global key's
		t.Fatalf("%d shards, %d made by New (with the global key's)", n, m)
	}
	checkStore(t, st)
}
