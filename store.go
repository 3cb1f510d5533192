package ratelimit

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Stats describes a limiter's keyed store.
type Stats struct {
	// Keys is the number of keys held now.
	Keys int
	// MaxKeys is the cap set by WithMaxKeys; 0 means no cap.
	MaxKeys int
	// Slots is the number of table slots allocated, a measure of memory.
	Slots int
	// Inserts counts keys added to the store.
	Inserts uint64
	// EvictedAtRest counts keys dropped because they were at rest (back to
	// their full allowance). Dropping them changes no decision.
	EvictedAtRest uint64
	// EvictedLRU counts keys dropped to make room (at the cap, or at a
	// shard's 4 GiB of key bytes) while not at rest. They are chosen by
	// CLOCK, an approximation of least recently used: a key not used since
	// the clock hand last passed it. Such a key starts afresh if it returns.
	EvictedLRU uint64
}

// store is the sharded in-memory keyed store shared by the algorithms. It
// holds a state S per key, inline in open-addressed tables (one per shard,
// each behind its own mutex), so that an existing key costs a hash, a
// probe and no allocation.
//
// A shard keeps its keys' bytes in one arena, each key behind its length
// as a uvarint; a slot holds the key's hash tag, its offset in the arena
// and the state: 8 bytes plus the state. An earlier design kept a cloned
// string per key (a 16-byte header in the slot and a separate allocation
// for the bytes) and a 32-bit recency tick: about 108 B per token-bucket
// key with 10-byte keys, against about 50 B now. A key longer than
// maxKeyLen (4 GiB less a few bytes) is known by its first maxKeyLen
// bytes: two such keys sharing them share a state.
//
// Tables have any size, not only powers of two: a key's home slot is its
// tag scaled to the table's length (fastrange), tables grow by half at a
// load of maxLoad, so the load stays between about 0.55 and 0.85 at any
// key count.
//
// Keys at rest, as told by atRest, are dropped lazily: a table about to
// grow is swept first, Sweep sweeps every table, and a sweeper goroutine
// (WithSweepInterval) calls Sweep periodically. A sweep that leaves a table
// mostly empty rebuilds it smaller, and an arena more than half dead bytes
// is rebuilt from the live keys, so memory really comes back.
type store[S any] struct {
	seed        maphash.Seed
	shards      []shard[S]
	shardMask   uint64
	perShardMax int // 0: no cap
	maxKeys     int
	arenaMax    uint64 // the most key bytes a shard's arena holds: maxArena but in tests
	maxKeyLen   int    // the longest key told apart: arenaMax less room for its length
	init        func(s *S, now int64)
	atRest      func(s *S, now int64) bool

	closeOnce sync.Once
	stop      chan struct{}
	stopped   chan struct{}
}

type shard[S any] struct {
	mu     sync.Mutex
	slots  []slot[S]
	keys   []byte // the arena: each key's length as a uvarint, then its bytes
	dead   int    // bytes of keys that are no longer held
	n      int    // keys held
	restAt int64  // the latest instant at which a key was dropped at rest
	peek   S      // scratch state for peeking at an absent key
	cursor int    // the clock hand: where the next eviction sample starts

	inserts, evictedAtRest, evictedLRU uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

type slot[S any] struct {
	// tag is 31 bits of the key's hash, never 0 (0 marks an empty slot),
	// and refBit, set when the key is used and cleared when the clock hand
	// passes it.
	tag uint32
	off uint32 // where the key is in the shard's arena
	s   S
}

const (
	minSlots   = 8
	restGrace  = 10 * time.Second // how long a key rests before a growing table drops it
	evictProbe = 32               // keys sampled when choosing a victim at the cap

	refBit  = 1 << 31
	tagMask = refBit - 1

	// maxLoad is the load at which a table grows by half (so to about
	// 0.57); after a sweep, it grows only if more than sweptLoad full,
	// which spaces sweeps at least (maxLoad-sweptLoad)·len inserts apart.
	// Linear probing at 0.85 costs about 3.8 probes to find a key and 23
	// to find a free slot; tags are compared first, so a probe that does
	// not match costs no key comparison.
	maxLoad   = 0.85
	sweptLoad = 0.65

	// maxArena is the most bytes a shard's arena holds, offsets being
	// 32-bit; maxKeyLen leaves room for the length prefix.
	maxArena = math.MaxUint32
)

// newStore returns a store whose new keys are set up by init and whose
// keys are dropped when atRest.
func newStore[S any](cfg config, init func(s *S, now int64), atRest func(s *S, now int64) bool) *store[S] {
	nshards := cfg.shards
	perShard := 0
	if cfg.maxKeys > 0 {
		for nshards > 1 && nshards > cfg.maxKeys/16 {
			nshards /= 2
		}
		perShard = cfg.maxKeys / nshards
	}
	return &store[S]{
		seed:        maphash.MakeSeed(),
		shards:      make([]shard[S], nshards),
		shardMask:   uint64(nshards - 1),
		perShardMax: perShard,
		maxKeys:     cfg.maxKeys,
		arenaMax:    maxArena,
		maxKeyLen:   int(min(maxArena-binary.MaxVarintLen64, math.MaxInt)),
		init:        init,
		atRest:      atRest,
	}
}

// startSweeper runs Sweep every interval of nc's clock until close.
func (st *store[S]) startSweeper(interval time.Duration, nc *nanoClock) {
	st.stop = make(chan struct{})
	st.stopped = make(chan struct{})
	go func() {
		defer close(st.stopped)
		for {
			t := nc.clock.NewTimer(interval)
			select {
			case <-st.stop:
				t.Stop()
				return
			case <-t.C():
				st.sweep(nc.now())
			}
		}
	}()
}

// close stops the sweeper, if any, and waits for it to return.
func (st *store[S]) close() {
	st.closeOnce.Do(func() {
		if st.stop != nil {
			close(st.stop)
			<-st.stopped
		}
	})
}

func (st *store[S]) hash(key string) (sh *shard[S], tag uint32) {
	h := maphash.String(st.seed, key)
	return &st.shards[h&st.shardMask], tagOf(h)
}

// tagOf returns the tag of a key's hash: 31 bits, never 0. The shard is
// chosen by the hash's low bits, the tag taken from its high bits.
func tagOf(h uint64) uint32 {
	tag := uint32(h>>32) & tagMask
	if tag == 0 {
		tag = 1
	}
	return tag
}

// home returns the home slot of tag in a table of n slots: the tag's 31
// bits scaled to [0, n), so any n works and keys keep their hash order.
func home(tag uint32, n int) int {
	return int(uint64(tag&tagMask) * uint64(n) >> 31)
}

// arenaKey returns the bytes of the key stored at off in an arena.
func arenaKey(arena []byte, off uint32) []byte {
	b := arena[off:]
	if n := b[0]; n < 0x80 { // keys shorter than 128 bytes: one length byte
		return b[1 : 1+int(n)]
	}
	n, w := binary.Uvarint(b)
	return b[w : w+int(n)]
}

// lock locks key's shard and returns it with a pointer to key's state,
// valid until sh.mu.Unlock. If the key is absent and create is true, it is
// inserted, its state set up by init, and fresh is true (now also decides
// which keys are at rest if one must make room); if create is false, s
// points to a scratch state set up the same way, valid until the unlock,
// which the caller may read and step but which is not stored.
//
// A new key's state is set up at now, or at the latest instant the shard
// dropped a key at rest if that is later (a clock that went backwards):
// a key dropped at rest and seen again earlier never gets more than it
// would have had if it had been kept.
func (st *store[S]) lock(key string, now int64, create bool) (sh *shard[S], s *S, fresh bool) {
	if len(key) > st.maxKeyLen {
		key = key[:st.maxKeyLen]
	}
	// Written out rather than calls to st.hash and a shard method: the
	// compiler does not inline those into a generic function's body today.
	h := maphash.String(st.seed, key)
	sh = &st.shards[h&st.shardMask]
	tag := tagOf(h)
	sh.mu.Lock()
	if n := len(sh.slots); n > 0 {
		for i := home(tag, n); ; {
			sl := &sh.slots[i]
			t := sl.tag
			if t&tagMask == tag {
				// string(arenaKey(sh.keys, sl.off)) == key, with the case
				// of keys shorter than 128 bytes written out to be inlined.
				var same bool
				if off := int(sl.off); len(key) < 0x80 {
					end := off + 1 + len(key)
					same = end <= len(sh.keys) && int(sh.keys[off]) == len(key) && string(sh.keys[off+1:end]) == key
				} else {
					same = string(arenaKey(sh.keys, sl.off)) == key
				}
				if same {
					if t&refBit == 0 {
						sl.tag = t | refBit
					}
					return sh, &sl.s, false
				}
			}
			if t == 0 {
				break
			}
			if i++; i == n {
				i = 0
			}
		}
	}
	if !create {
		var zero S
		sh.peek = zero
		st.init(&sh.peek, max(now, sh.restAt))
		return sh, &sh.peek, true
	}
	return sh, st.insert(sh, key, tag, now), true
}

// insert adds key, known to be absent, and returns its zero state. Its
// reference bit is clear: a key seen once is the first to go at the cap.
//
// A table about to grow is first swept of keys that have been at rest for
// restGrace; it grows only if that leaves it more than sweptLoad full.
// Sweeps thus cost O(1) amortised per insert, and keys in use are not
// churned out and back in when they come to rest between uses. Requires
// sh.mu held.
func (st *store[S]) insert(sh *shard[S], key string, tag uint32, now int64) *S {
	if st.perShardMax > 0 && sh.n >= st.perShardMax {
		st.evictOne(sh, now)
	}
	need := uint64(varintLen(len(key)) + len(key))
	for sh.n > 0 && uint64(len(sh.keys)-sh.dead)+need > st.arenaMax {
		st.evictOne(sh, now) // 4 GiB of keys in one shard: make room
	}
	if float64(sh.n+1) > maxLoad*float64(len(sh.slots)) {
		st.sweepShard(sh, now, false)
		if float64(sh.n+1) > sweptLoad*float64(len(sh.slots)) {
			sh.resize(max(minSlots, len(sh.slots)*3/2))
		}
	}
	if uint64(len(sh.keys))+need > st.arenaMax || sh.dead*2 > len(sh.keys) {
		sh.compact()
	}
	n := len(sh.slots)
	i := home(tag, n)
	for sh.slots[i].tag != 0 {
		if i++; i == n {
			i = 0
		}
	}
	sl := &sh.slots[i]
	sl.tag = tag
	sl.off = uint32(len(sh.keys))
	sh.keys = binary.AppendUvarint(sh.keys, uint64(len(key)))
	sh.keys = append(sh.keys, key...) // a copy: never pins a caller's buffer
	sh.n++
	sh.inserts++
	st.init(&sl.s, max(now, sh.restAt))
	return &sl.s
}

func varintLen(n int) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}

// sweepShard drops the keys at rest at now (all is set) or at rest for at
// least restGrace, shrinks the table if that left it mostly empty, and
// rebuilds the arena if it is mostly dead bytes. Requires sh.mu held.
func (st *store[S]) sweepShard(sh *shard[S], now int64, all bool) {
	if !all {
		now -= int64(restGrace) // at rest then, and untouched since
	}
	for j := 0; j < len(sh.slots); {
		sl := &sh.slots[j]
		if sl.tag != 0 && st.atRest(&sl.s, now) {
			sh.deleteAt(j) // a later key may move here: look again
			sh.evictedAtRest++
			sh.restAt = max(sh.restAt, now)
			continue
		}
		j++
	}
	if !sh.maybeShrink() && sh.dead*2 > len(sh.keys) {
		sh.compact()
	}
}

// evictOne drops one key to make room, by CLOCK with a preference for keys
// at rest. It samples up to evictProbe keys from the clock hand: the first
// key at rest in the sample goes (which changes no decision); else the
// first key not used since the hand last passed it, clearing the reference
// bits of the keys the hand passes on the way (their second chance); else,
// every key of the sample having been used, the first of the sample.
// Requires sh.mu held and sh.n > 0.
func (st *store[S]) evictOne(sh *shard[S], now int64) {
	n := len(sh.slots)
	victim := -1
	i := sh.cursor
	for seen := 0; seen < evictProbe && seen < sh.n; {
		if i >= n {
			i = 0
		}
		sl := &sh.slots[i]
		if sl.tag == 0 {
			i++
			continue
		}
		seen++
		if st.atRest(&sl.s, now) {
			sh.deleteAt(i)
			sh.evictedAtRest++
			sh.restAt = max(sh.restAt, now)
			sh.cursor = i
			return
		}
		if victim < 0 {
			if sl.tag&refBit == 0 {
				victim = i
			} else {
				sl.tag &^= refBit
			}
		}
		i++
	}
	if victim < 0 {
		victim = sh.cursor % n
		for sh.slots[victim].tag == 0 {
			if victim++; victim == n {
				victim = 0
			}
		}
	}
	sh.deleteAt(victim)
	sh.evictedLRU++
	sh.cursor = victim // a later key may have moved here: it is next
}

// deleteAt empties slot i and shifts later keys of its probe run back so
// that no tombstone is needed. The key's bytes become dead in the arena.
// Requires sh.mu held.
func (sh *shard[S]) deleteAt(i int) {
	n := len(sh.slots)
	k := len(arenaKey(sh.keys, sh.slots[i].off))
	sh.dead += varintLen(k) + k
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		sl := &sh.slots[j]
		if sl.tag == 0 {
			break
		}
		h := home(sl.tag, n)
		// The key at j may move to i unless its home lies cyclically in (i, j].
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			sh.slots[i] = *sl
			i = j
		}
	}
	sh.slots[i] = slot[S]{}
	sh.n--
}

// maybeShrink rebuilds a table that is at most one-eighth full at about
// sweptLoad, and its arena with it, so that memory returns after a flood
// of keys. It reports whether it did. Requires sh.mu held.
func (sh *shard[S]) maybeShrink() bool {
	if len(sh.slots) <= minSlots || sh.n*8 > len(sh.slots) {
		return false
	}
	if sh.n == 0 {
		sh.slots, sh.keys, sh.dead, sh.cursor = nil, nil, 0, 0
		return true
	}
	sh.resize(max(minSlots, int(float64(sh.n)/sweptLoad)+1))
	sh.compact()
	return true
}

// resize rehashes into a table of size slots. Requires sh.mu held.
func (sh *shard[S]) resize(size int) {
	old := sh.slots
	sh.slots = make([]slot[S], size)
	for k := range old {
		if old[k].tag == 0 {
			continue
		}
		i := home(old[k].tag, size)
		for sh.slots[i].tag != 0 {
			if i++; i == size {
				i = 0
			}
		}
		sh.slots[i] = old[k]
	}
	sh.cursor = 0
}

// compact rebuilds the arena from the keys held, in table order, dropping
// dead bytes. Requires sh.mu held.
func (sh *shard[S]) compact() {
	live := len(sh.keys) - sh.dead
	if sh.n == 0 {
		sh.keys, sh.dead = nil, 0
		return
	}
	keys := make([]byte, 0, live+live/4)
	for i := range sh.slots {
		sl := &sh.slots[i]
		if sl.tag == 0 {
			continue
		}
		k := arenaKey(sh.keys, sl.off)
		sl.off = uint32(len(keys))
		keys = binary.AppendUvarint(keys, uint64(len(k)))
		keys = append(keys, k...)
	}
	sh.keys, sh.dead = keys, 0
}

// sweep drops every key at rest at now and shrinks tables that emptied.
func (st *store[S]) sweep(now int64) {
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		st.sweepShard(sh, now, true)
		sh.mu.Unlock()
	}
}

func (st *store[S]) stats() Stats {
	s := Stats{MaxKeys: st.maxKeys}
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		s.Keys += sh.n
		s.Slots += len(sh.slots)
		s.Inserts += sh.inserts
		s.EvictedAtRest += sh.evictedAtRest
		s.EvictedLRU += sh.evictedLRU
		sh.mu.Unlock()
	}
	return s
}
