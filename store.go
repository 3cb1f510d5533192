package ratelimit

// The keyed store: every limiter of this package keeps one state per key
// in a sharded, lock-per-key table (its engine is internal/keystore). A
// key is created by its first event (a peek creates none) and dropped when
// it is at rest, back to its full allowance: dropping it then changes no
// decision, so memory follows the keys in use, not every key ever seen.
// Keys at rest are dropped lazily as new keys arrive, by Sweep, or by a
// sweeper goroutine (WithSweepInterval, stopped by Close). Under a flood
// of new keys, WithMaxKeys caps the keys held: at the cap a key at rest is
// dropped first, losslessly, and otherwise one not used lately, which
// starts afresh if it returns (Stats counts both). The store's rules, its
// memory per key and its costs are in docs/store.md.

import (
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// WithShards sets the number of shards of the keyed store, a power of two
// (default 64). More shards mean less lock contention across cores.
func WithShards(n int) Option { return func(cfg *config) { cfg.shards = n } }

// WithMaxKeys caps the number of keys the store holds (default 0: no cap).
// When a new key arrives at the cap, the store drops a key at rest if it
// finds one near its clock hand (losslessly), else a key chosen by CLOCK,
// an approximation of least recently used: the first the hand comes to
// that was not used since the hand last passed it (lossy: that key starts
// afresh, with a full allowance). Stats counts both. A new key at the cap
// costs a small multiple of what it costs below it, whatever the cap.
// With a cap, the store uses at most max(1, n/16) shards, and at least
// n/8192 (up to 65,536) whatever WithShards says, so that no shard holds
// more than 8,192 keys; each holds at most its share, so the total never
// exceeds n, plus the global key "", which the store keeps apart and never
// evicts at the cap.
func WithMaxKeys(n int) Option { return func(cfg *config) { cfg.maxKeys = n } }

// WithSweepInterval starts a goroutine that drops every key at rest each
// interval and gives memory back; Close stops it. Without it (the default)
// keys at rest are dropped lazily as new keys arrive, and by Sweep.
func WithSweepInterval(d time.Duration) Option { return func(cfg *config) { cfg.sweepInterval = d } }

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

// statsOf is the store's counters as Stats.
func statsOf(s keystore.Stats) Stats {
	return Stats{
		Keys:          s.Keys,
		MaxKeys:       s.MaxKeys,
		Slots:         s.Slots,
		Inserts:       s.Inserts,
		EvictedAtRest: s.EvictedAtRest,
		EvictedLRU:    s.EvictedLRU,
	}
}

// sweeper is the goroutine WithSweepInterval starts: it calls sweep every
// interval of the limiter's clock until close.
type sweeper struct {
	once    sync.Once
	stop    chan struct{}
	stopped chan struct{}
}

func startSweeper(interval time.Duration, c Clock, sweep func()) *sweeper {
	sw := &sweeper{stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(sw.stopped)
		for {
			t := c.NewTimer(interval)
			select {
			case <-sw.stop:
				t.Stop()
				return
			case <-t.C():
				sweep()
			}
		}
	}()
	return sw
}

// close stops the sweeper and waits for it to return; safe to call more
// than once.
func (sw *sweeper) close() {
	sw.once.Do(func() {
		close(sw.stop)
		<-sw.stopped
	})
}
