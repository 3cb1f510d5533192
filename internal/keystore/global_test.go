package keystore

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Rule 14: the global key "" is its shard's hot key after any call on it
// that went the usual way, so the next call takes it by the hint, and it
// stays one key like any other: its value is exact while goroutines use
// it and others flood the store with new keys (the shard rebuilt, split,
// the key moved to another shard) and sweep it, at rest or not.
func TestGlobalKeyExact(t *testing.T) {
	st := newTestStore(0, 1)
	storeSet(st, "", 1)
	sh := st.glob
	if sl, _, _ := sh.takeHot(new(refTo(st, ""))); sl == nil {
		t.Fatal(`after a call on "", its shard's hint does not take it`)
	} else {
		sl.unlock(sh, atomic.LoadUint64(&sl.hdr)&^lockBit)
	}
	goroutines := max(4, 2*runtime.GOMAXPROCS(0))
	perG := 40_000
	if testing.Short() {
		perG = 10_000
	}
	var wg sync.WaitGroup
	var made atomic.Int64
	wg.Go(func() { // new keys: rebuilds and splits under the global key
		for i := range 30_000 {
			storeSet(st, fmt.Sprint("n-", i), 1)
			if i%5000 == 0 {
				st.Sweep(0)
			}
		}
	})
	for range goroutines {
		wg.Go(func() {
			for range perG {
				h, fresh := st.Take("", 0, true)
				if fresh {
					t.Error(`"" set up again: it was dropped while not at rest`)
				}
				h.State().v += 2
				h.Release()
				made.Add(1)
			}
		})
	}
	wg.Wait()
	if v, ok := storeGet(st, ""); !ok || (v-1)/2 != made.Load() {
		t.Fatalf(`"" holds %d updates (%v), %d made`, (v-1)/2, ok, made.Load())
	}
	if n := len(st.allShards()); n < 4 {
		t.Fatalf("%d shards: no split happened under the global key", n)
	}
	// At rest, it goes like any key, and comes back new.
	storeSet(st, "", 2)
	st.Sweep(0)
	if _, ok := storeGet(st, ""); ok {
		t.Fatal(`"" at rest survived a sweep`)
	}
	if !storeSet(st, "", 3) {
		t.Fatal(`"" after its drop was not new`)
	}
	checkStore(t, st)
}
