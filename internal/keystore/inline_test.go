package keystore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// ownedState records which key a slot's state was set up for.
type ownedState struct{ owner, v int64 }

// Rule 10, inline keys: two keys whose headers are equal but for kx (the
// same tag, length and first 4 bytes) take turns in one slot, the one
// that comes after the other in the probe run moving back into its slot
// when it is dropped. A reader that looked at the slot, then lost the
// processor while the first key was dropped and the second moved in,
// finds the very header it looked at: its compare-and-swap succeeds on
// the other key's slot. This is that interleaving step by step, with the
// look (probe) and the check after the compare-and-swap (ours) that the
// store's readers use.
func TestInlineKeysSameHeaderMoved(t *testing.T) {
	st := newTestStore(0, 1)
	st.splits = false
	pair := sameTag(st, "tag-")
	a, b := refTo(st, pair[0]), refTo(st, pair[1])
	storeSet(st, pair[0], 2) // at rest
	storeSet(st, pair[1], 3) // not at rest: after a in the probe run
	sh := &st.shards[0]
	_, sl, w := sh.probe(&a) // the look
	if sl == nil || w&lockBit != 0 {
		t.Fatalf("%q not found unlocked", pair[0])
	}
	st.Sweep(0) // drops a, moves b back into its slot
	if !atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
		t.Fatalf("the header changed (%#x, was %#x): the interleaving was not made", atomic.LoadUint64(&sl.hdr), w)
	}
	if ours(sl, &a) || !ours(sl, &b) {
		t.Fatalf("after the compare-and-swap the slot holds %q, but ours says %v for %q and %v for %q", pair[1], ours(sl, &a), pair[0], ours(sl, &b), pair[1])
	}
	sl.unlock(sh, w)
	if _, ok := storeGet(st, pair[0]); ok {
		t.Fatalf("%q, dropped at rest, is still held", pair[0])
	}
	if v, ok := storeGet(st, pair[1]); !ok || v != 3 {
		t.Fatalf("%q: %d,%v, want 3", pair[1], v, ok)
	}
	checkStore(t, st)
}

// The same two keys under concurrency: goroutines take both, each
// setting its key at rest every other call, while sweeps drop them and
// move one into the other's slot. Every Take must come back with its own
// key's state, never the other's.
func TestInlineKeysSameHeader(t *testing.T) {
	var ids map[string]int64 // read-only once set
	st := New(Config{Shards: 1},
		func(s *ownedState, key string, _ int64) bool { s.owner = ids[key]; return false },
		func(s *ownedState, _ bool, _ []byte, _ int64) bool { return s.v%2 == 0 })
	st.splits = false
	pair := sameTag(st, "tag-")
	ids = map[string]int64{pair[0]: 1, pair[1]: 2}
	rounds := 5_000
	if testing.Short() {
		rounds = 2_000
	}
	var wrong atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range max(4, runtime.GOMAXPROCS(0)) {
		key := pair[g%2]
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				h, _ := st.Take(key, 0, true)
				if h.State().owner != ids[key] {
					wrong.Add(1)
				}
				h.State().v = int64(i % 2) // at rest every other call
				h.Release()
			}
		})
	}
	// Sweep until both the rounds are done and keys were dropped and set
	// up again often enough: on a loaded machine the goroutines may not
	// have started when the rounds are over.
	for i := 0; i < rounds || st.Stats().EvictedAtRest < 100; i++ {
		st.Sweep(0) // drops whichever key is at rest: the other may move
	}
	stop.Store(true)
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d Takes came back with the other key's state", n)
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}

// Keys of 1 to inlineMax bytes are kept inline and found by their bytes
// alone, keys of any other length in the arena; keys that differ only in
// their last byte, in length, or by trailing zero bytes stay apart.
func TestInlineKeysApart(t *testing.T) {
	st := newTestStore(0, 1)
	var keys []string
	for n := 1; n <= inlineMax+2; n++ {
		base := strings.Repeat("k", n-1)
		keys = append(keys, base+"a", base+"b", base+"\x00")
	}
	keys = append(keys, "\x00\x00", strings.Repeat("\x00", inlineMax))
	pair := sameTag(st, "tag-") // equal headers: the first's slot is locked, then let go, on the way to the second
	keys = append(keys, pair[0], pair[1])
	for i, k := range keys {
		storeSet(st, k, int64(2*i+1))
	}
	for i, k := range keys {
		if v, ok := storeGet(st, k); !ok || v != int64(2*i+1) {
			t.Fatalf("key %q: %d,%v, want %d", k, v, ok, 2*i+1)
		}
		r := refTo(st, k)
		if r.inline() != (len(k) <= inlineMax) {
			t.Fatalf("key %q of %d bytes: inline %v", k, len(k), r.inline())
		}
	}
	if s := st.Stats(); s.Keys != len(keys) {
		t.Fatalf("%d keys held, want %d", s.Keys, len(keys))
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}

// refOf's words are the key's bytes, little-endian, zero past its end:
// what keyOf reads back, for every inline length.
func TestRefOfWords(t *testing.T) {
	const src = "0123456789ab\xff\x00"
	for n := 1; n <= inlineMax; n++ {
		for _, key := range []string{src[:n], src[len(src)-n:], strings.Repeat("\xff", n)} {
			k := refOf(key, 0)
			var b [16]byte
			binary.LittleEndian.PutUint32(b[:4], uint32(k.want))
			binary.LittleEndian.PutUint64(b[4:12], k.kx)
			if string(b[:n]) != key || strings.Trim(string(b[n:]), "\x00") != "" || int(k.want&lenBits>>lenShift) != n {
				t.Fatalf("key %q: words %#x %#x", key, k.want&offMask, k.kx)
			}
		}
	}
}

// Rule 15 whatever the hints say: the store against a map while shards
// split, tables grow and keys are dropped at rest, with the store's hint
// set before every look-up to a random shard, whose own hint names a
// slot, header and kx seen together in that shard's tables at some
// earlier step, or a mix of such, or one with key's own kx (so that only
// the check once the slot is held tells a key with the same length and
// first bytes apart), or this very key's slot. Keys
// share long prefixes ("u:…"), so that most hints match a key's length
// and first bytes. A Take through the hints must return the key's own
// slot, or none, and every value must stay as set.
func TestStoreHintAnyValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	st := newTestStore(0, 2)
	ref := map[string]int64{}
	pair := sameTag(st, "u:")
	keyOf := func() string {
		switch r := rng.IntN(20); {
		case r == 0:
			return pair[rng.IntN(2)]
		case r == 1:
			return testKey(rng.IntN(300)) // some long, some ""
		}
		return fmt.Sprintf("u:%d", rng.IntN(3000))
	}
	seen := map[*shard[testState]][]hotPair{}
	record := func() {
		shards := st.allShards()
		sh := shards[rng.IntN(len(shards))]
		t := sh.tab.Load()
		if t == nil {
			return
		}
		i := rng.IntN(len(t.slots))
		if w := atomic.LoadUint64(&t.slots[i].hdr); w != 0 && w&lockBit == 0 {
			ps := seen[sh]
			p := hotPair{&t.slots[i], w | refBit, atomic.LoadUint64(&t.slots[i].kx)}
			if len(ps) < 512 {
				seen[sh] = append(ps, p)
			} else {
				ps[rng.IntN(len(ps))] = p
			}
		}
	}
	var hits, steps int
	hint := func(key string) {
		shards := st.allShards()
		sh := shards[rng.IntN(len(shards))]
		st.hot.Store(sh)
		if ps := seen[sh]; len(ps) > 0 {
			p := ps[rng.IntN(len(ps))]
			switch rng.IntN(4) {
			case 0: // parts of different hints
				p.sl, p.kx = ps[rng.IntN(len(ps))].sl, ps[rng.IntN(len(ps))].kx
			case 1: // another key's slot and header, with key's own kx
				var k kref
				k.words(key)
				p.kx = k.kx
			}
			sh.hotSlot.Store(p.sl)
			sh.hotHdr.Store(p.hdr)
			sh.hotKx.Store(p.kx)
		}
		if rng.IntN(3) == 0 { // this very key, where it is now
			own := st.shardOf(maphash.String(st.seed, key))
			k := refTo(st, key)
			if tab := own.tab.Load(); tab != nil {
				if i, _ := tab.index(&k); i >= 0 {
					st.hot.Store(own)
					own.remember(&tab.slots[i], atomic.LoadUint64(&tab.slots[i].hdr)|refBit, k.kx)
				}
			}
		}
		steps++
		if h := st.hot.Load(); h.hotSlot.Load() != nil {
			var k kref
			k.words(key)
			if k.inline() {
				if sl, rel, _ := h.takeHot(&k); sl != nil {
					hits++
					own := st.shardOf(maphash.String(st.seed, key))
					kt := refTo(st, key)
					tab := own.tab.Load()
					if i, _ := tab.index(&kt); own != h || i < 0 || &tab.slots[i] != sl {
						t.Fatalf("the store's hint took a slot that is not %q's (index %d, shard %p, hint's %p)", key, i, own, h)
					}
					sl.unlock(h, rel)
				}
			}
		}
	}
	const total = 150_000
	for i := 0; i < total; i++ {
		key := keyOf()
		hint(key)
		switch op := rng.IntN(100); {
		case op < 60:
			checkGet(t, st, ref, key, fmt.Sprintf("step %d", i))
			v := rng.Int64N(1000)
			hint(key)
			storeSet(st, key, v)
			ref[key] = v
		case op < 99:
			checkGet(t, st, ref, key, fmt.Sprintf("step %d", i))
		default:
			sweepRef(st, ref)
		}
		record()
		if i%(total/20) == 0 {
			checkStore(t, st)
		}
	}
	for k := range ref {
		hint(k)
		checkGet(t, st, ref, k, "end")
	}
	checkStore(t, st)
	if len(st.split) == 0 || hits < steps/20 {
		t.Fatalf("%d splits, %d of %d looks taken through the store's hint: the test does not exercise it", len(st.split), hits, steps)
	}
}

// sample takes about 1 call in hintEvery whatever the step by which the
// time moves between calls, even a step that is a multiple of a large
// power of two, for any key.
func TestSampleSpread(t *testing.T) {
	for _, step := range []int64{1, 7, 48, 64, 1000, 1 << 20} {
		for _, hs := range []uint64{0, 0x123456789abcdef, 1<<64 - 1} {
			const calls = 1 << 16
			n := 0
			for i := range int64(calls) {
				if sample(1_700_000_000_000_000_000+i*step, hs) {
					n++
				}
			}
			if want := calls / hintEvery; n < want/2 || n > 2*want {
				t.Errorf("step %d, hash %#x: %d of %d calls sampled, want about %d", step, hs, n, calls, want)
			}
		}
	}
}
