package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// EventBulkheadClass is the kind of the event a bulkhead with classes
// (WithBulkheadClasses) reports to its observer (WithBulkheadObserver) for
// each TryAcquire and Acquire, after the decision event of kind
// EventDecision. Limiter is the bulkhead's name; Key is the class's name,
// one of the few given to WithBulkheadClasses, so it is safe as a metric
// label (the tenant is never reported); N is 1; Allowed, Remaining and
// Waited are as in the decision event. Kinds 70 to 79 are kept for the
// fair bulkheads.
const EventBulkheadClass EventKind = 70

// Errors of a fair bulkhead's full queues.
var (
	errBulkheadTenantFull error = bulkheadQueueFull("ratelimit: bulkhead full: the tenant's queue is full")
	errBulkheadQueueFull  error = bulkheadQueueFull("ratelimit: bulkhead full: the queue is full")
)

// bulkheadQueueFull is the error of a fair bulkhead refusing to queue a
// call: it matches both ErrBulkheadFull and ErrQueueFull.
type bulkheadQueueFull string

func (e bulkheadQueueFull) Error() string { return string(e) }

// Is reports whether target is ErrBulkheadFull or ErrQueueFull.
func (e bulkheadQueueFull) Is(target error) bool {
	return target == ErrBulkheadFull || target == ErrQueueFull
}

// WithBulkheadFairQueue makes a bulkhead's waiters a fair queue across
// tenants instead of one FIFO: AcquireFor and DoFor name the tenant of a
// call (Acquire and Do are the tenant ""), and a released permit goes to
// the tenants with waiters in turn, round-robin, FIFO within a tenant. So
// the k-th waiting call of a tenant is granted after at most k grants to
// each other tenant with waiters (of its class, with WithBulkheadClasses),
// however many calls any of them has queued: one tenant's flood of
// waiters cannot hold the others back.
//
// At most perTenant calls of one tenant and total calls in all may wait
// (for a KeyedBulkhead, per key); past either, the call fails at once
// with an error matching both ErrBulkheadFull and ErrQueueFull. Both must
// be positive; NewBulkhead returns ErrInvalidOption otherwise. With
// WithMaxWaiters too, the smaller total applies. Memory follows the calls
// waiting: a tenant is dropped from the queue as soon as it has no call
// waiting, so a flood of distinct tenants holds at most total of them, each
// key of at most DefaultMaxTenantKeyLen bytes (a longer one fails with
// ErrTenantKeyTooLong).
//
// Every call of a fair bulkhead, TryAcquire and Release included, takes
// its mutex: the fast paths of a plain Bulkhead cannot order tenants.
func WithBulkheadFairQueue(perTenant, total int) BulkheadOption {
	return func(c *bulkheadConfig) { c.fair, c.fairPerTenant, c.fairTotal = true, perTenant, total }
}

// WithBulkheadClasses gives a bulkhead ordered priority classes, highest
// first, each reserving Reserved permits. A call's class is its ctx's
// priority (ContextWithPriority); a call with none, TryAcquire included,
// is of the lowest class, and a priority naming no class fails with
// ErrUnknownClass.
//
// A call of class p takes a permit only while more permits are free than
// the classes above it (0 to p-1) reserve, capped at Limit-1 so that
// every class can run on an idle bulkhead. So as the permits fill, the
// lowest class is held back first, and the calls of a class holding fewer
// permits than it reserves always find one free: they never wait behind
// lower classes, however those saturate the bulkhead. The highest class
// may use every permit; a reserve holds permits against lower classes,
// not higher ones.
//
// Waiting calls are served highest class first (round-robin across
// tenants within a class, with WithBulkheadFairQueue). The lowest class
// with waiters is not starved: after 8 grants in a row to higher classes
// while it waits, the next permit it may take (one free beyond the
// reserves above it) is its.
//
// The reserves must be non-negative, add up to at most the limit, and at
// least one must be positive; NewBulkhead returns ErrInvalidOption
// otherwise. Like WithBulkheadFairQueue, it makes every call take the
// bulkhead's mutex.
func WithBulkheadClasses(classes ...Class) BulkheadOption {
	return func(c *bulkheadConfig) { c.classes, c.classesSet = append([]Class(nil), classes...), true }
}

// validFair checks the fair options against limit.
func (c *bulkheadConfig) validFair(limit int) error {
	if c.fair && (c.fairPerTenant <= 0 || c.fairTotal <= 0) {
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: WithBulkheadFairQueue("+strconv.Itoa(c.fairPerTenant)+", "+strconv.Itoa(c.fairTotal)+") needs positive bounds"))
	}
	if !c.classesSet {
		return nil
	}
	var sum int64
	for _, k := range c.classes {
		if k.Reserved < 0 || k.Reserved > int64(limit) {
			return errors.Join(ErrInvalidOption, errors.New("ratelimit: class "+strconv.Quote(k.Name)+" reserves "+strconv.FormatInt(k.Reserved, 10)+" of a limit of "+strconv.Itoa(limit)+" permits"))
		}
		sum += k.Reserved
	}
	switch {
	case len(c.classes) == 0:
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: WithBulkheadClasses needs at least one class"))
	case sum == 0:
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: no class reserves a permit: the classes would have no effect"))
	case sum > int64(limit):
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: the classes reserve "+strconv.FormatInt(sum, 10)+" permits, more than the limit of "+strconv.Itoa(limit)))
	}
	return nil
}

// fairQueueBounds returns the bounds of the fair queue: per tenant and in
// total, 0 for none.
func (c *bulkheadConfig) fairQueueBounds() (perTenant, total int) {
	perTenant, total = c.fairPerTenant, c.fairTotal
	if !c.fair {
		perTenant, total = 0, 0
	}
	if c.maxWaiters > 0 && (total == 0 || c.maxWaiters < total) {
		total = c.maxWaiters
	}
	return perTenant, total
}

// fairState is what a bulkhead with WithBulkheadFairQueue or
// WithBulkheadClasses adds to a plain one; every field requires mu held
// but the immutable ones.
type fairState struct {
	q       *classQueues[*permitWaiter]
	fair    bool    // tenants are kept apart (WithBulkheadFairQueue)
	classes []Class // nil without WithBulkheadClasses; immutable
	above   []int   // permits reserved by the classes above each; immutable
	granted []int64 // permits granted per class, for ClassGranted
}

func newFairState(c *bulkheadConfig) *fairState {
	if !c.fair && !c.classesSet {
		return nil
	}
	n := max(len(c.classes), 1)
	perTenant, total := c.fairQueueBounds()
	fs := &fairState{q: newClassQueues[*permitWaiter](n, perTenant, total), fair: c.fair, above: make([]int, n), granted: make([]int64, n)}
	if c.classesSet {
		fs.classes = c.classes
		var sum int
		for i, k := range c.classes {
			fs.above[i] = sum
			sum += int(k.Reserved)
		}
	}
	return fs
}

// lowest returns the lowest class.
func (fs *fairState) lowest() int { return len(fs.above) - 1 }

// classOf returns the class of a call with ctx, or ErrUnknownClass.
func (fs *fairState) classOf(ctx context.Context) (int, error) {
	if fs.classes == nil {
		return 0, nil
	}
	p, ok := PriorityFromContext(ctx)
	if !ok {
		return fs.lowest(), nil
	}
	if p < 0 || int(p) >= len(fs.classes) {
		return 0, ErrUnknownClass
	}
	return int(p), nil
}

// may reports whether a call of class c may take a permit with inFlight
// permits held of limit: more are free than the classes above it reserve,
// capped at limit-1.
func (fs *fairState) may(c, inFlight, limit int) bool {
	return inFlight < limit-min(fs.above[c], limit-1)
}

// AcquireFor is Acquire for a call of tenant: with WithBulkheadFairQueue
// it waits in tenant's queue, which is served in turn with the other
// tenants' (see WithBulkheadFairQueue); without, the tenant is ignored and
// it is Acquire. Besides Acquire's errors it returns ErrTenantKeyTooLong
// for a tenant longer than DefaultMaxTenantKeyLen bytes, an error matching
// ErrBulkheadFull and ErrQueueFull if the tenant's or the total bound on
// waiters is reached, and ErrUnknownClass for a priority naming no class.
func (b *Bulkhead) AcquireFor(ctx context.Context, tenant string) error {
	if b.fs == nil {
		return b.Acquire(ctx)
	}
	if b.obs == nil {
		_, err := b.acquireFair(ctx, tenant)
		return err
	}
	start := b.clock.Now()
	c, err := b.acquireFair(ctx, tenant)
	b.reportFair(c, err == nil, max(b.clock.Now().Sub(start), 0))
	return err
}

// DoFor is Do for a call of tenant: it acquires a permit as AcquireFor
// does, calls fn(ctx) and releases the permit when fn returns or panics.
// fn must not be nil.
func (b *Bulkhead) DoFor(ctx context.Context, tenant string, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: Bulkhead.DoFor with nil function")
	}
	if err := b.AcquireFor(ctx, tenant); err != nil {
		return err
	}
	defer b.Release()
	return fn(ctx)
}

// reportFair reports a fair bulkhead's decision for class c: the decision
// event, then the class's, if it has classes.
func (b *Bulkhead) reportFair(c int, ok bool, waited time.Duration) {
	b.report(ok, waited)
	if b.fs.classes == nil || c < 0 {
		return
	}
	s := bhSettled(b.state.Load())
	b.obs.obs.Observe(Event{
		Kind:      EventBulkheadClass,
		Limiter:   b.obs.name,
		Key:       b.fs.classes[c].Name,
		N:         1,
		Allowed:   ok,
		Remaining: max(bhLimit(s)-bhInFlight(s), 0),
		Waited:    waited,
	})
}

// tryFair is TryAcquire on a fair bulkhead: the lowest class, tenant "".
// It takes a permit only if the class may and no call of its class or a
// higher one waits.
func (b *Bulkhead) tryFair() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeLocked(b.fs.lowest())
}

// takeLocked takes a permit for a call of class c if it may have one now
// without overtaking a waiting call of its class or a higher one. Requires
// b.mu held.
func (b *Bulkhead) takeLocked(c int) bool {
	if b.fs.q.aheadOf(c) {
		return false
	}
	for {
		s := b.state.Load()
		if s&bhBorrow != 0 || !b.fs.may(c, bhInFlight(s), bhLimit(s)) {
			return false
		}
		if b.state.CompareAndSwap(s, s+1) {
			b.fs.granted[c]++
			return true
		}
	}
}

// acquireFair is Acquire on a fair bulkhead, for tenant. It returns the
// call's class, -1 if unknown.
func (b *Bulkhead) acquireFair(ctx context.Context, tenant string) (int, error) {
	c, err := b.fs.classOf(ctx)
	if err != nil {
		return -1, err
	}
	if len(tenant) > DefaultMaxTenantKeyLen {
		return c, ErrTenantKeyTooLong
	}
	if err := ctx.Err(); err != nil {
		return c, err
	}
	w, err := b.enqueueFair(c, tenant)
	if w == nil {
		return c, err
	}
	if err := awaitPermit(ctx, w, b.clock, b.maxWait, b.timeoutErr); err != nil {
		b.abandon(w)
		return c, err
	}
	return c, nil
}

// enqueueFair takes a permit for a call of class c and tenant if one may
// be had now, returning (nil, nil); else it queues a waiter and returns
// it, or returns (nil, an error matching ErrBulkheadFull) if a bound on
// waiters is reached.
func (b *Bulkhead) enqueueFair(c int, tenant string) (*permitWaiter, error) {
	if !b.fs.fair {
		tenant = ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.takeLocked(c) {
		return nil, nil
	}
	if total, own := b.fs.q.full(tenant); total || own {
		switch {
		case !b.fs.fair:
			return nil, ErrBulkheadFull
		case own:
			return nil, errBulkheadTenantFull
		}
		return nil, errBulkheadQueueFull
	}
	w := newPermitWaiter()
	w.tenant, w.class = tenant, c
	b.fs.q.push(c, tenant, w)
	b.notifyFairLocked() // a permit may have been freed meanwhile
	return w, nil
}

// abandonFairLocked withdraws w from a fair bulkhead's queue, passing on
// its permit if it was granted at that instant. Requires b.mu held.
func (b *Bulkhead) abandonFairLocked(w *permitWaiter) {
	if w.granted {
		b.fs.granted[w.class]--
		b.state.Add(^uint64(0)) // w's permit, so the count is at least 1
		b.notifyFairLocked()
		return
	}
	b.fs.q.remove(w.class, w.tenant, w)
}

// notifyFairLocked hands free permits to a fair bulkhead's waiters, in the
// order of classQueues.pick, each only as its class may. The waiters bit
// stays set, so that every decrement comes here. Requires b.mu held.
func (b *Bulkhead) notifyFairLocked() {
	q := b.fs.q
	for q.n > 0 {
		s := b.state.Load()
		if s&bhBorrow != 0 {
			return
		}
		in, limit := bhInFlight(s), bhLimit(s)
		c, ok := q.pick(func(c int) bool { return b.fs.may(c, in, limit) })
		if !ok {
			return
		}
		if !b.state.CompareAndSwap(s, s+1) {
			continue
		}
		b.fs.granted[c]++
		q.pop(c).grant()
	}
}

// ClassGranted reports how many permits a bulkhead with classes
// (WithBulkheadClasses) has granted to class p since it was built, calls
// that gave up at the instant of their grant not counted. It returns
// ErrUnknownClass for a p that names no class.
func (b *Bulkhead) ClassGranted(p Priority) (int64, error) {
	if b.fs == nil || b.fs.classes == nil || p < 0 || int(p) >= len(b.fs.classes) {
		return 0, ErrUnknownClass
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fs.granted[p], nil
}
