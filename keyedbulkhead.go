package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// KeyedBulkhead is a bulkhead per key: at most Limit calls in flight for
// each key (a user, a tenant, a downstream host), each key with its own
// FIFO queue of waiters, bounded as the options say (WithMaxWaiters counts
// per key). Every method behaves as the Bulkhead method of the same name,
// for one key; see Bulkhead. WithBulkheadFairQueue and WithBulkheadClasses
// apply within each key: its waiters are served round-robin across the
// tenants of AcquireFor, by class, with the reserves counted in the key's
// permits.
//
// A key is held in memory only while a call for it is in flight or
// waiting: the Release or abandoned wait that leaves a key idle drops it,
// so memory follows the calls in progress, not the keys ever seen. A key
// of at most 64 bytes is kept, not copied, for that time; a longer one is
// kept in a bounded form (at most 78 bytes: a prefix and a keyed digest,
// see docs/store.md), so a held key costs a bounded number of bytes
// whatever its length, and long keys differing in one byte stay apart.
//
// Keys are spread over shards by a hash, each shard behind its own mutex,
// so that calls for different keys seldom contend.
//
// A KeyedBulkhead must be built with NewKeyedBulkhead; the zero value is
// not usable. It is safe for concurrent use and starts no goroutine. Most
// callers want Do. TryAcquire and Release allocate nothing in the steady
// state.
type KeyedBulkhead struct {
	seed       maphash.Seed
	secret     *keyhash.Secret // keeps long keys
	shards     []keyedBulkheadShard
	shardMask  uint64
	limit      int
	maxWait    time.Duration
	maxWaiters int
	clock      Clock
	timeoutErr error
	obs        *observed  // nil unless WithBulkheadObserver
	fs         *fairState // the fair options, nil if none; its q unused
}

// keyedBulkheadShards is the number of shards: enough to keep contention
// low on machines of up to a few dozen cores.
const keyedBulkheadShards = 64

// keyedBulkheadFree bounds the idle entries a shard keeps for reuse, so
// that a key coming and going does not allocate, while a flood of keys
// leaves little behind.
const keyedBulkheadFree = 8

type keyedBulkheadShard struct {
	mu    sync.Mutex
	keys  map[string]*keyedBulkheadEntry // keys in flight or waiting
	peak  int                            // most keys since the map was made
	free  [keyedBulkheadFree]*keyedBulkheadEntry
	nfree int      // idle entries in free, kept for reuse
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

type keyedBulkheadEntry struct {
	inFlight int
	queue    permitQueue
	fq       *classQueues[*permitWaiter] // the fair queue, if kb.fs; made on first use
}

// waiting returns the number of calls waiting for the entry's key.
func (e *keyedBulkheadEntry) waiting() int {
	if e.fq != nil {
		return e.fq.n
	}
	return e.queue.n
}

// keyedBulkheadRebuild: a shard's map, which Go never shrinks, is dropped
// when it empties after having held more keys than this, so that memory
// comes back after a burst of many keys.
const keyedBulkheadRebuild = 64

// NewKeyedBulkhead returns a bulkhead per key that lets at most limit
// calls for each key be in flight at once. It returns an error matching
// ErrInvalidCapacity if limit is not in [1, 2³¹-1], and ErrInvalidOption if
// an option is out of range.
func NewKeyedBulkhead(limit int, opts ...BulkheadOption) (*KeyedBulkhead, error) {
	cfg, err := newBulkheadConfig(limit, opts)
	if err != nil {
		return nil, err
	}
	return &KeyedBulkhead{
		seed:       maphash.MakeSeed(),
		secret:     keyhash.NewSecret(),
		shards:     make([]keyedBulkheadShard, keyedBulkheadShards),
		shardMask:  keyedBulkheadShards - 1,
		limit:      limit,
		maxWait:    cfg.maxWait,
		maxWaiters: cfg.maxWaiters,
		clock:      cfg.clock,
		timeoutErr: cfg.timeoutError(),
		obs:        cfg.observed(),
		fs:         newFairState(&cfg),
	}, nil
}

// kept returns key as the bulkhead keeps it: itself if short, else its
// bounded form.
func (kb *KeyedBulkhead) kept(key string) string {
	if keyhash.Long(key) {
		return kb.secret.Keep(key)
	}
	return key
}

func (kb *KeyedBulkhead) shard(key string) *keyedBulkheadShard {
	return &kb.shards[maphash.String(kb.seed, key)&kb.shardMask]
}

// TryAcquire takes a permit for key if one is free now and nobody is
// waiting for one, and reports whether it did. It never blocks. A true
// result must be paired with one Release(key).
func (kb *KeyedBulkhead) TryAcquire(key string) bool {
	k := kb.kept(key)
	sh := kb.shard(k)
	sh.mu.Lock()
	var ok bool
	if kb.fs != nil {
		ok = kb.takeFairLocked(sh, k, kb.fs.lowest())
	} else {
		ok = kb.tryLocked(sh, k)
	}
	sh.mu.Unlock()
	if kb.obs != nil {
		kb.obs.report(key, 1, Decision{Allowed: ok}, 0)
		if kb.fs != nil {
			kb.reportClass(kb.fs.lowest(), ok, 0)
		}
	}
	return ok
}

// tryLocked takes a permit for key if one is free and nobody waits.
// Requires sh.mu held.
func (kb *KeyedBulkhead) tryLocked(sh *keyedBulkheadShard, key string) bool {
	e := sh.keys[key]
	if e == nil {
		sh.add(key).inFlight = 1
		return true
	}
	if e.queue.n > 0 || e.inFlight >= kb.limit {
		return false
	}
	e.inFlight++
	return true
}

// Acquire takes a permit for key, waiting in FIFO order behind earlier
// callers for the same key. Its results, and the state it leaves on
// failure, are those of Bulkhead.Acquire. A nil result must be paired with
// one Release(key).
func (kb *KeyedBulkhead) Acquire(ctx context.Context, key string) error {
	if kb.fs != nil {
		return kb.AcquireFor(ctx, key, "")
	}
	if kb.obs == nil {
		return kb.acquire(ctx, key)
	}
	start := kb.clock.Now()
	err := kb.acquire(ctx, key)
	kb.obs.report(key, 1, Decision{Allowed: err == nil}, max(kb.clock.Now().Sub(start), 0))
	return err
}

func (kb *KeyedBulkhead) acquire(ctx context.Context, key string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	key = kb.kept(key)
	sh := kb.shard(key)
	w, e, err := kb.enqueue(sh, key)
	if w == nil {
		return err
	}
	if err := awaitPermit(ctx, w, kb.clock, kb.maxWait, kb.timeoutErr); err != nil {
		kb.abandon(sh, key, e, w)
		return err
	}
	return nil
}

// enqueue takes a permit for key if one is free, returning nil, nil, nil;
// else it queues a waiter on key's entry and returns both, or returns
// ErrBulkheadFull if the bound on waiters is reached.
func (kb *KeyedBulkhead) enqueue(sh *keyedBulkheadShard, key string) (*permitWaiter, *keyedBulkheadEntry, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if kb.tryLocked(sh, key) {
		return nil, nil, nil
	}
	e := sh.keys[key] // present: tryLocked failed
	if kb.maxWaiters > 0 && e.queue.n >= kb.maxWaiters {
		return nil, nil, ErrBulkheadFull
	}
	w := newPermitWaiter()
	e.queue.push(w)
	return w, e, nil
}

// abandon withdraws w, queued on key's entry e, after its wait ended
// without the permit. If the permit was handed over at that very instant,
// it is passed on to the next waiter or back to the pool. The entry stays
// in the map while w is queued or holds a permit, so e is still key's
// (unless surplus Release calls, a programmer error, have taken the count
// to zero: then the permit is already back and nothing is done).
func (kb *KeyedBulkhead) abandon(sh *keyedBulkheadShard, key string, e *keyedBulkheadEntry, w *permitWaiter) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if w.granted {
		if sh.keys[key] == e && e.inFlight > 0 {
			kb.releaseLocked(sh, key, e)
		}
		return
	}
	if e.fq != nil {
		e.fq.remove(w.class, w.tenant, w)
	} else {
		e.queue.remove(w)
	}
	sh.dropIfIdle(key, e)
}

// Release gives back a permit for key taken by TryAcquire or Acquire. If
// calls for key are waiting, the permit goes to the longest-waiting one;
// otherwise a key left with nothing in flight is dropped from memory.
//
// Release without a permit held for key panics with "ratelimit: Release
// without Acquire", leaving every count unchanged: it is a programmer
// error.
func (kb *KeyedBulkhead) Release(key string) {
	key = kb.kept(key)
	sh := kb.shard(key)
	sh.mu.Lock()
	e := sh.keys[key]
	if e == nil || e.inFlight == 0 {
		sh.mu.Unlock()
		panic(errReleaseWithoutAcquire)
	}
	kb.releaseLocked(sh, key, e)
	sh.mu.Unlock()
}

// releaseLocked gives back one of e's permits: to the head waiter if the
// key is below its limit after the release, else to the pool, dropping
// the key if it is then idle. Requires sh.mu held and e.inFlight > 0.
func (kb *KeyedBulkhead) releaseLocked(sh *keyedBulkheadShard, key string, e *keyedBulkheadEntry) {
	if e.fq != nil {
		e.inFlight--
		kb.grantFairLocked(e)
		sh.dropIfIdle(key, e)
		return
	}
	if e.queue.n > 0 && e.inFlight <= kb.limit {
		e.queue.pop().grant() // the permit changes hands: in flight unchanged
		return
	}
	e.inFlight--
	sh.dropIfIdle(key, e)
}

// Do runs fn holding a permit for key, as Bulkhead.Do does. fn must not
// be nil.
func (kb *KeyedBulkhead) Do(ctx context.Context, key string, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: KeyedBulkhead.Do with nil function")
	}
	if err := kb.Acquire(ctx, key); err != nil {
		return err
	}
	defer kb.Release(key)
	return fn(ctx)
}

// InFlight returns the number of permits held for key now.
func (kb *KeyedBulkhead) InFlight(key string) int {
	key = kb.kept(key)
	sh := kb.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.keys[key]; e != nil {
		return e.inFlight
	}
	return 0
}

// Waiting returns the number of calls waiting in Acquire for key now.
func (kb *KeyedBulkhead) Waiting(key string) int {
	key = kb.kept(key)
	sh := kb.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.keys[key]; e != nil {
		return e.waiting()
	}
	return 0
}

// Keys returns the number of keys held in memory: those with a call in
// flight or waiting.
func (kb *KeyedBulkhead) Keys() int {
	n := 0
	for i := range kb.shards {
		sh := &kb.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// Limit returns the most calls admitted in flight at once for each key.
func (kb *KeyedBulkhead) Limit() int { return kb.limit }

// add inserts an idle entry for key, known to be absent. Requires sh.mu
// held.
func (sh *keyedBulkheadShard) add(key string) *keyedBulkheadEntry {
	var e *keyedBulkheadEntry
	if sh.nfree > 0 {
		sh.nfree--
		e, sh.free[sh.nfree] = sh.free[sh.nfree], nil
	} else {
		e = new(keyedBulkheadEntry)
	}
	if sh.keys == nil {
		sh.keys = make(map[string]*keyedBulkheadEntry)
	}
	sh.keys[key] = e
	sh.peak = max(sh.peak, len(sh.keys))
	return e
}

// dropIfIdle removes key, whose entry is e, if nothing is in flight or
// waiting for it. Requires sh.mu held.
func (sh *keyedBulkheadShard) dropIfIdle(key string, e *keyedBulkheadEntry) {
	if e.inFlight > 0 || e.waiting() > 0 {
		return
	}
	delete(sh.keys, key)
	if sh.nfree < keyedBulkheadFree {
		sh.free[sh.nfree] = e
		sh.nfree++
	}
	if len(sh.keys) == 0 && sh.peak > keyedBulkheadRebuild {
		sh.keys = nil
		sh.peak = 0
	}
}
