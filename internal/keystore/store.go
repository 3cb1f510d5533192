package keystore

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// Config sets a store's shape.
type Config struct {
	// Shards is the number of shards asked for, a power of two in
	// [1, 65536]. Under a cap the store may take fewer or more (see New).
	Shards int
	// MaxKeys caps the keys held; 0 means no cap.
	MaxKeys int
	// Secret keys the digest by which the store keeps a key longer than
	// keyhash.Short (rule 10); nil means a random one of its own.
	Secret *keyhash.Secret
	// Evicted, if not nil, is called each time a key not at rest is
	// dropped to make room (rule 5), under its shard's mutex: it must be
	// quick and must not call the store.
	Evicted func()
}

// Stats describes a store.
type Stats struct {
	Keys          int    // keys held now
	MaxKeys       int    // the cap; 0 means none
	Slots         int    // table slots allocated, a measure of memory
	Inserts       uint64 // keys added
	EvictedAtRest uint64 // keys dropped at rest (rule 4)
	EvictedLRU    uint64 // keys dropped to make room while not at rest (rule 5)
}

// Store is the sharded keyed store: a state S per key, inline in
// open-addressed tables, one per shard. See the package doc for its rules.
// Build it with New; it is safe for concurrent use.
type Store[S any] struct {
	seed   maphash.Seed
	shards []shard[S] // the shards the store starts with
	// dir maps a key's hash to its shard: entry h&mask. Without a cap a
	// shard that would grow past splitKeys splits in two instead (see
	// split), so entries change and the directory doubles; a new
	// directory is published whole, its entries changed in place (see
	// directory).
	dir   atomic.Pointer[directory[S]]
	dirMu sync.Mutex  // serialises splits' changes to dir; taken after a shard's mu
	split []*shard[S] // the shards made by splits, under dirMu
	// dirPass is the most directory entries (and page pointers) one split
	// wrote, under dirMu: the growth benchmark's measure of the pause the
	// directory's growth adds (see directory).
	dirPass int
	splits  bool // whether shards split (no cap)
	// global and globalTag are the hash and tag of the global key ""
	// (rule 14), computed once; glob is the shard that holds it, and
	// nothing else, outside the directory.
	global, globalTag uint64
	glob              *shard[S]
	// hot is the store's hint (rule 15): the shard whose hot key (rule
	// 13) a call on an inline key tries first, before it hashes. On a
	// line of its own: written now and then, read by every call.
	_           [64]byte
	hot         atomic.Pointer[shard[S]]
	_           [56]byte
	perShardMax int // 0: no cap
	maxKeys     int
	arenaMax    uint64          // the most key bytes a shard's arena holds: maxArena but in tests
	secret      *keyhash.Secret // keeps long keys (rule 10)
	init        func(s *S, key string, now int64) bool
	atRest      func(s *S, flagged bool, key []byte, now int64) bool
	evicted     func() // nil: none (Config.Evicted)
}

// directory is the map from a key's hash to its shard, entry h&mask, in
// pages of dirPage entries, so that doubling it is not a pass over every
// entry: a directory of one page doubles into a new page (at most dirPage
// entries copied), and a larger one into twice as many pages, each page
// of the old directory named twice, shared (owned false). An entry is
// changed in place (under the store's dirMu) only in a page the directory
// owns: a split that changes an entry in a shared page first copies that
// page and publishes the copy in its place. So the old directory, which
// readers may still hold, never changes once doubled, and no split copies
// more than the pages it changes entries in (a split changes entries
// 2^(depth of the directory - depth of the shard) apart: one or a few, as
// shards split at about the same depth), whatever the number of shards.
type directory[S any] struct {
	mask  uint64
	pages []atomic.Pointer[dirPageOf[S]]
	owned []bool // under dirMu: whether page j is this directory's alone
}

// dirPage is how many entries a directory page holds.
const (
	dirPageBits = 8
	dirPage     = 1 << dirPageBits
)

type dirPageOf[S any] [dirPage]atomic.Pointer[shard[S]]

// newDirectory returns a directory of n entries (a power of two), every
// page its own, every entry nil.
func newDirectory[S any](n int) *directory[S] {
	np := max(1, n/dirPage)
	d := &directory[S]{mask: uint64(n - 1), pages: make([]atomic.Pointer[dirPageOf[S]], np), owned: make([]bool, np)}
	for j := range d.pages {
		d.pages[j].Store(new(dirPageOf[S]))
		d.owned[j] = true
	}
	return d
}

// at returns the shard entry hs&mask names.
func (d *directory[S]) at(hs uint64) *shard[S] {
	i := hs & d.mask
	return d.pages[i>>dirPageBits].Load()[i&(dirPage-1)].Load()
}

// set makes entry i send its hashes to sh, first copying its page if the
// page is shared (see directory), and returns how many entries it wrote:
// 1, or 1 and a page. Requires the store's dirMu, and d the store's
// current directory or one not yet published.
func (d *directory[S]) set(i uint64, sh *shard[S]) int {
	j := i >> dirPageBits
	p := d.pages[j].Load()
	wrote := 1
	if !d.owned[j] {
		wrote += dirPage
		np := new(dirPageOf[S])
		for k := range p {
			np[k].Store(p[k].Load())
		}
		d.pages[j].Store(np)
		d.owned[j] = true
		p = np
	}
	p[i&(dirPage-1)].Store(sh)
	return wrote
}

// doubled returns the directory of twice d's entries, entry i naming what
// entry i&mask of d names, and how many entries or page pointers it
// wrote: at most dirPage, or twice d's pages. Requires the store's dirMu.
func (d *directory[S]) doubled() (*directory[S], int) {
	n := int(d.mask + 1)
	if 2*n <= dirPage {
		nd := newDirectory[S](2 * n)
		p, np := d.pages[0].Load(), nd.pages[0].Load()
		for i := range 2 * n {
			np[i].Store(p[i&(n-1)].Load())
		}
		return nd, 2 * n
	}
	np := len(d.pages) // n is a power of two: n >= dirPage, whole pages
	nd := &directory[S]{mask: d.mask<<1 | 1, pages: make([]atomic.Pointer[dirPageOf[S]], 2*np), owned: make([]bool, 2*np)}
	for j := range nd.pages {
		nd.pages[j].Store(d.pages[j%np].Load())
	}
	return nd, 2 * np
}

type shard[S any] struct {
	// tab is the current table, read without a lock; nil when the shard
	// holds no key. It is replaced only under mu.
	tab atomic.Pointer[table[S]]
	// hotSlot and hotHdr are the hint to the shard's hot key (rule 13):
	// a slot and the unlocked header it held, each read and written
	// atomically but not together (a reader checks what it gets). On
	// tab's line: read by every call, written only when they change.
	hotSlot atomic.Pointer[slot[S]]
	hotHdr  atomic.Uint64
	// hotKx is the hint's kx, for an inline key (rule 10): the hint is
	// compared whole, key bytes and all, before its compare-and-swap,
	// without a look at the slot's line, which another core may hold.
	hotKx atomic.Uint64
	_     [32]byte // keep the line read by every call off the line mu is on

	mu sync.Mutex
	// queue is where callers on a key held by others wait their turn
	// (rule 11): its holder alone waits on a slot, the rest park here.
	queue sync.Mutex
	// park is a binary semaphore, on which the queue's holder waits for
	// a token given by whoever lets go of a slot whose header has waitBit
	// set: it is locked but while a token waits, and token is set from
	// when a token is given until the holder takes it. (A sync.Mutex may
	// be unlocked by a goroutine other than its locker.)
	park  sync.Mutex
	token atomic.Bool

	kbuf   [inlineMax]byte // an inline key's bytes, for a pass under mu
	used   int             // bytes of the current arena in use
	dead   int             // bytes of keys that are no longer held
	n      int             // keys held
	restAt int64           // the latest instant at which a key was dropped at rest
	peek   S               // scratch state for peeking at an absent key
	cursor int             // where the next eviction sample starts: the clock hand
	hand   int             // the hand's step in its cycle through the table
	scram  uint64          // the key of the order the hand visits the slots in
	sample int             // keys an eviction looks through for one at rest, 0: evictProbe

	inserts, evictedAtRest, evictedLRU uint64

	// The shard holds the keys whose hash h has h&own == pat; own is
	// 2^depth-1. Both change only in a split of the shard, under mu.
	own, pat uint64

	// probed counts the slots looked at under mu by lookups, inserts,
	// evictions and deletes: their cost, which tests read.
	probed uint64
	// pass is the most slots one pass over a table (a rebuild, a sweep, a
	// split) walked under mu: the longest pause it made, which tests and
	// benchmarks read.
	pass int

	_ [64]byte // keep neighbouring shards apart
}

// table is a shard's slots and the arena their offsets point into, never
// changed once published. When the arena fills, a new table value shares
// the slots with a larger copy of the arena. The arena's length is its
// capacity; the shard counts the bytes in use.
type table[S any] struct {
	slots []slot[S]
	keys  []byte
}

type slot[S any] struct {
	// hdr is 0 for an empty slot, else the key's tag (the top 24 bits),
	// its length if it is kept inline (4 bits, 0 for a key in the arena),
	// the caller's flag bit (see Handle.Flagged), the wait bit (set, while the slot is locked, by a caller parked
	// until it is let go), its reference bit (set when the key is used,
	// cleared when the clock hand passes it), the lock bit and, in the
	// low 32 bits, its offset in the arena or, for an inline key, its
	// first 4 bytes. It is read and written atomically.
	hdr uint64
	// kx is an inline key's bytes 4 to 11 (zero past its end), 0 for a
	// key in the arena. It is written only by the holder of the lock bit
	// (or into a table not yet published) and read atomically, since
	// readers compare it before they take the lock (rule 10).
	kx uint64
	s  S // read and written only by the holder of the lock bit
}

const (
	minSlots   = 8
	RestGrace  = 10 * time.Second // how long a key rests before a growing table drops it
	evictProbe = 16               // keys sampled when choosing a victim at the cap
	handRun    = 8                // slots the clock hand visits in a row before it jumps

	// maxShardKeys is the most keys a shard holds under a cap: the store
	// takes more shards than asked for a cap above maxShardKeys times
	// their number (up to maxShards), since a shard's table is rebuilt
	// whole, under its mutex, when it grows or its arena is compacted, a
	// pause that grows with its keys.
	maxShardKeys = 1 << 13
	maxShards    = 1 << 16

	// splitKeys is the most keys a shard of a store without a cap holds
	// before it splits in two (see split); maxSplitOwn bounds how far:
	// up to 2^22 shards, 2^22·splitKeys keys before tables grow past
	// their usual size.
	splitKeys   = 1 << 9
	maxSplitOwn = 1<<22 - 1

	offMask  = 1<<32 - 1
	lockBit  = 1 << 32
	refBit   = 1 << 33
	waitBit  = 1 << 34
	flagBit  = 1 << 35
	lenShift = 36
	lenBits  = 0xf << lenShift
	tagShift = 40
	tagBits  = 1<<64 - 1<<tagShift

	// inlineMax is the longest key kept in its slot rather than in the
	// arena: 4 bytes in the header's low bits and 8 in kx.
	inlineMax = 12

	// fastTries is how many times a reader finds its key's slot locked by
	// another before it joins the shard's queue (rule 11). There, the
	// queue's holder looks queueTries times before it parks until the
	// slot is let go.
	fastTries  = 4
	queueTries = 8
	// spinLoads is how many times a reader that met its key's slot locked
	// reads the slot's header, waiting for it to change, before it counts
	// a try and looks the key up again (spinWhile).
	spinLoads = 64

	// maxLoad is the load at which a table grows by a quarter (so to
	// about 0.68); after a sweep, it grows only if more than sweptLoad full,
	// which spaces sweeps at least (maxLoad-sweptLoad)·len inserts apart.
	// Linear probing at 0.85 costs about 3.8 probes to find a key and 23
	// to find a free slot; tags are compared first, so a probe that does
	// not match costs no key comparison. Growing by a quarter rather than
	// by half copies each key about five times over its table's growth
	// instead of three, and keeps the slots of a flood of small keys
	// within a slot's size/0.68 bytes a key at every count (59 for a
	// 24-byte state, whose 40-byte slot holds keys of up to inlineMax
	// bytes as well), where growing by half reached 70.
	maxLoad   = 0.85
	sweptLoad = 0.65

	// maxArena is the most bytes a shard's arena holds, offsets being
	// 32-bit; maxKeyLen leaves room for the length prefix.
	maxArena = math.MaxUint32
)

// New returns a store whose new keys are set up by init and whose keys
// may be dropped when atRest; cfg.Shards must be a power of two. Under a
// cap it takes at most max(1, MaxKeys/16) shards, and at least enough that
// none holds more than maxShardKeys keys (up to maxShards). init and
// atRest must be pure functions of the state, the key and now (and of
// whatever the caller publishes under the key's lock): they run with a
// slot's lock held (rule 2).
//
// init sets up the state of key, new at now, and returns the key's flag
// (see Handle.Flagged). atRest is told the key's flag and, only when it is
// set, the key's bytes (nil otherwise; valid during the call only).
func New[S any](cfg Config, init func(s *S, key string, now int64) bool, atRest func(s *S, flagged bool, key []byte, now int64) bool) *Store[S] {
	nshards := cfg.Shards
	perShard := 0
	if cfg.MaxKeys > 0 {
		for nshards > 1 && nshards > cfg.MaxKeys/16 {
			nshards /= 2
		}
		for nshards < maxShards && cfg.MaxKeys/nshards > maxShardKeys {
			nshards *= 2
		}
		perShard = cfg.MaxKeys / nshards
	}
	secret := cfg.Secret
	if secret == nil {
		secret = keyhash.NewSecret()
	}
	shards := make([]shard[S], nshards)
	d := newDirectory[S](nshards)
	for i := range shards {
		shards[i].scram = rand.Uint64()
		shards[i].park.Lock() // no token yet
		shards[i].own, shards[i].pat = uint64(nshards-1), uint64(i)
		d.set(uint64(i), &shards[i])
	}
	st := &Store[S]{
		seed:        maphash.MakeSeed(),
		shards:      shards,
		splits:      cfg.MaxKeys == 0,
		perShardMax: perShard,
		maxKeys:     cfg.MaxKeys,
		arenaMax:    maxArena,
		secret:      secret,
		init:        init,
		atRest:      atRest,
		evicted:     cfg.Evicted,
	}
	st.global = maphash.String(st.seed, "")
	st.globalTag = tagOf(st.global)
	st.glob = &shard[S]{scram: rand.Uint64()} // own, pat 0: every hash is its
	st.glob.park.Lock()                       // no token yet
	st.dir.Store(d)
	return st
}

// Kept returns key as the store keeps it (rule 10): key itself if it is at
// most keyhash.Short bytes, else its bounded form under the store's
// secret. Whatever keeps keys beside the store (the limiters' overrides)
// keys them by this form, the one init and atRest are given.
func (st *Store[S]) Kept(key string) string { return st.secret.Keep(key) }

// keep is Kept for a long key, out of line so that Take's short-key path
// stays as small as it was.
//
//go:noinline
func (st *Store[S]) keep(key string) string { return st.secret.Keep(key) }

func (st *Store[S]) hash(key string) (sh *shard[S], tag uint64) {
	h := maphash.String(st.seed, key)
	return st.dir.Load().at(h), tagOf(h)
}

// allShards returns every shard of the store, those it started with,
// those splits made, and the global key's.
func (st *Store[S]) allShards() []*shard[S] {
	st.dirMu.Lock()
	out := make([]*shard[S], 0, len(st.shards)+len(st.split)+1)
	for i := range st.shards {
		out = append(out, &st.shards[i])
	}
	out = append(out, st.split...)
	out = append(out, st.glob)
	st.dirMu.Unlock()
	return out
}

// tagOf returns the tag of a key's hash, in place in a slot header: 24
// bits, never 0. The shard is chosen by the hash's low bits, the tag taken
// from its high bits.
func tagOf(h uint64) uint64 {
	tag := h & tagBits
	if tag == 0 {
		tag = 1 << tagShift
	}
	return tag
}

// home returns the home slot of a header's tag in a table of n slots: the
// tag's 24 bits scaled to [0, n), so any n works and keys keep their hash
// order.
func home(hdr uint64, n int) int {
	return int((hdr >> tagShift) * uint64(n) >> (64 - tagShift))
}

// kref is a key as a reader looks for it: what the header of a slot
// holding it shows under mask (its tag, and for an inline key its length
// and first 4 bytes), and for an inline key the rest of its bytes, the
// slot's kx. A key of 1 to inlineMax bytes is kept inline (rule 10); any
// other in the arena, its header's length bits 0.
type kref struct {
	key  string
	want uint64
	mask uint64 // tagBits|lenBits, and offMask for an inline key
	kx   uint64
}

// set makes k the kref of key, whose hash is hs. It writes k in place:
// a kref returned by value was copied on the stack by wider loads than
// the stores that wrote it, a stall of several nanoseconds on every call.
func (k *kref) set(key string, hs uint64) {
	k.words(key)
	k.tagged(hs)
}

// tagged adds to k, set up by words, the tag of its key's hash hs.
func (k *kref) tagged(hs uint64) {
	k.want |= tagOf(hs)
	k.mask |= tagBits
}

// words makes k the kref of key but for its tag, which only a hash gives:
// enough to recognise an inline key's slot, once held (rule 15).
func (k *kref) words(key string) {
	k.key = key
	if len(key) == 0 || len(key) > inlineMax {
		k.want, k.mask, k.kx = 0, lenBits, 0
		return
	}
	// The bytes as two little-endian words, zero past the key's end, read
	// by whole loads: the last 8 (or 4) bytes, shifted down past those
	// that are also in the first 4.
	var lo, hi uint64
	switch n := len(key); {
	case n >= 8:
		lo = uint64(le32(key))
		hi = le64(key[n-8:]) >> ((inlineMax - n) * 8)
	case n >= 4:
		lo = uint64(le32(key))
		hi = uint64(le32(key[n-4:])) >> ((8 - n) * 8)
	default:
		for i := n - 1; i >= 0; i-- {
			lo = lo<<8 | uint64(key[i])
		}
	}
	k.want, k.mask, k.kx = uint64(len(key))<<lenShift|lo, lenBits|offMask, hi
}

// le32 and le64 read the first 4 and 8 bytes of s as a little-endian word.
func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// inline reports whether the key is kept in its slot.
func (k *kref) inline() bool { return k.mask&offMask != 0 }

// ours reports whether sl, whose lock bit the caller took by a
// compare-and-swap on a header that k matched, holds k: for an inline key
// the header alone does not say (another key with the same tag, length
// and first bytes may have replaced it since the caller read kx), so kx,
// which only the lock's holder writes, is read again.
func ours[S any](sl *slot[S], k *kref) bool {
	return !k.inline() || atomic.LoadUint64(&sl.kx) == k.kx
}

// holds reports whether the slot sl of t, whose header was w, holds k: a
// look without the lock, to be confirmed by ours once the lock is taken.
func holds[S any](t *table[S], sl *slot[S], w uint64, k *kref) bool {
	if w&k.mask != k.want {
		return false
	}
	if k.inline() {
		return atomic.LoadUint64(&sl.kx) == k.kx
	}
	return keyAt(t.keys, w&offMask, k.key)
}

// keyOf returns the key held by sl of t, whose header is w: its bytes in
// the arena, or an inline key's written into buf. Requires the key not to
// change meanwhile (its lock bit held, or the shard's mutex).
func keyOf[S any](t *table[S], sl *slot[S], w uint64, buf *[inlineMax]byte) []byte {
	n := int(w & lenBits >> lenShift)
	if n == 0 {
		return arenaKey(t.keys, w&offMask)
	}
	binary.LittleEndian.PutUint32(buf[:4], uint32(w))
	binary.LittleEndian.PutUint64(buf[4:], atomic.LoadUint64(&sl.kx))
	return buf[:n]
}

// arenaKey returns the bytes of the key stored at off in an arena, or nil
// if there is none (zeros, or the arena's end).
func arenaKey(b []byte, off uint64) []byte {
	if off >= uint64(len(b)) {
		return nil
	}
	b = b[off:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n == 0 || n-1 > uint64(len(b)-w) {
		return nil
	}
	return b[w : w+int(n-1)]
}

// keyBytes is what a key of n bytes takes in an arena.
func keyBytes(n int) int { return varintLen(n+1) + n }

// keyAt reports whether the key at off in arena b is key.
func keyAt(b []byte, off uint64, key string) bool {
	k := arenaKey(b, off)
	return k != nil && string(k) == key
}

// Take returns a handle on key's state, to be released with Release,
// holding the key's slot lock (rule 2): read and step the state, then
// release at once. If the key is absent and create is true, it is
// inserted, its state set up by init, and fresh is true; if create is
// false, the handle holds a scratch state set up the same way (rule 6),
// which the caller may read and step but which is not stored. Either way
// a new key's state is set up at now or at the shard's last drop at rest,
// whichever is later (rule 7).
//
// For a key already held, Take takes no shared lock and allocates
// nothing (rule 3).
func (st *Store[S]) Take(key string, now int64, create bool) (h Handle[S], fresh bool) {
	if len(key) == 0 {
		return st.takeGlobal(now, create)
	}
	if len(key) > keyhash.Short {
		key = st.keep(key)
	}
	var k kref
	k.words(key)
	var tried *shard[S] // the shard whose hint named a header like key's
	if k.inline() {
		if sh := st.hot.Load(); sh != nil {
			sl, rel, hinted := sh.takeHot(&k)
			if sl != nil {
				return Handle[S]{sl: sl, rel: rel, sh: sh}, false
			}
			if hinted {
				tried = sh
			}
		}
	}
	hs := maphash.String(st.seed, key)
	k.tagged(hs)
	// The directory read written out: the compiler does not inline a
	// call into a generic function's body today.
	d := st.dir.Load()
	i := hs & d.mask
	return st.take(d.pages[i>>dirPageBits].Load()[i&(dirPage-1)].Load(), &k, hs, now, create, tried)
}

// takeGlobal is Take for the global key "" (rule 14), which its own
// shard holds: no hash (the store's hash of "" is computed once), no
// directory, and, while the shard's hint holds it, no probe and no look at
// the key's bytes either: the hint's compare-and-swap takes it. Any other
// way in (a new key, a key moved by a rebuild) makes it the hint again.
func (st *Store[S]) takeGlobal(now int64, create bool) (Handle[S], bool) {
	sh := st.glob
	if sl := sh.hotSlot.Load(); sl != nil {
		// The tag check keeps the compare-and-swap off an empty slot (a
		// hint half cleared: forget stores the slot first). A slot of the
		// shard that holds w unlocked holds "", the only key it takes.
		w := sh.hotHdr.Load()
		if w&tagBits == st.globalTag && w&lockBit == 0 && atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
			return Handle[S]{sl: sl, rel: w | refBit, sh: sh}, false
		}
	}
	var k kref
	k.set("", st.global)
	h, fresh := st.take(sh, &k, st.global, now, create, nil)
	if h.sl != nil {
		sh.remember(h.sl, h.rel, 0)
	}
	return h, fresh
}

// shardOf returns the shard the directory sends hash hs to.
func (st *Store[S]) shardOf(hs uint64) *shard[S] {
	return st.dir.Load().at(hs)
}

// take is Take for k, a key in the form the store keeps it, whose hash is
// hs, in shard sh: the one that holds k's hashes (or did when the caller
// read the directory: takeSlow sends it back if not). If sh is tried, the
// caller has just tried its hint, in vain: a second compare-and-swap on a
// contended header would move its line between cores once more.
func (st *Store[S]) take(sh *shard[S], k *kref, hs uint64, now int64, create bool, tried *shard[S]) (h Handle[S], fresh bool) {
	hinted := sh == tried
	if !hinted && sh.hotSlot.Load() != nil {
		var sl *slot[S]
		var rel uint64
		if sl, rel, hinted = sh.takeHot(k); sl != nil {
			if k.inline() && sample(now, hs) {
				st.hint(sh)
			}
			return Handle[S]{sl: sl, rel: rel, sh: sh}, false
		}
	}
	sl, rel, busy := sh.find(k, fastTries)
	if sl != nil {
		// The hint out of date, or, for an inline key, its turn to be
		// the hint.
		if hinted || (k.inline() && sample(now, hs)) {
			sh.remember(sl, rel, k.kx)
			if k.inline() {
				st.hint(sh)
			}
		}
		return Handle[S]{sl: sl, rel: rel, sh: sh}, false
	}
	if busy {
		return st.takeQueued(sh, k, hs, now, create)
	}
	return st.takeSlow(sh, k, hs, now, create)
}

// hintEvery is how often, on average, a call on an inline key found
// without the store's hint makes it the hint (rule 15).
const (
	hintBits  = 6
	hintEvery = 1 << hintBits
)

// sample reports whether a call at now on a key whose hash is hs is one
// of the 1 in hintEvery that move the store's hint: often enough that a
// key taking most calls is the hint within a few hundred, seldom enough
// that keys taking turns write the hint's lines at most that often. The
// time's bits are mixed by a multiplication and the top ones taken: a
// loop of calls that each take about the same time moves now by about
// the same step, and the low bits of such steps may never reach the one
// value that samples.
func sample(now int64, hs uint64) bool {
	return (uint64(now)*0x9e3779b97f4a7c15^hs)>>(64-hintBits) == 0
}

// hint makes sh's hot key (rule 13) the store's hint (rule 15), writing
// only if it changes.
func (st *Store[S]) hint(sh *shard[S]) {
	if st.hot.Load() != sh {
		st.hot.Store(sh)
	}
}

// takeHot takes k's slot through the shard's hot-key hint (rule 13): if
// the hint matches k (its header's tag, as far as k has one, and for an
// inline key its length and first bytes, and the hint's kx k's other
// bytes), one compare-and-swap on the header it names, then,
// holding the slot, a check that the slot holds k: k's bytes at its
// offset, or its inline bytes. It returns a nil slot if that fails, with
// hinted set if the hint matched k.
func (sh *shard[S]) takeHot(k *kref) (sl *slot[S], rel uint64, hinted bool) {
	sl = sh.hotSlot.Load()
	if sl == nil {
		return nil, 0, false
	}
	w := sh.hotHdr.Load()
	if w&k.mask != k.want || (k.inline() && sh.hotKx.Load() != k.kx) {
		return nil, 0, false
	}
	if w&lockBit != 0 || !atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
		return nil, 0, true // held by another, or out of date
	}
	// The slot held w unlocked, so it is a slot of the current table
	// (old slots stay locked) and holds the key at w's offset in its
	// arena, whose bytes the compare-and-swap made ours to read, or an
	// inline key whose kx only the lock's holder writes. They are read
	// only now: before it, the hint may be from a table since rebuilt,
	// its offset pointing where an insert is writing.
	// Inside the lock, so written out for keys shorter than 127 bytes (one
	// length byte), as in find.
	var same bool
	if k.inline() {
		same = atomic.LoadUint64(&sl.kx) == k.kx
	} else if t, key := sh.tab.Load(), k.key; t != nil {
		if off := w & offMask; len(key) < 0x7f {
			end := off + 1 + uint64(len(key))
			same = end <= uint64(len(t.keys)) && int(t.keys[off]) == len(key)+1 && string(t.keys[off+1:end]) == key
		} else {
			same = keyAt(t.keys, off, key)
		}
	}
	if !same {
		sl.unlock(sh, w) // another key that matched the header
		return nil, 0, true
	}
	return sl, w | refBit, true
}

// remember makes sl, which the caller holds and will release with header
// rel, the shard's hot-key hint (rule 13), writing only what changed.
// Holding sl is what keeps the hint off old tables: a rebuild locks every
// old slot, so waits for this caller, before it publishes the new table
// and forgets the hint.
func (sh *shard[S]) remember(sl *slot[S], rel, kx uint64) {
	if sh.hotSlot.Load() != sl {
		sh.hotSlot.Store(sl)
	}
	if sh.hotHdr.Load() != rel {
		sh.hotHdr.Store(rel)
	}
	if sh.hotKx.Load() != kx {
		sh.hotKx.Store(kx)
	}
}

// forget clears the shard's hot-key hint. Requires sh.mu held.
func (sh *shard[S]) forget() {
	if sh.hotSlot.Load() != nil || sh.hotHdr.Load() != 0 || sh.hotKx.Load() != 0 {
		sh.hotSlot.Store(nil)
		sh.hotHdr.Store(0)
		sh.hotKx.Store(0)
	}
}

// takeQueued is Take for a key find met locked by others fastTries times
// (rule 11): it waits its turn on the shard's queue, where goroutines
// park, and there looks for the key again, parking until its slot is let
// go if it is still locked after queueTries looks. It keeps the queue
// until Release.
func (st *Store[S]) takeQueued(sh *shard[S], k *kref, hs uint64, now int64, create bool) (Handle[S], bool) {
	sh.queue.Lock()
	for tries := 1; ; tries++ {
		t, sl, w := sh.probe(k)
		if sl == nil { // gone meanwhile: no one to queue behind
			sh.queue.Unlock()
			return st.takeSlow(sh, k, hs, now, create)
		}
		if w&lockBit == 0 {
			if atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
				if !ours(sl, k) { // replaced since the look: look again
					sl.unlock(sh, w)
					continue
				}
				sh.remember(sl, w|refBit, k.kx)
				return Handle[S]{sl: sl, rel: w | refBit, sh: sh, slow: true}, false
			}
			continue
		}
		sl.spinWhile(w)
		if tries%queueTries == 0 {
			sh.await(t, sl, w)
		}
	}
}

// await parks until slot sl of table t, seen locked with header w, may
// have been let go. It sets the slot's wait bit, so that whoever lets go
// of it gives a token (wakeQueue), and returns at once if the header
// changed meanwhile or t's slots are no longer the shard's (a rebuild
// gives no token for a bit set after it published the new table). A
// token may be stale, left by a wait bit whose waiter had already gone:
// the caller looks again either way. Requires sh.queue held.
func (sh *shard[S]) await(t *table[S], sl *slot[S], w uint64) {
	if !atomic.CompareAndSwapUint64(&sl.hdr, w, w|waitBit) {
		return
	}
	if cur := sh.tab.Load(); cur == nil || &cur.slots[0] != &t.slots[0] {
		return
	}
	sh.park.Lock()
	sh.token.Store(false)
}

// probe looks k up in the shard's current table, without the mutex, and
// returns the table, the key's slot and the header it read there, or a
// nil slot if the key is absent. A caller that then takes the slot's lock
// checks that it is still k's (ours).
func (sh *shard[S]) probe(k *kref) (*table[S], *slot[S], uint64) {
	t := sh.tab.Load()
	if t == nil {
		return nil, nil, 0
	}
	n := len(t.slots)
	for i := home(k.want, n); ; {
		sl := &t.slots[i]
		w := atomic.LoadUint64(&sl.hdr)
		if w == 0 {
			return t, nil, 0
		}
		if holds(t, sl, w, k) {
			return t, sl, w
		}
		if i++; i == n {
			i = 0
		}
	}
}

// Handle is a held key's state: a slot whose lock bit is held, or, for a
// peek at an absent key, the scratch state of a shard whose mutex is held.
type Handle[S any] struct {
	sl  *slot[S] // nil for a peek at an absent key
	rel uint64   // the header Release stores
	sh  *shard[S]
	// slow is set for a peek (sl is nil: the shard mutex is held) and for
	// a slot taken through the shard's queue (sh.queue is held too, let
	// go after the slot): Release then has more to do than a swap.
	slow bool
}

// Flagged reports the key's flag: a bit the caller keeps with the key,
// set by init's result when the key is set up and changed by SetFlag
// under the key's lock. The store keeps it through moves and rebuilds
// (rule 9) and forgets it with the key. It costs no load: the header the
// handle will store on Release holds it.
func (h Handle[S]) Flagged() bool { return h.rel&flagBit != 0 }

// SetFlag sets or clears the key's flag, stored with the header on
// Release. For a peek at an absent key (rule 6) nothing is stored: the
// flag is lost with the scratch state.
func (h *Handle[S]) SetFlag(on bool) {
	if on {
		h.rel |= flagBit
	} else {
		h.rel &^= flagBit
	}
}

// State returns the key's state, valid until Release.
func (h Handle[S]) State() *S {
	if h.sl != nil {
		return &h.sl.s
	}
	return &h.sh.peek
}

// Release lets go of the key's state.
func (h Handle[S]) Release() {
	// The common case, a slot taken without the queue that no caller is
	// parked on, is the swap alone, small enough to be inlined.
	if h.slow || atomic.SwapUint64(&h.sl.hdr, h.rel)&waitBit != 0 {
		h.release()
	}
}

// release is the rest of Release, out of line: it lets go of a peek's
// shard mutex, or of a queued handle's slot and then the queue, or gives
// the token for a slot that Release let go with its wait bit set.
func (h Handle[S]) release() {
	switch {
	case h.sl == nil:
		h.sh.mu.Unlock()
	case h.slow:
		h.sl.unlock(h.sh, h.rel)
		h.sh.queue.Unlock()
	default: // let go by Release, with a caller parked on it
		h.sh.wakeQueue()
	}
}

// find looks key up in the shard's current table without the mutex and,
// if it is there, takes its slot's lock bit. It returns a nil slot if the
// key is absent, or, with busy set, if it is present but was locked by
// others (a table being rebuilt, or another goroutine on the same key) at
// each of tries looks. A key found after a look that met it locked
// becomes the shard's hot key (rule 13).
func (sh *shard[S]) find(k *kref, tries int) (*slot[S], uint64, bool) {
	met := false
	key := k.key
	for try := 0; ; try++ {
		t := sh.tab.Load()
		if t == nil {
			return nil, 0, false
		}
		slots := t.slots
		n := len(slots)
		for i := home(k.want, n); ; {
			sl := &slots[i]
			w := atomic.LoadUint64(&sl.hdr)
			if w == 0 {
				return nil, 0, false
			}
			if w&k.mask != k.want {
				if i++; i == n {
					i = 0
				}
				continue
			}
			if k.inline() {
				// The header is not the key's alone (rule 10): the lock
				// bit first, then kx, which only the lock's holder writes.
				// Until then a matching header is taken for the key's: a
				// slot of another key with the same header, met locked,
				// costs a look again (and takeQueued's probe compares kx),
				// where reading kx from a line another core holds would
				// cost every contended call one more transfer of it.
				if w&lockBit == 0 && atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
					if atomic.LoadUint64(&sl.kx) == k.kx {
						if met {
							sh.remember(sl, w|refBit, k.kx)
						}
						return sl, w | refBit, false
					}
					sl.unlock(sh, w) // another key with the same header
					if i++; i == n {
						i = 0
					}
					continue
				}
				met = true
				if w&lockBit != 0 {
					sl.spinWhile(w)
				}
				break // locked, or changed since: look again
			}
			// The key's bytes in the arena, with the case of keys shorter
			// than 127 bytes (one length byte) written out to be inlined.
			var same bool
			if off := w & offMask; len(key) < 0x7f {
				end := off + 1 + uint64(len(key))
				same = end <= uint64(len(t.keys)) && int(t.keys[off]) == len(key)+1 && string(t.keys[off+1:end]) == key
			} else {
				same = keyAt(t.keys, off, key)
			}
			if same {
				if w&lockBit == 0 && atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
					if met {
						sh.remember(sl, w|refBit, k.kx)
					}
					return sl, w | refBit, false
				}
				met = true
				if w&lockBit != 0 {
					sl.spinWhile(w)
				}
				break // locked, or changed since: look again
			}
			if i++; i == n {
				i = 0
			}
		}
		if try+1 >= tries {
			return nil, 0, true
		}
	}
}

// takeSlow is Take under the shard's mutex, for a key find did not settle.
//
// A shard that no longer holds the key's hashes (it split since the
// caller read the directory) sends the caller back to the directory.
func (st *Store[S]) takeSlow(sh *shard[S], k *kref, hs uint64, now int64, create bool) (Handle[S], bool) {
	key := k.key
	sh.mu.Lock()
	if hs&sh.own != sh.pat {
		sh.mu.Unlock()
		return st.take(st.shardOf(hs), k, hs, now, create, nil)
	}
	if t := sh.tab.Load(); t != nil {
		i, probes := t.index(k)
		sh.probed += uint64(probes)
		if i >= 0 {
			sl := &t.slots[i]
			w := sl.lockWait()
			sh.mu.Unlock()
			return Handle[S]{sl: sl, rel: w | refBit, sh: sh}, false
		}
	}
	if !create {
		var zero S
		sh.peek = zero
		var rel uint64
		if st.init(&sh.peek, key, max(now, sh.restAt)) {
			rel = flagBit // read by Flagged only: Release stores no header
		}
		return Handle[S]{sh: sh, rel: rel, slow: true}, true
	}
	sl, w := st.insert(sh, k, now)
	sh.mu.Unlock()
	if sl == nil { // the shard split: key's may be the other half
		return st.take(st.shardOf(hs), k, hs, now, create, nil)
	}
	return Handle[S]{sl: sl, rel: w, sh: sh}, true
}

// index returns the slot holding key, or -1, and how many slots it looked
// at. Requires the shard's mutex held, so that no key moves.
func (t *table[S]) index(k *kref) (i, probes int) {
	n := len(t.slots)
	for i = home(k.want, n); ; {
		probes++
		w := atomic.LoadUint64(&t.slots[i].hdr)
		if w == 0 {
			return -1, probes
		}
		if holds(t, &t.slots[i], w, k) {
			return i, probes
		}
		if i++; i == n {
			i = 0
		}
	}
}

// lockWait takes the slot's lock bit, waiting for its holder to let go,
// and returns the header as it was unlocked. Requires the shard's mutex
// held: the holder is then a reader, which holds it for a few nanoseconds
// unless descheduled.
func (sl *slot[S]) lockWait() uint64 {
	for spins := 0; ; spins++ {
		w := atomic.LoadUint64(&sl.hdr)
		if w&lockBit == 0 && atomic.CompareAndSwapUint64(&sl.hdr, w, w|lockBit) {
			return w
		}
		if spins >= 16 {
			runtime.Gosched()
		}
	}
}

// spinWhile reads the slot's header until it is no longer w, a locked
// header the caller met, at most spinLoads times. A reader waits there for
// the holder to let go by reading its own copy of the slot's cache line,
// which costs the holder nothing until it writes, instead of counting a
// try each time it looks: a try lasted a few loads, shorter than a step,
// and a reader that ran out of tries while the holder was still stepping
// went to the queue and parked, where a wake-up costs the holder a system
// call (rule 11).
func (sl *slot[S]) spinWhile(w uint64) {
	for range spinLoads {
		if atomic.LoadUint64(&sl.hdr) != w {
			return
		}
	}
}

// unlock stores the header rel, which has the lock bit clear, over a
// header whose lock bit the caller holds; it wakes the shard's queue if a
// caller is parked on the slot (rule 11). Every store over a locked
// header goes through it.
func (sl *slot[S]) unlock(sh *shard[S], rel uint64) {
	if atomic.SwapUint64(&sl.hdr, rel)&waitBit != 0 {
		sh.wakeQueue()
	}
}

// wakeQueue gives the shard's queue holder a token, unless one is waiting
// already: a second token adds nothing, since the holder looks again
// after taking the first one, when it sees what the second would have
// told it.
func (sh *shard[S]) wakeQueue() {
	if sh.token.CompareAndSwap(false, true) {
		sh.park.Unlock()
	}
}

// insert adds key, known to be absent, and returns its slot, set up by
// init and locked, with the header to store when unlocking it. Its
// reference bit is clear: a key seen once is the first to go at the cap.
// It returns a nil slot, having added nothing, if the shard split instead
// of growing: the caller looks the key up afresh.
//
// A table about to grow is first swept of keys that have been at rest for
// RestGrace; it grows only if that leaves it more than sweptLoad full.
// Sweeps thus cost O(1) amortised per insert, and keys in use are not
// churned out and back in when they come to rest between uses. Requires
// sh.mu held.
func (st *Store[S]) insert(sh *shard[S], k *kref, now int64) (*slot[S], uint64) {
	if st.perShardMax > 0 && sh.n >= st.perShardMax {
		st.evictOne(sh, now)
	}
	key := k.key
	need := 0 // arena bytes
	if !k.inline() {
		need = keyBytes(len(key))
	}
	for sh.n > 0 && uint64(sh.used-sh.dead+need) > st.arenaMax {
		st.evictOne(sh, now) // 4 GiB of keys in one shard: make room
	}
	if float64(sh.n+1) > maxLoad*float64(sh.slots()) {
		st.sweepShard(sh, now, false)
		if float64(sh.n+1) > sweptLoad*float64(sh.slots()) {
			if st.splits && sh.n >= splitKeys && sh.own < maxSplitOwn {
				st.splitShard(sh)
				return nil, 0
			}
			sh.rebuild(max(minSlots, sh.slots()*5/4), false)
		}
	}
	if uint64(sh.used+need) > st.arenaMax || sh.dead*2 > sh.used {
		sh.rebuild(sh.slots(), true)
	}
	t := sh.tab.Load()
	n := len(t.slots)
	i := home(k.want, n)
	probes := uint64(1)
	for atomic.LoadUint64(&t.slots[i].hdr) != 0 {
		if i++; i == n {
			i = 0
		}
		probes++
	}
	sh.probed += probes
	sl := &t.slots[i] // the same slots, whatever table value appendKey leaves
	w := k.want
	if k.inline() {
		atomic.StoreUint64(&sl.kx, k.kx)
	} else {
		w |= sh.appendKey(t, key, st.arenaMax)
	}
	var zero S
	sl.s = zero
	if st.init(&sl.s, key, max(now, sh.restAt)) {
		w |= flagBit
	}
	atomic.StoreUint64(&sl.hdr, w|lockBit) // published, and ours
	sh.n++
	sh.inserts++
	return sl, w
}

// slots returns the length of the current table. Requires sh.mu held.
func (sh *shard[S]) slots() int {
	if t := sh.tab.Load(); t != nil {
		return len(t.slots)
	}
	return 0
}

// appendKey copies key, behind its length plus one, to the end of the
// arena of t, the shard's table, and returns its offset. An arena too
// small is replaced by a copy about a quarter larger (at most limit
// bytes), published in a new table value with the same slots: readers
// still on the old one find the same bytes there. Requires sh.mu held and
// room for the key within limit.
func (sh *shard[S]) appendKey(t *table[S], key string, limit uint64) uint64 {
	need := keyBytes(len(key))
	b := t.keys
	if sh.used+need > len(b) {
		size := min(uint64(max(64, sh.used+need+(sh.used+need)/4)), limit)
		nb := make([]byte, size)
		copy(nb, b[:sh.used])
		b = nb
		sh.tab.Store(&table[S]{slots: t.slots, keys: nb})
	}
	off := sh.used
	w := binary.PutUvarint(b[off:], uint64(len(key))+1)
	copy(b[off+w:], key) // a copy: never pins a caller's buffer
	sh.used += need
	return uint64(off)
}

func varintLen(n int) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}

// sweepShard drops the keys at rest at now (all is set) or at rest for at
// least RestGrace, shrinks the table if that left it mostly empty, and
// rebuilds the arena if it is mostly dead bytes. Requires sh.mu held.
func (st *Store[S]) sweepShard(sh *shard[S], now int64, all bool) {
	if !all {
		now -= int64(RestGrace) // at rest then, and untouched since
	}
	t := sh.tab.Load()
	if t == nil {
		return
	}
	sh.pass = max(sh.pass, len(t.slots))
	for j := 0; j < len(t.slots); {
		sl := &t.slots[j]
		if atomic.LoadUint64(&sl.hdr) != 0 {
			w := sl.lockWait()
			if st.restful(sh, t, sl, w, now) {
				sh.dropAtRest(t, j, now) // a later key may move here: look again
				continue
			}
			sl.unlock(sh, w)
		}
		j++
	}
	if !sh.maybeShrink() && sh.dead*2 > sh.used {
		sh.rebuild(len(t.slots), true)
	}
}

// evictOne drops one key to make room, preferring a key at rest. First
// it looks through a sample of keys in table order from the key at the
// clock hand: the first of them at rest goes (which changes no decision).
// The sample is evictProbe keys, halved each time it holds no key at rest
// (down to the hand's key alone) and doubled each time it does, so that a
// flood of keys that never rest costs a few slots per eviction, not
// evictProbe locks. Else CLOCK: the hand moves on through the slots and
// the first key it comes to that is at rest, or was not used since the
// hand last passed it, goes, the keys it passes on the way losing their
// reference bit (their second chance); if the evictProbe keys it comes to
// have all been used, the last of them goes.
//
// The hand visits the slots in a scattered order (handSlot), not one after
// the other. Slots are in hash order, so a hand moving steadily
// through them drops keys in hash order: just behind it the table is
// nearly empty and ahead of it, where keys have gathered the longest, it
// is packed solid, one probe run that grows with the table and that every
// insert landing in it and every delete in it walks. Scattered, the drops
// fall evenly across the hashes at any time scale, so the keys held stay
// a uniform sample of them and probe runs stay as short as the load makes
// them. Requires sh.mu held and sh.n > 0.
func (st *Store[S]) evictOne(sh *shard[S], now int64) {
	t := sh.tab.Load()
	n := len(t.slots)
	probes := uint64(1)
	for atomic.LoadUint64(&t.slots[sh.cursor].hdr) == 0 {
		sh.moveHand(n)
		probes++
	}
	if sh.sample == 0 {
		sh.sample = evictProbe
	}
	for i, seen := sh.cursor, 0; seen < sh.sample && seen < sh.n; i++ {
		if i == n {
			i = 0
		}
		probes++
		sl := &t.slots[i]
		if atomic.LoadUint64(&sl.hdr) == 0 {
			continue
		}
		seen++
		w := sl.lockWait()
		if st.restful(sh, t, sl, w, now) {
			sh.probed += probes
			sh.sample = min(2*sh.sample, evictProbe)
			sh.dropAtRest(t, i, now)
			return
		}
		sl.unlock(sh, w)
	}
	sh.sample = max(sh.sample/2, 1)
	for passed := 0; ; {
		i := sh.cursor
		sh.moveHand(n)
		probes++
		sl := &t.slots[i]
		if atomic.LoadUint64(&sl.hdr) == 0 {
			continue
		}
		w := sl.lockWait()
		if st.restful(sh, t, sl, w, now) {
			sh.probed += probes
			sh.dropAtRest(t, i, now)
			return
		}
		if passed++; w&refBit == 0 || passed == evictProbe {
			sh.probed += probes
			sh.deleteAt(t, i)
			sh.evictedLRU++
			if st.evicted != nil {
				st.evicted()
			}
			return
		}
		sl.unlock(sh, w&^refBit)
	}
}

// restful reports whether the key at sl, whose lock bit the caller holds
// and whose header was w, is at rest at now. The key's bytes are looked
// up only for a flagged key. Requires sh.mu held (t is the shard's table).
func (st *Store[S]) restful(sh *shard[S], t *table[S], sl *slot[S], w uint64, now int64) bool {
	if w&flagBit == 0 {
		return st.atRest(&sl.s, false, nil, now)
	}
	return st.atRest(&sl.s, true, keyOf(t, sl, w, &sh.kbuf), now)
}

// dropAtRest deletes the key at slot i, whose lock bit the caller holds,
// at rest at now. Requires sh.mu held.
func (sh *shard[S]) dropAtRest(t *table[S], i int, now int64) {
	sh.deleteAt(t, i)
	sh.evictedAtRest++
	sh.restAt = max(sh.restAt, now)
}

// moveHand moves the clock hand to its next slot in a table of n slots.
func (sh *shard[S]) moveHand(n int) {
	steps := handSteps(n)
	for {
		if sh.hand++; sh.hand >= steps {
			sh.hand = 0
		}
		if i := handSlot(sh.hand, n, sh.scram); i >= 0 {
			sh.cursor = i
			return
		}
	}
}

// handSteps is the length of the clock hand's cycle through a table of n
// slots: handRun steps for each run of handRun slots.
func handSteps(n int) int { return (n + handRun - 1) / handRun * handRun }

// handSlot returns the slot the clock hand visits at step k of its cycle
// through a table of n slots, or -1 for none (past the end of the table,
// in its last run). The hand visits the runs of handRun slots in the order
// of scatter, and the slots of each run one after the other: the runs are
// too short for an uneven spread of keys within them to matter, and long
// enough that most evictions find the hand's slot in the cache.
func handSlot(k, n int, key uint64) int {
	i := scatter(k/handRun, (n+handRun-1)/handRun, key)*handRun + k%handRun
	if i >= n {
		return -1
	}
	return i
}

// scatter returns the slot the clock hand visits at step k of its cycle
// through a table of n slots. It is a permutation of [0, n) keyed by key,
// so the hand still visits every slot once a cycle, that sends steps close
// in time far apart in the table and slots close in the table far apart
// in time: two rounds of a multiply-add and a xor-shift on the smallest
// power of two holding n (each a bijection of it), walked until the result
// falls in [0, n) (so a bijection of that), fewer than two rounds of
// walking on average.
func scatter(k, n int, key uint64) int {
	b := uint(bits.Len(uint(n - 1)))
	mask := uint64(1)<<b - 1
	x := uint64(k)
	for {
		x = (x*0x9e3779b97f4a7c15 + key) & mask
		x ^= x >> (b/2 + 1)
		x = (x*0xbf58476d1ce4e5b9 + key>>32) & mask
		x ^= x >> (b/2 + 1)
		if x < uint64(n) {
			return int(x)
		}
	}
}

// deleteAt empties slot i, whose lock bit the caller holds, and shifts
// later keys of its probe run back so that no tombstone is needed. Each
// key moved is locked at its old slot, copied, and published at its new
// one; its old slot stays locked until overwritten. The key's bytes become
// dead in the arena. Requires sh.mu held.
func (sh *shard[S]) deleteAt(t *table[S], i int) {
	slots := t.slots
	n := len(slots)
	if w := atomic.LoadUint64(&slots[i].hdr); w&lenBits == 0 {
		sh.dead += keyBytes(len(arenaKey(t.keys, w&offMask)))
	}
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		sh.probed++
		sl := &slots[j]
		w := atomic.LoadUint64(&sl.hdr)
		if w == 0 {
			break
		}
		h := home(w, n)
		// The key at j may move to i unless its home lies cyclically in (i, j].
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			w = sl.lockWait()
			slots[i].s = sl.s
			atomic.StoreUint64(&slots[i].kx, atomic.LoadUint64(&sl.kx))
			slots[i].unlock(sh, w)
			i = j
		}
	}
	var zero S
	slots[i].s = zero // let go of what the state points to
	atomic.StoreUint64(&slots[i].kx, 0)
	slots[i].unlock(sh, 0)
	sh.n--
}

// maybeShrink rebuilds a table that is at most one-eighth full at about
// sweptLoad, and its arena with it, so that memory returns after a flood
// of keys. It reports whether it did. Requires sh.mu held.
func (sh *shard[S]) maybeShrink() bool {
	slots := sh.slots()
	if slots <= minSlots || sh.n*8 > slots {
		return false
	}
	if sh.n == 0 {
		sh.tab.Store(nil) // every slot is empty: no reader holds one
		sh.forget()
		sh.used, sh.dead, sh.cursor, sh.hand = 0, 0, 0, 0
		return true
	}
	sh.rebuild(max(minSlots, int(float64(sh.n)/sweptLoad)+1), true)
	return true
}

// rebuild replaces the table by one of size slots holding the same keys,
// with the arena rebuilt from the live keys, in table order, if compact
// (else the new table shares the arena). Each slot of the old table is
// locked for good as it is copied: a reader still on it looks again on the
// new one. Requires sh.mu held.
func (sh *shard[S]) rebuild(size int, compact bool) {
	old := sh.tab.Load()
	sh.hand, sh.cursor = 0, handSlot(0, size, sh.scram) // a run's first slot: in the table
	nt := &table[S]{slots: make([]slot[S], size)}
	var ob, nb []byte
	if old != nil {
		ob = old.keys
	}
	if compact {
		nb = make([]byte, 0, sh.used-sh.dead) // the next insert grows it
	}
	if old != nil {
		sh.pass = max(sh.pass, len(old.slots)+size)
		for k := range old.slots {
			sl := &old.slots[k]
			if atomic.LoadUint64(&sl.hdr) == 0 {
				continue
			}
			w := sl.lockWait()
			if compact && w&lenBits == 0 {
				key := arenaKey(ob, w&offMask)
				w = w&^offMask | uint64(len(nb))
				nb = binary.AppendUvarint(nb, uint64(len(key))+1)
				nb = append(nb, key...)
			}
			i := home(w, size)
			for nt.slots[i].hdr != 0 {
				if i++; i == size {
					i = 0
				}
			}
			nt.slots[i] = slot[S]{hdr: w, kx: atomic.LoadUint64(&sl.kx), s: sl.s}
		}
	}
	if compact {
		nt.keys = nb[:cap(nb)]
		sh.used, sh.dead = len(nb), 0
	} else {
		nt.keys = ob
	}
	sh.tab.Store(nt)
	// The hint's slot, if any, is an old one now.
	sh.forget()
	if old != nil { // a caller parked on an old slot looks again on nt
		for k := range old.slots {
			if atomic.LoadUint64(&old.slots[k].hdr)&waitBit != 0 {
				sh.wakeQueue()
				break
			}
		}
	}
}

// Sweep drops every key at rest at now and shrinks tables left mostly
// empty, and arenas mostly dead, so memory comes back (rule 4).
func (st *Store[S]) Sweep(now int64) {
	for _, sh := range st.allShards() {
		sh.mu.Lock()
		st.sweepShard(sh, now, true)
		sh.mu.Unlock()
	}
}

// Stats returns the store's counters, shard by shard under each mutex.
func (st *Store[S]) Stats() Stats {
	s := Stats{MaxKeys: st.maxKeys}
	for _, sh := range st.allShards() {
		sh.mu.Lock()
		s.Keys += sh.n
		s.Slots += sh.slots()
		s.Inserts += sh.inserts
		s.EvictedAtRest += sh.evictedAtRest
		s.EvictedLRU += sh.evictedLRU
		sh.mu.Unlock()
	}
	return s
}
