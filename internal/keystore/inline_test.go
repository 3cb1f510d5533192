package keystore

import (
	"encoding/binary"
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
