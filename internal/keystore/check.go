package keystore

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
)

// Check verifies every shard's tables against rules 9 and 10: each key is
// found from its home slot without crossing an empty slot, no slot is
// left locked, no key is held twice, the shard's key count is what its
// table holds, and the arena's dead bytes are what the keys do not use, and each key is
// in the shard the directory sends its hash to.
// It takes each shard's mutex in turn; it is for tests, with no call in
// flight.
func (st *Store[S]) Check() error {
	for si, sh := range st.allShards() {
		sh.mu.Lock()
		err := st.checkShard(si, sh)
		sh.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (st *Store[S]) checkShard(si int, sh *shard[S]) error {
	t := sh.tab.Load()
	if t == nil {
		if sh.n != 0 {
			return fmt.Errorf("shard %d: no table, %d keys", si, sh.n)
		}
		return nil
	}
	slots, arena := t.slots, t.keys[:sh.used]
	n := len(slots)
	held, live := 0, 0
	seen := map[string]bool{}
	for i := range slots {
		w := atomic.LoadUint64(&slots[i].hdr)
		if w == 0 {
			continue
		}
		if w&(lockBit|waitBit) != 0 {
			return fmt.Errorf("shard %d slot %d: locked at rest (header %#x)", si, i, w)
		}
		held++
		var buf [inlineMax]byte
		k := string(keyOf(t, &slots[i], w, &buf))
		if w&lenBits == 0 {
			live += keyBytes(len(k))
			if w&offMask >= uint64(len(arena)) {
				return fmt.Errorf("shard %d slot %d: key at %d past the arena's %d bytes in use", si, i, w&offMask, len(arena))
			}
		} else if n := int(w & lenBits >> lenShift); n > inlineMax || len(k) != n || (n <= 4 && atomic.LoadUint64(&slots[i].kx) != 0) {
			return fmt.Errorf("shard %d slot %d: inline key %q of length %d (header %#x)", si, i, k, n, w)
		}
		if w&lenBits == 0 && len(k) >= 1 && len(k) <= inlineMax {
			return fmt.Errorf("shard %d slot %d: key %q of %d bytes in the arena, not inline", si, i, k, len(k))
		}
		if seen[k] {
			return fmt.Errorf("shard %d: key %q held twice", si, k)
		}
		seen[k] = true
		h := maphash.String(st.seed, k)
		if tag := tagOf(h); tag != w&tagBits {
			return fmt.Errorf("shard %d slot %d: key %q has tag %x, slot %x", si, i, k, tag, w)
		}
		if h&sh.own != sh.pat {
			return fmt.Errorf("shard %d slot %d: key %q (hash %#x) is not of the shard's hashes (%#x of %#x)", si, i, k, h, sh.pat, sh.own)
		}
		if sh == st.glob {
			if k != "" {
				return fmt.Errorf("shard %d: key %q in the global key's shard", si, k)
			}
		} else if d := st.dir.Load(); k == "" || d.at(h) != sh {
			return fmt.Errorf("shard %d: key %q is held by a shard the directory does not send it to", si, k)
		}
		for j := home(w, n); j != i; j = (j + 1) % n {
			if atomic.LoadUint64(&slots[j].hdr) == 0 {
				return fmt.Errorf("shard %d: key %q at %d unreachable from its home %d (empty %d)", si, k, i, home(w, n), j)
			}
		}
	}
	if held != sh.n || live != len(arena)-sh.dead {
		return fmt.Errorf("shard %d: %d keys held (n %d), %d live key bytes (arena %d, dead %d)", si, held, sh.n, live, len(arena), sh.dead)
	}
	return nil
}
