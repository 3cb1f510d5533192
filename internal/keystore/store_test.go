package keystore

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// testState is a state whose "at rest" is set by the test: at rest when
// its value is even.
type testState struct{ v int64 }

func newTestStore(maxKeys, shards int) *Store[testState] {
	return New(Config{Shards: shards, MaxKeys: maxKeys}, func(s *testState, _ string, now int64) bool { return false }, func(s *testState, _ bool, _ []byte, now int64) bool { return s.v%2 == 0 })
}

func storeGet(st *Store[testState], key string) (int64, bool) {
	h, fresh := st.Take(key, 0, false)
	defer h.Release()
	s := h.State()
	if fresh {
		return 0, false
	}
	return s.v, true
}

func storeSet(st *Store[testState], key string, v int64) (fresh bool) {
	h, fresh := st.Take(key, 0, true)
	h.State().v = v
	h.Release()
	return fresh
}

// The table against a map on random inserts, updates and sweeps, so that
// probing (with wrap-around in small tables), backward-shift deletion,
// growth, shrinking and the arena's compaction are all exercised. Keys at
// rest (even values) may vanish at any insert; others never do. Some keys
// are long enough to need a two-byte length in the arena, one is "".
func TestStoreAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ shards, keys, steps int }{{1, 3000, 200_000}, {4, 3000, 50_000}, {1, 12, 30_000}, {1, 100, 50_000}} {
		st := newTestStore(0, tc.shards)
		ref := map[string]int64{}
		check := func(i int, key string) { checkGet(t, st, ref, key, fmt.Sprintf("%+v step %d", tc, i)) }
		for i := 0; i < tc.steps; i++ {
			key := testKey(rng.IntN(tc.keys))
			switch op := rng.IntN(100); {
			case op < 60:
				check(i, key)
				_, had := ref[key]
				v := rng.Int64N(1000)
				if fresh := storeSet(st, key, v); fresh == had {
					t.Fatalf("%+v step %d: fresh=%v but key present=%v", tc, i, fresh, had)
				}
				ref[key] = v
			case op < 99:
				check(i, key)
			default:
				sweepRef(st, ref)
			}
			if i%(tc.steps/50) == 0 {
				checkStore(t, st)
			}
		}
		for k := range ref {
			check(-1, k)
		}
		checkStore(t, st)
		if s := st.Stats(); s.Keys != len(ref) {
			t.Fatalf("store holds %d keys, reference %d", s.Keys, len(ref))
		}
	}
}

// checkGet fails the test unless st holds key with the value ref has for
// it, or has dropped it at rest (an even value), which ref then forgets.
func checkGet(t *testing.T, st *Store[testState], ref map[string]int64, key, where string) {
	t.Helper()
	got, ok := storeGet(st, key)
	want, wok := ref[key]
	switch {
	case ok && wok && got == want:
	case !ok && (!wok || want%2 == 0):
		delete(ref, key) // at rest: dropping it is allowed
	default:
		t.Fatalf("%s: get %q = %d,%v want %d,%v", where, key, got, ok, want, wok)
	}
}

// sweepRef sweeps st, and forgets in ref the keys that the sweep drops:
// those at rest (an even value).
func sweepRef(st *Store[testState], ref map[string]int64) {
	st.Sweep(0)
	for k, v := range ref {
		if v%2 == 0 {
			delete(ref, k)
		}
	}
}

// testKey returns key i of the property tests: mostly short, some of 150
// bytes or more, and "" for 0.
func testKey(i int) string {
	switch {
	case i == 0:
		return ""
	case i%7 == 0:
		return fmt.Sprint(i) + strings.Repeat("x", 150)
	}
	return fmt.Sprint(i)
}

// refTo returns key's kref in st.
func refTo[S any](st *Store[S], key string) kref {
	return refOf(key, maphash.String(st.seed, key))
}

// refOf returns the kref of key, whose hash is hs.
func refOf(key string, hs uint64) (k kref) {
	k.set(key, hs)
	return k
}

// tableOf returns a shard's slots and the bytes in use of its arena.
func tableOf[S any](sh *shard[S]) ([]slot[S], []byte) {
	t := sh.tab.Load()
	if t == nil {
		return nil, nil
	}
	return t.slots, t.keys[:sh.used]
}

// arenaCap returns the bytes a shard's arena holds, in use or not.
func arenaCap[S any](sh *shard[S]) int {
	if t := sh.tab.Load(); t != nil {
		return len(t.keys)
	}
	return 0
}

// checkStore fails the test unless st keeps its rules (see Check).
func checkStore[S any](t *testing.T, st *Store[S]) {
	t.Helper()
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}

// A table about to grow is swept first: keys at rest do not pile up even
// if Sweep is never called.
func TestStoreLazySweep(t *testing.T) {
	st := newTestStore(0, 1)
	for i := 0; i < 100_000; i++ {
		storeSet(st, fmt.Sprint(i), 0) // at rest at once
	}
	if s := st.Stats(); s.Keys > 2000 || s.EvictedAtRest < 98_000 {
		t.Fatalf("lazy sweep kept %+v", s)
	}
}

// At the cap, a key at rest in the sample (the keys in table order from the
// hand, evictProbe of them, halved after each eviction that found none at
// rest, doubled after each that did) goes first; else CLOCK: the first key
// the hand comes to that is at rest or not used since the hand last passed
// it, the hand clearing the reference bits it passes; else, after
// evictProbe keys all used, the last of them.
func TestStoreCapDropsAtRestFirstThenCLOCK(t *testing.T) {
	// A cap of evictProbe keys in one shard: the sample is the whole shard.
	st := newTestStore(evictProbe, 1)
	sh := &st.shards[0]
	for i := 0; i < evictProbe; i++ {
		storeSet(st, fmt.Sprint("busy", i), 1) // not at rest, not used since
	}
	// order lists the keys held in the order the hand comes to them, with
	// their reference bits.
	order := func() (keys []string, ref []bool) {
		slots, _ := tableOf(sh)
		n := len(slots)
		if handSlot(sh.hand, n, sh.scram) != sh.cursor {
			t.Fatalf("the hand is at step %d, slot %d: not where its order puts it", sh.hand, sh.cursor)
		}
		steps := handSteps(n)
		for j := range steps {
			i := handSlot((sh.hand+j)%steps, n, sh.scram)
			if i < 0 {
				continue
			}
			if w := slots[i].hdr; w != 0 {
				keys = append(keys, string(keyOf(sh.tab.Load(), &slots[i], w, new([inlineMax]byte))))
				ref = append(ref, w&refBit != 0)
			}
		}
		return keys, ref
	}
	// sample lists the keys held in table order from the hand, first moved
	// to a key as evictOne moves it.
	sample := func() (keys []string) {
		slots, _ := tableOf(sh)
		for slots[sh.cursor].hdr == 0 {
			sh.moveHand(len(slots))
		}
		for j := range slots {
			if i := (sh.cursor + j) % len(slots); slots[i].hdr != 0 {
				keys = append(keys, string(keyOf(sh.tab.Load(), &slots[i], slots[i].hdr, new([inlineMax]byte))))
			}
		}
		return keys
	}
	held := func(key string) bool { // without touching the key, unlike storeGet
		keys, _ := order()
		return slices.Contains(keys, key)
	}
	expect := func(what string, atRest, lru uint64) {
		t.Helper()
		if s := st.Stats(); s.Keys != evictProbe || s.EvictedAtRest != atRest || s.EvictedLRU != lru {
			t.Fatalf("%s: %+v", what, s)
		}
		checkStore(t, st)
	}

	// 1. The key first from the hand is used again: it survives, and the
	// next one, never used since its insert, goes.
	keys, _ := order()
	storeSet(st, keys[0], 1)
	storeSet(st, "new", 1)
	expect("first eviction", 0, 1)
	if !held(keys[0]) || held(keys[1]) {
		t.Fatalf("evicted the wrong key: %q held %v, %q held %v", keys[0], held(keys[0]), keys[1], held(keys[1]))
	}
	// The hand cleared the bit of the key it passed.
	if _, ref := order(); slices.Contains(ref, true) {
		t.Fatalf("reference bits after the first eviction: %v", ref)
	}

	// 2. Every key used but the last from the hand: the hand passes them all,
	// clearing their bits, and drops the last one.
	keys, _ = order()
	last := keys[len(keys)-1]
	for _, k := range keys[:len(keys)-1] {
		storeSet(st, k, 1)
	}
	storeSet(st, "new2", 1)
	expect("second eviction", 0, 2)
	if held(last) {
		t.Fatalf("%q, the only key not used, survived", last)
	}
	for _, k := range keys[:len(keys)-1] {
		if !held(k) {
			t.Fatalf("%q, a key used, was evicted", k)
		}
	}
	if _, ref := order(); slices.Contains(ref, true) {
		t.Fatalf("the hand left reference bits set: %v", ref)
	}

	// 3. Every key used: the hand passes evictProbe of them, clearing their
	// bits, and drops the last.
	keys, _ = order()
	for _, k := range keys {
		storeSet(st, k, 1)
	}
	storeSet(st, "new3", 1)
	expect("third eviction", 0, 3)
	if held(keys[len(keys)-1]) || !held(keys[0]) {
		t.Fatalf("every key used: %q should have gone, not %q", keys[len(keys)-1], keys[0])
	}
	if _, ref := order(); slices.Contains(ref, true) {
		t.Fatalf("the hand left reference bits set: %v", ref)
	}

	// 4. Three evictions found no key at rest: the sample is an eighth.
	if sh.sample != evictProbe/8 {
		t.Fatalf("after three samples without a key at rest, the sample is %d keys, want %d", sh.sample, evictProbe/8)
	}

	// 5. A key at rest in the sample goes before any busy key, and the
	// sample doubles.
	in := sample()[sh.sample-1]
	storeSet(st, in, 2) // at rest, and just used
	storeSet(st, "new4", 1)
	expect("at rest in the sample", 1, 3)
	if held(in) {
		t.Fatal("the key at rest in the sample was kept while a busy key was dropped")
	}
	if sh.sample != evictProbe/4 {
		t.Fatalf("after a sample with a key at rest, the sample is %d keys, want %d", sh.sample, evictProbe/4)
	}

	// 6. A key at rest beyond the sample goes when the hand comes to it
	// before any key not used: the keys it passes keep their state.
	inSample := sample()[:sh.sample]
	keys, _ = order()
	j := 1
	for slices.Contains(inSample, keys[j]) {
		j++
	}
	for _, k := range keys[:j] {
		storeSet(st, k, 1) // used
	}
	storeSet(st, keys[j], 2) // at rest
	storeSet(st, "new5", 1)
	expect("at rest at the hand", 2, 3)
	if held(keys[j]) {
		t.Fatal("the key at rest the hand came to was kept")
	}
	for _, k := range keys[:j] {
		if !held(k) {
			t.Fatalf("%q, used, was dropped", k)
		}
	}
}

// A shard never holds more key bytes than its arena can address: past
// that, it evicts until the new key fits. A key longer than maxKeyLen is
// kept in its bounded form (rule 10).
func TestStoreArenaLimit(t *testing.T) {
	st := newTestStore(0, 1)
	st.arenaMax = 256
	sh := &st.shards[0]
	for i := 0; i < 10_000; i++ {
		key := fmt.Sprintf("key-%09d", i) // 13 bytes, 14 with the length
		storeSet(st, key, 1)              // never at rest
		if _, arena := tableOf(sh); len(arena) > 256 || arenaCap(sh) > 256 {
			t.Fatalf("step %d: arena of %d bytes (%d allocated)", i, len(arena), arenaCap(sh))
		}
		if v, ok := storeGet(st, key); !ok || v != 1 {
			t.Fatalf("step %d: the key just set is gone", i)
		}
	}
	s := st.Stats()
	if s.Keys != 256/14 || s.EvictedLRU != uint64(10_000-s.Keys) {
		t.Fatalf("%+v", s)
	}
	checkStore(t, st)

	// Keys of up to inlineMax bytes are kept in their slots: none of them
	// takes a byte of the arena, so none is evicted for its sake.
	st = newTestStore(0, 1)
	st.arenaMax = 256
	st.splits = false
	sh = &st.shards[0]
	for i := 0; i < 10_000; i++ {
		storeSet(st, fmt.Sprintf("k-%010d", i), 1) // 12 bytes
	}
	if s := st.Stats(); s.Keys != 10_000 || s.EvictedLRU != 0 || sh.used != 0 {
		t.Fatalf("inline keys: %+v, %d arena bytes in use", s, sh.used)
	}
	checkStore(t, st)

	// A long key costs its bounded form, whatever its length; keys that
	// differ in their last byte only stay apart, and a short key is kept
	// as it is.
	st = newTestStore(0, 1)
	sh = &st.shards[0]
	long := strings.Repeat("a", 1<<20)
	storeSet(st, long+"b", 5)
	storeSet(st, long+"c", 6)
	if v, ok := storeGet(st, long+"b"); !ok || v != 5 {
		t.Fatalf("a 1 MiB key: got %d,%v", v, ok)
	}
	if v, ok := storeGet(st, long+"c"); !ok || v != 6 {
		t.Fatalf("a 1 MiB key differing in its last byte: got %d,%v", v, ok)
	}
	if _, ok := storeGet(st, long); ok {
		t.Fatal("a shorter key shares a long key's state")
	}
	if _, arena := tableOf(sh); len(arena) > 256 {
		t.Fatalf("arena of %d bytes", len(arena))
	}
	if k := st.Kept(long); len(k) > keyhash.MaxKept || st.Kept("short") != "short" {
		t.Fatalf("kept forms: %d bytes, %q", len(k), st.Kept("short"))
	}
	checkStore(t, st)
}

// Tables grow by a quarter at maxLoad: from a few hundred keys on, the
// load stays between 0.67 and 0.85 at every key count.
func TestStoreLoad(t *testing.T) {
	st := newTestStore(0, 1)
	for i := 0; i < 200_000; i++ {
		storeSet(st, fmt.Sprint(i), 1)
		if i < 200 || (i > 5000 && i%97 != 0) { // Stats locks every shard: past a few splits, every 97th count
			continue
		}
		s := st.Stats()
		if load := float64(s.Keys) / float64(s.Slots); load < 0.67 || load > 0.85 {
			t.Fatalf("%d keys in %d slots: load %.3f", s.Keys, s.Slots, load)
		}
	}
}

// A sweep rebuilds an arena that is mostly dead bytes, and a table left
// mostly empty, with its arena; dropping every key frees both.
func TestStoreSweepGivesMemoryBack(t *testing.T) {
	st := newTestStore(0, 1)
	st.splits = false // one table of 10k keys
	sh := &st.shards[0]
	const keys = 10_000
	for i := 0; i < keys; i++ {
		storeSet(st, fmt.Sprintf("key-%06d", i), 1)
	}
	slots, arena := sh.slots(), arenaCap(sh)
	for i := 0; i < keys*6/10; i++ {
		storeSet(st, fmt.Sprintf("key-%06d", i), 2) // at rest
	}
	st.Sweep(0)
	if sh.slots() != slots || sh.dead != 0 || arenaCap(sh) > arena/2 {
		t.Fatalf("60%% dropped: %d slots (was %d), arena cap %d (was %d), %d dead", sh.slots(), slots, arenaCap(sh), arena, sh.dead)
	}
	checkStore(t, st)
	for i := keys * 6 / 10; i < keys*95/100; i++ {
		storeSet(st, fmt.Sprintf("key-%06d", i), 2)
	}
	st.Sweep(0)
	if s := st.Stats(); s.Keys != keys*5/100 || s.Slots > slots/8 || arenaCap(sh) > arena/10 {
		t.Fatalf("95%% dropped: %+v, arena cap %d", s, arenaCap(sh))
	}
	checkStore(t, st)
	for i := keys * 95 / 100; i < keys; i++ {
		storeSet(st, fmt.Sprintf("key-%06d", i), 2)
	}
	st.Sweep(0)
	if sh.tab.Load() != nil || sh.used != 0 || sh.n != 0 || sh.dead != 0 {
		t.Fatalf("all dropped: %d slots, arena %d bytes", sh.slots(), arenaCap(sh))
	}
}

// Under a cap the store takes no more shards than the cap allows for small
// ones, and enough that none holds more than maxShardKeys, whatever
// WithShards asked.
func TestStoreShardsWithCap(t *testing.T) {
	for _, tc := range []struct{ asked, maxKeys, shards int }{
		{64, 0, 64},
		{64, 1, 1},
		{64, 100, 4},
		{64, 10_000, 64},
		{64, 1 << 20, 128},
		{1, 1_000_000, 128},
		{64, 10_000_000, 2048},
		{4096, 10_000_000, 4096},
		{64, 1 << 31, maxShards},
	} {
		st := newTestStore(tc.maxKeys, tc.asked)
		if len(st.shards) != tc.shards {
			t.Errorf("maxKeys %d, %d shards asked: %d shards, want %d", tc.maxKeys, tc.asked, len(st.shards), tc.shards)
		}
		if st.perShardMax*len(st.shards) > tc.maxKeys || (len(st.shards) < maxShards && st.perShardMax > maxShardKeys) {
			t.Errorf("maxKeys %d: %d shards of %d keys", tc.maxKeys, len(st.shards), st.perShardMax)
		}
	}
}
