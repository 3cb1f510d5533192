package ratelimit

import (
	"hash/maphash"
	"strings"
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
	// EvictedLRU counts keys dropped at the cap while not at rest, least
	// recently used first. Such a key starts afresh if it returns.
	EvictedLRU uint64
}

// store is the sharded in-memory keyed store shared by the algorithms. It
// holds a state S per key, inline in open-addressed tables (one per shard,
// each behind its own mutex), so that an existing key costs a hash, a
// probe and no allocation.
//
// Keys at rest, as told by atRest, are dropped lazily: a table about to
// grow is swept first, Sweep sweeps every table, and a sweeper goroutine
// (WithSweepInterval) calls Sweep periodically. A sweep that leaves a table
// mostly empty rebuilds it smaller, so memory really comes back.
type store[S any] struct {
	seed        maphash.Seed
	shards      []shard[S]
	shardMask   uint64
	perShardMax int // 0: no cap
	maxKeys     int
	init        func(s *S, now int64)
	atRest      func(s *S, now int64) bool

	closeOnce sync.Once
	stop      chan struct{}
	stopped   chan struct{}
}

type shard[S any] struct {
	mu     sync.Mutex
	slots  []slot[S] // len is 0 or a power of two
	n      int       // keys held
	tick   uint32    // access counter, for LRU
	restAt int64     // the latest instant at which a key was dropped at rest
	peek   S         // scratch state for peeking at an absent key
	cursor int       // where the next eviction sample starts

	inserts, evictedAtRest, evictedLRU uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

type slot[S any] struct {
	key  string
	tag  uint32 // high half of the key's hash, never 0; 0 marks an empty slot
	used uint32 // shard tick at last access
	s    S
}

const (
	minSlots   = 8
	restGrace  = 10 * time.Second // how long a key rests before a growing table drops it
	evictProbe = 32               // keys sampled when choosing a victim at the cap
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
	tag = uint32(h >> 32)
	if tag == 0 {
		tag = 1
	}
	return &st.shards[h&st.shardMask], tag
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
	sh, tag := st.hash(key)
	sh.mu.Lock()
	sh.tick++
	if len(sh.slots) > 0 {
		mask := len(sh.slots) - 1
		for i := int(tag) & mask; ; i = (i + 1) & mask {
			sl := &sh.slots[i]
			if sl.tag == tag && sl.key == key {
				sl.used = sh.tick
				return sh, &sl.s, false
			}
			if sl.tag == 0 {
				break
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

// insert adds key, known to be absent, and returns its zero state.
// A table about to grow is first swept of keys that have been at rest for
// restGrace; it grows only if that leaves it more than half full. Sweeps
// thus cost O(1) amortised per insert, and keys in use are not churned out
// and back in when they come to rest between uses. Requires sh.mu held.
func (st *store[S]) insert(sh *shard[S], key string, tag uint32, now int64) *S {
	if st.perShardMax > 0 && sh.n >= st.perShardMax {
		st.evictOne(sh, now)
	}
	if (sh.n+1)*4 > len(sh.slots)*3 {
		st.sweepShard(sh, now, false)
		if (sh.n+1)*2 > len(sh.slots) {
			sh.resize(max(minSlots, len(sh.slots)*2))
		}
	}
	mask := len(sh.slots) - 1
	i := int(tag) & mask
	for sh.slots[i].tag != 0 {
		i = (i + 1) & mask
	}
	sl := &sh.slots[i]
	sl.key = strings.Clone(key) // do not pin a caller's larger buffer
	sl.tag = tag
	sl.used = sh.tick
	sh.n++
	sh.inserts++
	st.init(&sl.s, max(now, sh.restAt))
	return &sl.s
}

// sweepShard drops the keys at rest at now (all is set) or at rest for at
// least restGrace, and shrinks the table if that left it mostly empty.
// Requires sh.mu held.
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
	sh.maybeShrink()
}

// evictOne drops one key to make room at the cap: the first key at rest
// among a sample of keys from the sweep cursor, else the least recently
// used of the sample. Requires sh.mu held.
func (st *store[S]) evictOne(sh *shard[S], now int64) {
	mask := len(sh.slots) - 1
	victim := -1
	var oldest uint32
	seen := 0
	for i := sh.cursor & mask; seen < evictProbe && seen < sh.n; i = (i + 1) & mask {
		sl := &sh.slots[i]
		if sl.tag == 0 {
			continue
		}
		seen++
		if st.atRest(&sl.s, now) {
			sh.deleteAt(i)
			sh.evictedAtRest++
			sh.restAt = max(sh.restAt, now)
			return
		}
		if age := sh.tick - sl.used; victim < 0 || age > oldest {
			victim, oldest = i, age
		}
	}
	sh.cursor = victim + 1
	sh.deleteAt(victim)
	sh.evictedLRU++
}

// deleteAt empties slot i and shifts later keys of its probe run back so
// that no tombstone is needed. Requires sh.mu held.
func (sh *shard[S]) deleteAt(i int) {
	mask := len(sh.slots) - 1
	j := i
	for {
		j = (j + 1) & mask
		sl := &sh.slots[j]
		if sl.tag == 0 {
			break
		}
		home := int(sl.tag) & mask
		// The key at j may move to i unless its home lies cyclically in (i, j].
		if (i <= j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			sh.slots[i] = *sl
			i = j
		}
	}
	sh.slots[i] = slot[S]{}
	sh.n--
}

// maybeShrink rebuilds a table that is at most one-eighth full at half
// load, so that memory returns after a flood of keys. Requires sh.mu held.
func (sh *shard[S]) maybeShrink() {
	if len(sh.slots) <= minSlots || sh.n*8 > len(sh.slots) {
		return
	}
	if sh.n == 0 {
		sh.slots = nil
		return
	}
	size := minSlots
	for size < sh.n*2 {
		size *= 2
	}
	sh.resize(size)
}

// resize rehashes into a table of size slots. Requires sh.mu held.
func (sh *shard[S]) resize(size int) {
	old := sh.slots
	sh.slots = make([]slot[S], size)
	mask := size - 1
	for k := range old {
		if old[k].tag == 0 {
			continue
		}
		i := int(old[k].tag) & mask
		for sh.slots[i].tag != 0 {
			i = (i + 1) & mask
		}
		sh.slots[i] = old[k]
	}
	sh.cursor = 0
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
