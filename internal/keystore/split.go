package keystore

import (
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
)

// splitLoad is the load of the tables a split leaves: that of a table
// just grown by a quarter from maxLoad.
const splitLoad = maxLoad * 4 / 5

// splitShard splits sh in two instead of growing its table (rule 8): the
// keys whose hash has the next bit past sh.own set move to a new shard,
// the others stay, each half in a table of its own sized at splitLoad
// (the load a table has just after growing),
// with its arena compacted. The work is that of one rebuild of sh, whose
// size splitKeys bounds, so a store without a cap never makes a call wait
// for more than that, whatever its number of keys.
//
// It keeps rule 9 as rebuild does: every slot of the old table is locked
// for good as it is copied, and the new shard's table is published before
// the directory sends any key to it. A reader that read the directory
// before the split and finds its key gone from sh goes to takeSlow, which
// sends it back to the directory, so a key is only ever inserted into the
// shard that holds its hashes (checked under that shard's mutex). The new
// shard starts no earlier than sh's last drop at rest (rule 7). Requires
// sh.mu held, a store without a cap, and a table at least half full.
func (st *Store[S]) splitShard(sh *shard[S]) {
	old := sh.tab.Load()
	sh.pass = max(sh.pass, 2*len(old.slots)) // two passes; the new tables' slots are about as many
	bit := sh.own + 1
	ob := old.keys
	// Which half each key goes to, without locking its slot: under sh.mu
	// no key moves and a key's bytes never change (rule 10); readers only
	// change the lock and reference bits.
	side := make([]uint64, (len(old.slots)+63)/64)
	var n, bytes [2]int
	for k := range old.slots {
		w := atomic.LoadUint64(&old.slots[k].hdr)
		if w == 0 {
			continue
		}
		key := keyOf(old, &old.slots[k], w, &sh.kbuf)
		b := 0
		if maphash.Bytes(st.seed, key)&bit != 0 {
			b = 1
			side[k/64] |= 1 << (k % 64)
		}
		n[b]++
		if w&lenBits == 0 {
			bytes[b] += keyBytes(len(key))
		}
	}
	var nt [2]*table[S]
	var nb [2][]byte
	for b := range nt {
		nt[b] = &table[S]{slots: make([]slot[S], max(minSlots, int(float64(n[b])/splitLoad)+1))}
		nb[b] = make([]byte, 0, bytes[b]) // the next insert grows it
	}
	waiting := false
	for k := range old.slots {
		sl := &old.slots[k]
		if atomic.LoadUint64(&sl.hdr) == 0 {
			continue
		}
		w := sl.lockWait() // locked for good
		b := int(side[k/64] >> (k % 64) & 1)
		if w&lenBits == 0 {
			key := arenaKey(ob, w&offMask)
			w = w&^offMask | uint64(len(nb[b]))
			nb[b] = binary.AppendUvarint(nb[b], uint64(len(key))+1)
			nb[b] = append(nb[b], key...)
		}
		t := nt[b]
		size := len(t.slots)
		i := home(w, size)
		for t.slots[i].hdr != 0 {
			if i++; i == size {
				i = 0
			}
		}
		t.slots[i] = slot[S]{hdr: w, kx: atomic.LoadUint64(&sl.kx), s: sl.s}
	}
	for b := range nt {
		nt[b].keys = nb[b][:cap(nb[b])]
	}

	ns := &shard[S]{scram: rand.Uint64(), own: sh.own | bit, pat: sh.pat | bit, restAt: sh.restAt}
	ns.park.Lock() // no token yet
	ns.n, ns.used = n[1], len(nb[1])
	ns.cursor = handSlot(0, len(nt[1].slots), ns.scram)
	ns.tab.Store(nt[1])

	sh.tab.Store(nt[0])
	sh.forget() // the hint's slot, if any, is an old one now
	sh.own |= bit
	sh.n, sh.used, sh.dead = n[0], len(nb[0]), 0
	sh.hand, sh.cursor = 0, handSlot(0, len(nt[0].slots), sh.scram)
	for k := range old.slots { // a caller parked on an old slot looks again
		if atomic.LoadUint64(&old.slots[k].hdr)&waitBit != 0 {
			waiting = true
			break
		}
	}
	if waiting {
		sh.wakeQueue()
	}

	st.dirMu.Lock()
	d := st.dir.Load()
	grown := ns.own > d.mask
	wrote := 0
	if grown {
		d, wrote = d.doubled()
	}
	for i := ns.pat; i <= d.mask; i += ns.own + 1 {
		wrote += d.set(i, ns)
	}
	st.dirPass = max(st.dirPass, wrote)
	if grown {
		st.dir.Store(d)
	}
	st.split = append(st.split, ns)
	st.dirMu.Unlock()
}
