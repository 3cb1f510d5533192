package ratelimit

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// TopKeys is an Observer that keeps, in fixed memory, the keys denied most
// often: a Space-Saving summary of k counters. Each denied or would-deny
// event counts once for its key; allowed events are not counted.
//
// Memory is k counters and the keys they hold, however many distinct keys
// are denied. The counts are estimates with a bound: after N denials,
//
//   - each key listed has Count - Error <= its true count <= Count;
//   - every key denied more than N/k times is listed;
//   - the smallest Count listed, once k keys are, is at most N/k.
//
// So with k = 100, any key behind more than 1% of the denials is listed,
// and its count is off by at most 1% of N, usually far less. Keys are
// counted as they come, whatever limiter denied them; give each TopKeys
// the events of one limiter to rank that limiter's keys.
//
// A key of at most 64 bytes is listed as it is; a longer one in a bounded
// form, at most 78 bytes: its first 32 bytes, "…" and a digest of the whole
// key under a secret of this TopKeys' own (docs/store.md), so memory is at
// most k × 78 bytes of keys whatever their length, and long keys differing
// in one byte are counted apart. The form differs from one TopKeys, and
// one limiter, to the next; the prefix is there to recognise the key by.
//
// Build it with NewTopKeys. It is safe for concurrent use: it takes a lock
// on denied events only, and allocates only when it first sees a key,
// which replaces one of the k it holds (a long key's digest is computed
// before the lock, at about its length's SHA-256 cost).
type TopKeys struct {
	mu     sync.Mutex
	secret *keyhash.Secret // keeps long keys
	k      int
	total  int64
	slot   map[string]int // key -> index in heap
	heap   []KeyCount     // a min-heap by Count; guarded by mu
}

// KeyCount is one key of a TopKeys summary.
type KeyCount struct {
	// Key is the key.
	Key string
	// Count is an upper bound on how many of its events were denied.
	Count int64
	// Error bounds how much Count may exceed the true count: the true
	// count is at least Count - Error.
	Error int64
}

// NewTopKeys returns a summary of the k keys denied most often. k must be
// in [1, 1<<20], or it returns an error matching ErrInvalidOption.
func NewTopKeys(k int) (*TopKeys, error) {
	if k < 1 || k > 1<<20 {
		return nil, fmt.Errorf("%w: top keys must keep between 1 and 1048576 keys, got %d", ErrInvalidOption, k)
	}
	return &TopKeys{k: k, secret: keyhash.NewSecret(), slot: make(map[string]int, k), heap: make([]KeyCount, 0, k)}, nil
}

// Observe counts e if it is a decision that was denied (or, for a shadow
// limit, would have been).
func (t *TopKeys) Observe(e Event) {
	if e.Allowed || e.Kind != EventDecision {
		return
	}
	key := e.Key
	if keyhash.Long(key) {
		key = t.secret.Keep(key)
	}
	t.mu.Lock()
	t.add(key)
	t.mu.Unlock()
}

// add counts one denial of key; requires t.mu held.
func (t *TopKeys) add(key string) {
	t.total++
	if i, ok := t.slot[key]; ok {
		t.heap[i].Count++
		t.down(i)
		return
	}
	key = strings.Clone(key) // not the caller's memory, which may hold more
	if len(t.heap) < t.k {
		t.heap = append(t.heap, KeyCount{Key: key, Count: 1})
		i := len(t.heap) - 1
		t.slot[key] = i
		t.up(i)
		return
	}
	// Space-Saving: the new key takes the place of the least counted one,
	// inheriting its count as its possible error.
	low := &t.heap[0]
	delete(t.slot, low.Key)
	*low = KeyCount{Key: key, Count: low.Count + 1, Error: low.Count}
	t.slot[key] = 0
	t.down(0)
}

func (t *TopKeys) less(i, j int) bool { return t.heap[i].Count < t.heap[j].Count }

func (t *TopKeys) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.slot[t.heap[i].Key] = i
	t.slot[t.heap[j].Key] = j
}

func (t *TopKeys) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopKeys) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(t.heap) {
			return
		}
		if c+1 < len(t.heap) && t.less(c+1, c) {
			c++
		}
		if !t.less(c, i) {
			return
		}
		t.swap(i, c)
		i = c
	}
}

// Top returns the keys held, most denied first (ties by key), at most k;
// the slice is new.
func (t *TopKeys) Top() []KeyCount {
	t.mu.Lock()
	out := slices.Clone(t.heap)
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b KeyCount) int {
		switch {
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	return out
}

// Denials returns N, how many denied events the summary has counted.
func (t *TopKeys) Denials() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}
