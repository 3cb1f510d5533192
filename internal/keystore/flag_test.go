package keystore

import (
	"math/rand/v2"
	"testing"
)

// The flag against a map on random inserts, flag changes, drops at rest
// and sweeps: a key's flag is what init gave it or the last SetFlag set,
// through the moves of backward-shift deletion, growth, shrinking and the
// arena's compaction; atRest is given the key's bytes exactly when it is
// flagged; a key dropped and set up again gets init's flag afresh; a peek
// reports init's flag and stores nothing.
func TestStoreFlagKeptThroughMoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	initFlag := func(key string) bool { return len(key)%3 == 0 }
	var bad string
	st := New(Config{Shards: 2},
		func(s *testState, key string, now int64) bool { return initFlag(key) },
		func(s *testState, flagged bool, key []byte, now int64) bool {
			if flagged != (key != nil) && bad == "" {
				bad = "atRest given key bytes without the flag, or none with it"
			}
			return s.v%2 == 0
		})
	flag := map[string]bool{} // keys held, as far as the test knows
	for i := range 60_000 {
		key := testKey(rng.IntN(400))
		switch op := rng.IntN(100); {
		case op < 50: // a decision: check the flag, maybe change it
			h, fresh := st.Take(key, 0, true)
			want, held := flag[key]
			if fresh || !held {
				want = initFlag(st.Kept(key)) // new, or dropped at rest since; init sees the kept form
			}
			if h.Flagged() != want {
				t.Fatalf("step %d: %q flagged %v, want %v (fresh %v)", i, key, h.Flagged(), want, fresh)
			}
			if rng.IntN(3) == 0 {
				want = !want
				h.SetFlag(want)
			}
			h.State().v = int64(rng.IntN(4)) // even: at rest
			h.Release()
			flag[key] = want
		case op < 60: // a peek at a key that may be absent
			h, fresh := st.Take(key, 0, false)
			if fresh && h.Flagged() != initFlag(st.Kept(key)) {
				t.Fatalf("step %d: peek at %q flagged %v", i, key, h.Flagged())
			}
			if fresh {
				h.SetFlag(!h.Flagged()) // a peek stores nothing
			}
			h.Release()
		case op < 62:
			st.Sweep(0)
		}
		if bad != "" {
			t.Fatal(bad)
		}
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}
