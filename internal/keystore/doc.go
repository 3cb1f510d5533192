// Package keystore is the sharded in-memory store behind every keyed
// limiter of the core: a small state S per key, kept inline in
// open-addressed tables, one table per shard, a shard chosen by a hash of
// the key. The store knows nothing of rates or clocks: the caller passes
// the time (integer nanoseconds) to every call, and says how to set up a
// key (init) and when a key's state is back to its full allowance
// (atRest).
//
// The store keeps these rules; the code and its tests refer to them by
// number.
//
//  1. State is plain data. The store copies S by value when a key moves
//     (a delete shifting its probe run, a table rebuilt) and zeroes it on
//     delete. Nothing may hold a pointer to a slot's state past Release;
//     what S points to (the sliding log's ring) moves with it, owned by
//     that one key.
//  2. A slot's lock is held only for one step. Between Take and Release
//     the caller reads and writes the state and nothing else: no
//     blocking, no I/O, no user code, and no allocation, which would
//     leave other calls on the key, and a table being rebuilt, waiting
//     on the allocator. init and atRest run under the same lock and obey
//     the same rule. A caller whose step needs memory (the sliding log's
//     ring, resized as a key's events come and go) asks with the key held
//     what it needs, releases the key, allocates, and takes the key again
//     to decide afresh.
//  3. A key already held costs at most a hash, a probe and one
//     compare-and-swap (a short key the store's hint names, rule 15, the
//     compare-and-swap alone):
//     no shared lock, no allocation. Readers probe the shard's current
//     table with atomic loads and take the lock bit in the key's slot
//     header; calls on different keys share no lock.
//  4. Dropping a key at rest is lossless: it changes no later decision
//     under the parameters it was judged at rest by (after a change of
//     the limiter's parameters a key seen again is a new key).
//     A table about to grow first drops keys at rest for RestGrace; Sweep
//     drops every key at rest now, and shrinks tables and compacts arenas
//     that it left mostly empty, so memory comes back. The limiter, not
//     the store, decides when to sweep.
//  5. Eviction at the cap is lossy: past MaxKeys, a new key replaces a key
//     at rest if a sample of keys from the clock hand has one, else the
//     key CLOCK picks (not used since the hand last passed it), whose
//     state is lost: it starts afresh. That is fine for a rate (a
//     forgotten client gets at most one fresh allowance) and wrong for a
//     count that must balance, such as permits in flight: that is why
//     KeyedBulkhead keeps its own map. Config.Evicted is told of each
//     such drop, so that the caller can tell the key, set up again, from
//     the one it lost.
//  6. A peek creates no key: Take with create false steps a scratch state
//     of the shard's, set up by init, and stores nothing.
//  7. A key set up after the clock went back starts no earlier than the
//     shard's last drop at rest: a key dropped and seen again "earlier"
//     never gets more than if it had been kept.
//  8. The cost of any one call is bounded whatever the key set. An
//     eviction looks at a sample that halves each time it finds no key at
//     rest, then at most evictProbe keys on the hand; the hand visits the
//     slots in a scattered order, so drops spread evenly over the hashes
//     and probe runs stay as short as the load makes them; under a cap no
//     shard holds more than maxShardKeys keys, bounding the pause of a
//     rebuild, which runs under the shard's mutex. Without a cap a shard
//     that would grow past splitKeys keys splits in two instead: the keys
//     whose hash has the shard's next bit set move to a new shard, which
//     a directory indexed by the hash's low bits then sends them to. So
//     no table, and no pass over one (a rebuild, a sweep, a split), is
//     larger than a shard of about splitKeys keys makes it, whatever the
//     number of keys; and the directory, in pages shared when it doubles
//     and copied one at a time when a split changes one, is never copied
//     whole: the store grows without a pause that grows with it.
//  9. A table changes shape only under its shard's mutex, and touches a
//     slot in use only while holding its lock bit: an insert publishes the
//     slot's header last; a delete shifts the later keys of its probe run
//     back (no tombstones), each locked at its old slot until overwritten;
//     a rebuild locks every old slot for good and then publishes the new
//     table; a split does the same, publishing the new shard's table
//     before the directory sends a key to it. A reader either finds its
//     key where it is or meets it locked and looks again, so no update is
//     lost; a key is inserted only under the mutex of the shard that holds
//     its hashes, checked there, so a reader that read the directory
//     before a split goes back to it rather than insert the key twice.
//  10. A key of 1 to inlineMax (12) bytes is kept in its slot: its length
//     and first 4 bytes in the header, the rest in the slot's kx word,
//     which only the holder of the slot's lock bit writes. Another key may
//     have an equal header (the same tag, length and first bytes), and
//     may have moved into the slot since a reader looked at it, so the
//     header is not the key's alone: a reader decides by kx read while it
//     holds the lock bit, and lets go and probes on if kx is another
//     key's (a look at kx before, read atomically, may skip a slot but
//     proves nothing). Any other key's bytes are
//     copied into its shard's arena and never change
//     while a reader may compare them; an arena that must grow is copied
//     into a new table value sharing the same slots. A shard holds at most
//     4 GiB of key bytes (32-bit offsets): past that it evicts as at the
//     cap. A key longer than keyhash.Short (64) bytes is kept in its
//     bounded form (keyhash: a prefix and an HMAC-SHA-256 digest of the
//     whole key under the store's secret, at most keyhash.MaxKept bytes),
//     so a key costs an arena at most that much whatever its length, and
//     long keys stay apart to the digest's collision bound. A short key is
//     kept as it is, at the cost of one length comparison; init and atRest
//     see the kept form, and Kept gives it to whatever keys a key beside
//     the store.
//  11. A key held by others is waited for in line, parked, not by spinning
//     for long. A reader that finds its key's slot locked reads the slot's
//     header until it changes, at most spinLoads times (its own copy of
//     the line: the holder pays nothing until it writes), before it counts
//     a try and looks again; after fastTries such tries it takes its
//     shard's queue mutex and keeps it until Release, so the other waiters
//     park in that mutex. The queue's holder looks the key up afresh each
//     time (a key that moved under rule 9 is found where it went), after
//     the same short wait; after queueTries looks it sets the wait bit in
//     the locked header it saw, by a compare-and-swap on that exact
//     header, and parks on the shard's semaphore (it holds one token at
//     most). The
//     invariant: the wait bit is only ever set on a locked header, and
//     every write over a locked header (Release, an unlock under the
//     mutex, a delete's shift or clear) swaps the header and gives a token
//     if the bit was set; a rebuild, which never unlocks the old slots,
//     gives one after publishing the new table if any old slot has the
//     bit, and a waiter that set the bit rechecks that its table's slots
//     are still the shard's before it parks. So no wake-up is lost: either
//     the waiter sees the change before it parks, or the change gives a
//     token. A token may be stale (its waiter already gone); a woken
//     waiter looks again either way. Locks are taken in the order queue,
//     shard mutex, lock bit, never the other way, and a caller holds no
//     handle while it takes another, so they cannot deadlock.
//  12. A key may carry one flag bit of the caller's, in its slot header:
//     init's result sets it when the key is set up, Handle.SetFlag
//     changes it under the key's lock, and Handle.Flagged reads it from
//     the header the handle holds, at no cost. It moves with the key
//     (rule 9) and is forgotten with it; atRest is told it, and given the
//     key's bytes when it is set, so that a caller can keep a few keys
//     apart (the limiters' per-key overrides) without a lookup for the
//     rest.
//  13. A shard remembers its hot key: the slot, and the exact unlocked
//     header (and, for an inline key, kx), of the last key a reader met
//     locked by others (a key shared by many goroutines, such as a global
//     bucket), or, for an inline key, of one key in hintEvery found the
//     usual way (rule 15). A reader whose key
//     has the hint's tag (and, kept inline, the hint's length and first
//     bytes) takes the lock bit by a compare-and-swap on that
//     header straight away, without probing (a load and then a
//     compare-and-swap move a contended cache line between cores twice,
//     the compare-and-swap alone once), and only then, holding it, checks
//     that its key's bytes are at the header's offset in the current
//     arena, or for an inline key in the slot's kx, letting go unchanged
//     if not (another key with the same tag).
//     Before the compare-and-swap the offset proves nothing: a hint from
//     before a compaction may point where an insert is writing now. Once
//     it succeeds, the slot is a live slot of the current table, and the
//     insert that wrote the key's bytes happened before. For a key in the
//     arena that is enough, because a slot holds a given unlocked header
//     only while it holds that key: a header holds
//     the key's arena offset, offsets are never reused within a table's
//     slots (an arena only grows, in place or by a copy sharing the
//     slots, until a rebuild makes new slots), a key only moves back
//     towards its home slot, and old slots stay locked for good or empty.
//     An inline key's header is not unique (rule 10): kx, which only the
//     lock's holder writes, decides.
//     The hint's words are read apart, and any may be out of date:
//     a mismatch costs one failed compare-and-swap, after which the
//     reader goes the usual way and makes its key the hint. The hint is
//     written only when it changes, and cleared when the table is
//     rebuilt, so it holds no old table alive.
//  14. The global key "" is one key like any other to every rule above:
//     held in a shard's table, counted, swept, flagged, moved and queued
//     for like the rest. Only its shard is its own: a shard outside the
//     directory that holds "" and nothing else, so it never splits, never
//     shares a hint or a queue with another hot key, and is never evicted
//     at the cap (it is not one of the shards the cap divides: a capped
//     store holds at most MaxKeys keys and "" besides). The way to it is
//     shorter: its hash is computed once, and its shard's hot-key hint
//     (rule 13) is made to point at it each time a call on it goes the
//     usual way, not only after contention, so that a call on it is one
//     compare-and-swap on the hinted header: no hash, no directory, no
//     probe, and no look at the arena, since a slot of that shard that
//     holds the hinted header unlocked holds "".
//  15. The store remembers one shard, whose hot key (rule 13) a call on
//     an inline key tries before anything else: if the hint's header has
//     the key's length and first bytes and its kx the key's other bytes,
//     one compare-and-swap on the hinted header, then, holding the slot,
//     kx read again: no hash, no directory, no probe. An inline key's
//     bytes are the whole key, so a slot that holds them, unlocked, in a
//     live table (old slots stay locked for good) holds the key; the
//     shard is the one whose hint named the slot, which only ever names a
//     slot of its own tables, so Release lets go through the right shard.
//     The hint moves to a key's shard, and the shard's hint to the key,
//     when a call on an inline key goes the usual way and is one of 1 in
//     hintEvery (by the bits of the time and the key's hash): a key that
//     takes most calls soon becomes the hint and stays it, and keys
//     taking turns write the hints in at most that share of their calls,
//     so they cannot make every call write a shared line. A call whose
//     key the shard's hint matched but could not take goes the usual way
//     without trying the same hint again.
//
// Tables have any size, not only powers of two (a key's home slot is its
// tag scaled to the table's length), and grow by a quarter at a load of
// maxLoad, so the load stays between about 0.68 and 0.85.
package keystore
