package keystore

import (
	"fmt"
	"testing"
)

// Rule 14: under a cap, "" sits in its own shard, outside the shards the
// cap divides: a flood of new keys that are never at rest evicts others,
// never "", and the store holds at most MaxKeys keys and "" besides.
func TestGlobalKeyOutsideCap(t *testing.T) {
	const capKeys = 64
	st := newTestStore(capKeys, 1)
	storeSet(st, "", 1) // odd: not at rest
	for i := range 5000 {
		storeSet(st, fmt.Sprint("k", i), 1)
		if i%97 == 0 {
			if v, ok := storeGet(st, ""); !ok || v != 1 {
				t.Fatalf("after %d new keys: \"\" = %d, %v", i+1, v, ok)
			}
		}
	}
	s := st.Stats()
	if s.Keys > capKeys+1 || s.EvictedLRU < 5000-capKeys {
		t.Fatalf("%+v: want at most %d keys and about %d evicted", s, capKeys+1, 5000-capKeys)
	}
	if v, ok := storeGet(st, ""); !ok || v != 1 {
		t.Fatalf(`"" = %d, %v after the flood`, v, ok)
	}
	checkStore(t, st)
}
