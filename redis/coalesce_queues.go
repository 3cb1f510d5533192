package redis

import (
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// The registry of shared queues: it finds the queue of a client and
// coalescing limits without keeping it. A queue is held by its limiters
// (batcher.q) only; once they are all unreachable the queue is collected
// and a cleanup removes its entry, and with it the registry's reference to
// the client. So a program that makes and drops clients and limiters keeps
// no queue for them.

// queueKey is what the limiters sharing a queue have in common.
type queueKey struct {
	client                    Client
	maxBatch, maxBytes, depth int
}

// entry is a queue's entry in the registry, as its cleanup knows it.
type entry struct {
	k queueKey
	q weak.Pointer[nodeQueue]
}

var queues struct {
	mu sync.Mutex
	m  map[queueKey]weak.Pointer[nodeQueue]
}

// queueFor returns the queue of client for the coalescing limits of cfg:
// the one its other limiters with these limits use, if any is still held,
// else a new one. A client not of pointer type (whose identity is not
// its address) gets a queue of its own for each limiter.
func queueFor(client Client, cfg config) *nodeQueue {
	q := &nodeQueue{maxBatch: cfg.maxBatch, maxBytes: cfg.maxBytes, depth: cfg.depth, grouping: groupingOf(client)}
	if reflect.TypeOf(client).Kind() != reflect.Pointer {
		return q
	}
	k := queueKey{client: client, maxBatch: cfg.maxBatch, maxBytes: cfg.maxBytes, depth: cfg.depth}
	queues.mu.Lock()
	defer queues.mu.Unlock()
	if old := queues.m[k].Value(); old != nil {
		return old
	}
	if queues.m == nil {
		queues.m = make(map[queueKey]weak.Pointer[nodeQueue])
	}
	w := weak.Make(q)
	queues.m[k] = w
	runtime.AddCleanup(q, dropQueue, entry{k: k, q: w})
	return q
}

// dropQueue removes the entry of a queue that has been collected, unless a
// new queue has taken its place.
func dropQueue(e entry) {
	queues.mu.Lock()
	if queues.m[e.k] == e.q {
		delete(queues.m, e.k)
	}
	queues.mu.Unlock()
}

// queueCount is the registry's size (tests).
func queueCount() int {
	queues.mu.Lock()
	defer queues.mu.Unlock()
	return len(queues.m)
}
