package ratelimit

import (
	"context"
	"time"
)

// The fair options on a KeyedBulkhead: each key has its own fair queue,
// made when a call for the key first waits and dropped with the key, and
// its own reserves, as for one Bulkhead.

// AcquireFor is Acquire for a call of tenant on key: with
// WithBulkheadFairQueue it waits in tenant's queue within key's, served in
// turn with the other tenants of that key (see WithBulkheadFairQueue);
// without, the tenant is ignored and it is Acquire. Its errors are those
// of Bulkhead.AcquireFor. A nil result must be paired with one
// Release(key).
func (kb *KeyedBulkhead) AcquireFor(ctx context.Context, key, tenant string) error {
	if kb.fs == nil {
		return kb.Acquire(ctx, key)
	}
	if kb.obs == nil {
		_, err := kb.acquireFair(ctx, key, tenant)
		return err
	}
	start := kb.clock.Now()
	c, err := kb.acquireFair(ctx, key, tenant)
	waited := max(kb.clock.Now().Sub(start), 0)
	kb.obs.report(key, 1, Decision{Allowed: err == nil}, waited)
	kb.reportClass(c, err == nil, waited)
	return err
}

// DoFor runs fn holding a permit for key, acquired as AcquireFor does, as
// Bulkhead.DoFor does. fn must not be nil.
func (kb *KeyedBulkhead) DoFor(ctx context.Context, key, tenant string, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: KeyedBulkhead.DoFor with nil function")
	}
	if err := kb.AcquireFor(ctx, key, tenant); err != nil {
		return err
	}
	defer kb.Release(key)
	return fn(ctx)
}

// reportClass reports the class event of a decision for class c, if the
// bulkhead has classes. The key is not reported.
func (kb *KeyedBulkhead) reportClass(c int, ok bool, waited time.Duration) {
	if kb.fs.classes == nil || c < 0 {
		return
	}
	kb.obs.obs.Observe(Event{Kind: EventBulkheadClass, Limiter: kb.obs.name, Key: kb.fs.classes[c].Name, N: 1, Allowed: ok, Waited: waited})
}

func (kb *KeyedBulkhead) acquireFair(ctx context.Context, key, tenant string) (int, error) {
	c, err := kb.fs.classOf(ctx)
	if err != nil {
		return -1, err
	}
	if len(tenant) > DefaultMaxTenantKeyLen {
		return c, ErrTenantKeyTooLong
	}
	if err := ctx.Err(); err != nil {
		return c, err
	}
	key = kb.kept(key)
	sh := kb.shard(key)
	w, e, err := kb.enqueueFair(sh, key, c, tenant)
	if w == nil {
		return c, err
	}
	if err := awaitPermit(ctx, w, kb.clock, kb.maxWait, kb.timeoutErr); err != nil {
		kb.abandon(sh, key, e, w)
		return c, err
	}
	return c, nil
}

// enqueueFair takes a permit for a call of class c and tenant on key if it
// may have one now, returning (nil, nil, nil); else it queues a waiter on
// key's fair queue and returns it and key's entry, or returns an error
// matching ErrBulkheadFull if a bound on waiters is reached.
func (kb *KeyedBulkhead) enqueueFair(sh *keyedBulkheadShard, key string, c int, tenant string) (*permitWaiter, *keyedBulkheadEntry, error) {
	if !kb.fs.fair {
		tenant = ""
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if kb.takeFairLocked(sh, key, c) {
		return nil, nil, nil
	}
	e := sh.keys[key] // present: takeFairLocked failed
	if e.fq == nil {
		perTenant, total := kb.fs.q.perTenant, kb.fs.q.total
		e.fq = newClassQueues[*permitWaiter](len(kb.fs.above), perTenant, total)
	}
	if total, own := e.fq.full(tenant); total || own {
		switch {
		case !kb.fs.fair:
			return nil, nil, ErrBulkheadFull
		case own:
			return nil, nil, errBulkheadTenantFull
		}
		return nil, nil, errBulkheadQueueFull
	}
	w := newPermitWaiter()
	w.tenant, w.class = tenant, c
	e.fq.push(c, tenant, w)
	return w, e, nil
}

// takeFairLocked takes a permit for a call of class c on key if it may
// have one now without overtaking a waiting call of its class or a higher
// one. Requires sh.mu held.
func (kb *KeyedBulkhead) takeFairLocked(sh *keyedBulkheadShard, key string, c int) bool {
	e := sh.keys[key]
	if e == nil {
		e = sh.add(key)
		if e.fq == nil {
			e.fq = newClassQueues[*permitWaiter](len(kb.fs.above), kb.fs.q.perTenant, kb.fs.q.total)
		}
	}
	if e.fq.aheadOf(c) || !kb.fs.may(c, e.inFlight, kb.limit) {
		sh.dropIfIdle(key, e)
		return false
	}
	e.inFlight++
	return true
}

// grantFairLocked hands the free permits of e to its waiters, in the
// order of classQueues.pick, each only as its class may. Requires the
// shard's mu held.
func (kb *KeyedBulkhead) grantFairLocked(e *keyedBulkheadEntry) {
	for {
		c, ok := e.fq.pick(func(c int) bool { return kb.fs.may(c, e.inFlight, kb.limit) })
		if !ok {
			return
		}
		e.inFlight++
		e.fq.pop(c).grant()
	}
}
