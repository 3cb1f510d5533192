package keystore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// hotPair is a slot and a header it was seen holding, unlocked.
type hotPair struct {
	sl      *slot[testState]
	hdr, kx uint64
}

// Rule 13 whatever the hint says: the store against a map, as in
// TestStoreAgainstMap, with the hint set before every look-up to a slot
// and a header seen together at some earlier step (in this table or one
// rebuilt since, the key perhaps moved, dropped or replaced), to a slot
// and another slot's header, or to nothing. takeHot, called first, must
// return a slot only when it is the key's own slot in the current table,
// and the store must keep every value. The test fails if takeHot is never
// right or never refuses: both cases must be exercised.
func TestHotHintAnyValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ keys, steps int }{{12, 40_000}, {300, 80_000}, {3000, 80_000}} {
		st := newTestStore(0, 1)
		st.splits = false // one shard's hint throughout
		sh := &st.shards[0]
		ref := map[string]int64{}
		// Two pairs of keys with the same tag, inline and in the arena,
		// so that a hint can name an unlocked slot with the caller's tag
		// (and, inline, its length and first bytes) holding another key.
		pairs := [2][2]string{sameTag(st, "tag-"), sameTag(st, "a-key-kept-in-the-arena-")}
		keyOf := func() string {
			if rng.IntN(4) == 0 {
				return pairs[rng.IntN(2)][rng.IntN(2)]
			}
			return testKey(rng.IntN(tc.keys))
		}
		var seen []hotPair
		record := func() {
			t := sh.tab.Load()
			if t == nil {
				return
			}
			for k := 0; k < 8; k++ {
				i := rng.IntN(len(t.slots))
				if w := atomic.LoadUint64(&t.slots[i].hdr); w != 0 {
					p := hotPair{&t.slots[i], w | refBit, atomic.LoadUint64(&t.slots[i].kx)}
					if len(seen) < 4096 {
						seen = append(seen, p)
					} else {
						seen[rng.IntN(len(seen))] = p
					}
				}
			}
		}
		var hits, misses int
		hint := func(key string) {
			switch r := rng.IntN(10); {
			case r == 0 || len(seen) == 0:
				sh.forget()
			case r < 8:
				p := seen[rng.IntN(len(seen))]
				sh.hotSlot.Store(p.sl)
				sh.hotHdr.Store(p.hdr)
				sh.hotKx.Store(p.kx)
			default:
				sh.hotSlot.Store(seen[rng.IntN(len(seen))].sl)
				sh.hotHdr.Store(seen[rng.IntN(len(seen))].hdr)
				sh.hotKx.Store(seen[rng.IntN(len(seen))].kx)
			}
			// A hint for this very key, when it was seen: the cases that
			// may succeed.
			if rng.IntN(2) == 0 {
				k := refTo(st, key)
				if tab := sh.tab.Load(); tab != nil {
					if i, _ := tab.index(&k); i >= 0 && rng.IntN(2) == 0 {
						sh.hotSlot.Store(&tab.slots[i])
						sh.hotHdr.Store(atomic.LoadUint64(&tab.slots[i].hdr) | refBit)
						sh.hotKx.Store(atomic.LoadUint64(&tab.slots[i].kx))
					}
				}
			}
			k := refTo(st, key)
			sl, rel, _ := sh.takeHot(&k)
			if sl == nil {
				misses++
				return
			}
			hits++
			tab := sh.tab.Load()
			i, _ := tab.index(&k)
			if i < 0 || &tab.slots[i] != sl {
				t.Fatalf("%+v: takeHot(%q) took a slot that is not the key's (index %d)", tc, key, i)
			}
			sl.unlock(sh, rel)
		}
		check := func(step int, key string) {
			hint(key)
			checkGet(t, st, ref, key, fmt.Sprintf("%+v step %d", tc, step))
		}
		for i := 0; i < tc.steps; i++ {
			key := keyOf()
			switch op := rng.IntN(100); {
			case op < 60:
				check(i, key)
				v := rng.Int64N(1000)
				hint(key)
				storeSet(st, key, v)
				ref[key] = v
			case op < 98:
				check(i, key)
			default:
				sweepRef(st, ref)
			}
			record()
			if i%(tc.steps/20) == 0 {
				checkStore(t, st)
			}
		}
		for k := range ref {
			check(-1, k)
		}
		checkStore(t, st)
		if hits < tc.steps/20 || misses < tc.steps/20 {
			t.Fatalf("%+v: takeHot took %d slots and refused %d: the test does not exercise both", tc, hits, misses)
		}
	}
}

// sameTag returns two keys of the same length, starting with prefix,
// with the same tag in st: for a short prefix, two inline keys whose
// headers differ in nothing but the reference bit (their first 4 bytes
// are the prefix's), so that only their kx tells them apart.
func sameTag[S any](st *Store[S], prefix string) [2]string {
	seen := map[uint64]string{}
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		r := refTo(st, k)
		if o, ok := seen[r.want]; ok {
			return [2]string{o, k}
		}
		seen[r.want] = k
	}
}

// A key met locked by another becomes its shard's hot key, and a later
// Take on it goes through the hint; a rebuild forgets the hint.
func TestHotHintFollowsContention(t *testing.T) {
	st := newHotStore(1)
	sh := &st.shards[0]
	h, _ := st.Take("hot", 0, true)
	h.Release()
	if sh.hotSlot.Load() != nil {
		t.Fatal("an uncontended key became the hot key")
	}
	h, _ = st.Take("hot", 0, true)
	var wg sync.WaitGroup
	wg.Go(func() {
		h2, _ := st.Take("hot", 0, true)
		h2.State().steps++
		h2.Release()
	})
	for atomic.LoadUint64(&h.sl.hdr)&waitBit == 0 { // the other is parked
		runtime.Gosched()
	}
	h.State().steps++
	h.Release()
	wg.Wait()
	if sh.hotSlot.Load() != h.sl || sh.hotHdr.Load() != h.rel {
		t.Fatalf("after contention the hint is %p/%#x, want the key's slot %p/%#x", sh.hotSlot.Load(), sh.hotHdr.Load(), h.sl, h.rel)
	}
	k := refTo(st, "hot")
	sl, rel, hinted := sh.takeHot(&k)
	if sl != h.sl || !hinted {
		t.Fatalf("takeHot = %p, %v; want the key's slot %p", sl, hinted, h.sl)
	}
	if got := sl.s.steps; got != 2 {
		t.Fatalf("the key counts %d steps, want 2", got)
	}
	sl.unlock(sh, rel)
	sh.mu.Lock()
	sh.rebuild(sh.slots(), true)
	sh.mu.Unlock()
	if sh.hotSlot.Load() != nil {
		t.Fatal("a rebuild kept the hint to an old slot")
	}
	checkStore(t, st)
}

// Rule 13 with a hint from before a compaction: a reader that loaded the
// hint (the hot key's slot and header) just before a rebuild compacted
// the arena, and the table just after, while inserts append keys to the
// new arena, in place, over the old header's offset. The old slot is
// locked for good, so takeHot must refuse; and it must not read the
// arena at an offset the header it holds no longer vouches for, bytes an
// insert may be writing: under -race such a read is reported.
func TestHotHintStaleAcrossCompaction(t *testing.T) {
	st := newTestStore(0, 1)
	st.splits = false // one table throughout
	sh := &st.shards[0]
	const old = 2000
	for i := range old {
		storeSet(st, "old-arena-key-"+strconv.Itoa(i), 1) // odd: not at rest
	}
	hot := "old-arena-key-" + strconv.Itoa(old-1) // the last key in: the largest offset
	k := refTo(st, hot)                           // a key in the arena: longer than inlineMax
	tab := sh.tab.Load()
	i, _ := tab.index(&k)
	stale := hotPair{&tab.slots[i], atomic.LoadUint64(&tab.slots[i].hdr) | refBit, 0}
	for i := range old - 1 {
		storeSet(st, "old-arena-key-"+strconv.Itoa(i), 0) // at rest
	}
	st.Sweep(0) // drops all but the hot key: the table shrinks, the arena is compacted
	if sh.tab.Load().keys == nil || uint64(sh.used) >= stale.hdr&offMask {
		t.Fatalf("the arena was not compacted below the old offset %d (used %d)", stale.hdr&offMask, sh.used)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // new keys, appended to the arena over the old offset
		defer close(done)
		for i := range 3 * old {
			storeSet(st, "new-arena-key-"+strconv.Itoa(i), 1)
		}
	})
	var took atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			sh.hotSlot.Store(stale.sl)
			sh.hotHdr.Store(stale.hdr)
			if sl, rel, _ := sh.takeHot(&k); sl != nil {
				took.Add(1)
				sl.unlock(sh, rel)
			}
		}
	})
	wg.Wait()
	if n := took.Load(); n != 0 {
		t.Fatalf("takeHot took the hot key's old slot %d times", n)
	}
	if v, ok := storeGet(st, hot); !ok || v != 1 {
		t.Fatalf("the hot key is %d,%v, want 1,true", v, ok)
	}
	checkStore(t, st)
}
