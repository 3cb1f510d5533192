package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBulkheadFull means a bulkhead refused a call: no permit was free and
// the caller could not wait for one, because the bound on waiters was
// reached or (for the error of a wait that ran out of time, which also
// matches it) the maximum wait passed. The text is part of the API.
var ErrBulkheadFull = errors.New("ratelimit: bulkhead full")

// maxBulkheadLimit is the largest limit a bulkhead accepts. The in-flight
// count and the limit share one 64-bit word (see Bulkhead.state), 31 bits
// for the limit.
const maxBulkheadLimit = 1<<31 - 1

// Bulkhead is a counting semaphore that bounds the calls in flight: at
// most Limit calls hold a permit at once. Where a rate limiter bounds how
// many calls start per period, a bulkhead bounds how many run at the same
// time, so that one slow dependency cannot tie up every goroutine of a
// service. The two are often used together around one outbound client.
//
// Most callers want Do, which acquires a permit, runs a function and
// releases the permit even if the function panics. TryAcquire takes a
// permit only if one is free now; Acquire waits for one.
//
// Waiters are served in FIFO order: a permit released while calls wait is
// handed to the longest-waiting call, and TryAcquire refuses while anyone
// waits. Without that, a stream of fresh callers could keep taking the
// permits that free up and starve a caller that has waited longest.
// Waiting may be bounded in time (WithMaxWait) and in the number of
// waiters (WithMaxWaiters); past either bound, Acquire returns an error
// matching ErrBulkheadFull. WithBulkheadFairQueue makes the waiters a
// queue served round-robin across tenants (AcquireFor, DoFor) instead of
// one FIFO, and WithBulkheadClasses adds priority classes with reserved
// permits; both make every call take a mutex. No permit is ever lost: a wait that ends (ctx
// done, maximum wait passed) at the instant a permit is handed to it
// passes that permit on to the next waiter, or back to the pool.
//
// SetLimit resizes it at run time without dropping anyone: growing hands
// the new permits to waiters at once; shrinking lets the calls in flight
// finish and admits no new call until the count is below the new limit.
//
// A Bulkhead must be built with NewBulkhead; the zero value is not usable.
// It is safe for concurrent use. It starts no goroutine. TryAcquire and
// Release do not allocate, and neither does Acquire when a permit is free.
type Bulkhead struct {
	// state packs the bulkhead into one word: bits 0-31 the in-flight
	// count, bits 32-62 the limit, bit 63 (the waiters bit) set while the
	// wait queue is not empty. TryAcquire and Release change it with one
	// atomic add each, which never retries, so two cores taking and
	// giving back permits do not make each other loop as a
	// compare-and-swap would. The rules that keep it exact:
	//
	//  1. The in-flight count I is the number of calls holding a permit H
	//     plus the number of TryAcquire calls P that have added one and
	//     are about to take it back because their add went past the limit
	//     or found the waiters bit. So I ≥ H at every instant, and a
	//     TryAcquire admits itself only if its own add left I ≤ limit:
	//     no call is ever admitted beyond the limit, whatever P is.
	//  2. A TryAcquire adds only after a load found the waiters bit clear
	//     and I below the limit. Once the bit is set, P can only shrink,
	//     so a stream of TryAcquire calls cannot keep I at the limit and
	//     starve the queue; they refuse without writing.
	//  3. The waiters bit is set and cleared only under mu; it is set by
	//     a compare-and-swap that also checks I ≥ limit, so no decrement
	//     can fall between the check and the bit.
	//  4. A decrement (Release, or a refused TryAcquire taking its add
	//     back) whose result has the waiters bit set and I below the limit
	//     takes mu and hands permits to waiters (notifyLocked). Every
	//     permit freed while someone waits is so handed over: I can drop
	//     below the limit only by a decrement, or under mu (SetLimit, an
	//     abandoned grant), which notifies itself.
	//  5. Under mu, state is changed only by compare-and-swap or add,
	//     never by a plain store: the fast paths may add at any time.
	state atomic.Uint64

	mu    sync.Mutex
	queue permitQueue // FIFO; guarded by mu

	maxWait    time.Duration
	maxWaiters int
	clock      Clock
	timeoutErr error      // returned when maxWait passes
	obs        *observed  // nil unless WithBulkheadObserver
	fs         *fairState // nil unless WithBulkheadFairQueue or WithBulkheadClasses
}

const (
	bhInFlightMask = 1<<32 - 1
	// bhBorrow is set in the in-flight field only while a Release without
	// Acquire has taken it below zero and not yet put it back: the field
	// never legitimately reaches 2³¹ (the limit plus concurrent refused
	// TryAcquire calls stays far below).
	bhBorrow     = 1 << 31
	bhLimitShift = 32
	bhLimitMask  = maxBulkheadLimit << bhLimitShift
	bhWaitersBit = 1 << 63
)

func bhInFlight(s uint64) int { return int(s & bhInFlightMask) }
func bhLimit(s uint64) int    { return int(s & bhLimitMask >> bhLimitShift) }

// A BulkheadOption configures a Bulkhead or KeyedBulkhead built by
// NewBulkhead or NewKeyedBulkhead.
type BulkheadOption func(*bulkheadConfig)

// bulkheadConfig holds every bulkhead option with its default, in one place.
type bulkheadConfig struct {
	maxWait    time.Duration // default: 0, bounded by ctx only
	maxWaiters int           // default: 0, no bound
	clock      Clock         // default: SystemClock()
	observer   Observer      // default: nil, no events
	name       string        // default: "", the bulkhead's name in events

	// WithBulkheadFairQueue and WithBulkheadClasses (bulkhead_fair.go).
	fair                     bool    // default: false, one FIFO
	fairPerTenant, fairTotal int     // with fair
	classes                  []Class // default: none
	classesSet               bool
}

func (c *bulkheadConfig) observed() *observed {
	if c.observer == nil {
		return nil
	}
	return &observed{obs: bind(c.observer, c.name), name: c.name}
}

// WithBulkheadObserver makes the bulkhead call o with an Event for each
// TryAcquire and Acquire: Allowed if a permit was taken, Remaining the
// permits then free, Waited how long Acquire waited. Given more than once,
// every observer is called. See Observer for what o must do.
func WithBulkheadObserver(o Observer) BulkheadOption {
	return func(c *bulkheadConfig) { c.observer = Observers(c.observer, o) }
}

// WithBulkheadName names the bulkhead in its events (Event.Limiter).
func WithBulkheadName(name string) BulkheadOption {
	return func(c *bulkheadConfig) { c.name = name }
}

func newBulkheadConfig(limit int, opts []BulkheadOption) (bulkheadConfig, error) {
	c := bulkheadConfig{clock: SystemClock()}
	for _, o := range opts {
		o(&c)
	}
	if err := validBulkheadLimit(limit); err != nil {
		return c, err
	}
	switch {
	case c.maxWait < 0:
		return c, fmt.Errorf("%w: bulkhead max wait must not be negative, got %s", ErrInvalidOption, readable(int64(c.maxWait)))
	case c.maxWaiters < 0:
		return c, fmt.Errorf("%w: bulkhead max waiters must not be negative, got %d", ErrInvalidOption, c.maxWaiters)
	case c.clock == nil:
		return c, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	}
	return c, c.validFair(limit)
}

func validBulkheadLimit(n int) error {
	if n <= 0 || n > maxBulkheadLimit {
		return fmt.Errorf("%w: bulkhead limit must be in [1, %d], got %d", ErrInvalidCapacity, maxBulkheadLimit, n)
	}
	return nil
}

// timeoutError is the error of a wait that passed c.maxWait; built once so
// that a timeout costs no allocation.
func (c *bulkheadConfig) timeoutError() error {
	if c.maxWait == 0 {
		return nil
	}
	return fmt.Errorf("%w: no permit within the maximum wait of %s", ErrBulkheadFull, readable(int64(c.maxWait)))
}

// WithMaxWait bounds how long Acquire waits for a permit: past d it gives
// up with an error matching ErrBulkheadFull. The default, 0, sets no bound
// beyond the context's. A negative d is an error matching ErrInvalidOption.
func WithMaxWait(d time.Duration) BulkheadOption {
	return func(c *bulkheadConfig) { c.maxWait = d }
}

// WithMaxWaiters bounds how many calls may wait for a permit at once
// (per key, for a KeyedBulkhead): past n, Acquire returns ErrBulkheadFull
// at once. The default, 0, sets no bound. A negative n is an error
// matching ErrInvalidOption.
func WithMaxWaiters(n int) BulkheadOption {
	return func(c *bulkheadConfig) { c.maxWaiters = n }
}

// WithBulkheadClock makes the bulkhead take the timers of its maximum wait
// from c instead of the system clock; tests use a ManualClock. A nil c is
// an error matching ErrInvalidOption.
func WithBulkheadClock(c Clock) BulkheadOption {
	return func(cfg *bulkheadConfig) { cfg.clock = c }
}

// NewBulkhead returns a bulkhead that lets at most limit calls be in
// flight at once. It returns an error matching ErrInvalidCapacity if limit
// is not in [1, 2³¹-1], and ErrInvalidOption if an option is out of range.
func NewBulkhead(limit int, opts ...BulkheadOption) (*Bulkhead, error) {
	cfg, err := newBulkheadConfig(limit, opts)
	if err != nil {
		return nil, err
	}
	b := &Bulkhead{
		maxWait:    cfg.maxWait,
		maxWaiters: cfg.maxWaiters,
		clock:      cfg.clock,
		timeoutErr: cfg.timeoutError(),
		obs:        cfg.observed(),
		fs:         newFairState(&cfg),
	}
	s := uint64(limit) << bhLimitShift
	if b.fs != nil {
		// A fair bulkhead keeps the waiters bit set for good: every
		// decrement then comes to mu, where notifyFairLocked orders the
		// grants, and the fast paths never take a permit.
		s |= bhWaitersBit
	}
	b.state.Store(s)
	return b, nil
}

// TryAcquire takes a permit if one is free now and nobody is waiting for
// one, and reports whether it did. It never blocks. A true result must be
// paired with one Release. With WithBulkheadClasses it is a call of the
// lowest class, and takes a permit only as that class may.
//
// When two calls race for the last free permit, one gets it; the other
// is refused and, for the instant it takes to undo its attempt, may make
// a third concurrent TryAcquire refuse too even if a permit is free by
// then. No call is ever admitted beyond the limit.
func (b *Bulkhead) TryAcquire() bool {
	if b.fs != nil {
		ok := b.tryFair()
		if b.obs != nil {
			b.reportFair(b.fs.lowest(), ok, 0)
		}
		return ok
	}
	ok := b.tryAcquire()
	if b.obs != nil {
		b.report(ok, 0)
	}
	return ok
}

// report hands the event of one TryAcquire or Acquire to the observer.
func (b *Bulkhead) report(ok bool, waited time.Duration) {
	s := bhSettled(b.state.Load())
	b.obs.report("", 1, Decision{Allowed: ok, Remaining: max(bhLimit(s)-bhInFlight(s), 0)}, waited)
}

func (b *Bulkhead) tryAcquire() bool {
	if s := b.state.Load(); s&bhWaitersBit != 0 || bhInFlight(s) >= bhLimit(s) {
		return false
	}
	s := b.state.Add(1)
	if s&bhWaitersBit == 0 && bhInFlight(s) <= bhLimit(s) {
		return true
	}
	b.decrement() // refused: give back the add
	return false
}

// decrement takes one off the in-flight count and, if that frees a
// permit while calls wait, hands it over (rule 4 of Bulkhead.state). It
// returns false, leaving the count unchanged, if the count was 0.
func (b *Bulkhead) decrement() bool {
	if s := b.state.Add(^uint64(0)); s&(bhBorrow|bhWaitersBit) != 0 {
		return b.decrementSlow(s)
	}
	return true // nobody waits: nothing to hand over
}

// decrementSlow finishes a decrement whose result s has the waiters bit
// or the borrow bit set.
func (b *Bulkhead) decrementSlow(s uint64) bool {
	ok := s&bhBorrow == 0
	if !ok {
		// The count was 0: put it back. A caller that queued meanwhile,
		// seeing the borrowed count as full, is then owed a notify.
		s = b.state.Add(1)
	}
	if s&bhWaitersBit != 0 && s&bhBorrow == 0 && bhInFlight(s) < bhLimit(s) {
		b.mu.Lock()
		b.notifyLocked()
		b.mu.Unlock()
	}
	return ok
}

// bhSettled returns s as it is once any Release without Acquire in
// progress has put the count back.
func bhSettled(s uint64) uint64 {
	if s&bhBorrow != 0 {
		return s + (1<<32 - s&bhInFlightMask)
	}
	return s
}

// Acquire takes a permit, waiting in FIFO order behind earlier callers
// until one is released, ctx is done or the maximum wait (WithMaxWait)
// passes. A nil result must be paired with one Release. With
// WithBulkheadFairQueue or WithBulkheadClasses it is AcquireFor(ctx, ""):
// the order is the fair queue's, and the class ctx's priority.
//
// On failure the bulkhead is left unchanged and Acquire returns:
// ctx.Err() if ctx was done before or during the wait (even if a permit
// was free); ErrBulkheadFull at once if the bound on waiters
// (WithMaxWaiters) is reached; an error matching ErrBulkheadFull, saying
// how long it waited, if the maximum wait passed.
func (b *Bulkhead) Acquire(ctx context.Context) error {
	if b.fs != nil {
		return b.AcquireFor(ctx, "")
	}
	if b.obs == nil {
		return b.acquire(ctx)
	}
	start := b.clock.Now()
	err := b.acquire(ctx)
	b.report(err == nil, max(b.clock.Now().Sub(start), 0))
	return err
}

func (b *Bulkhead) acquire(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	if b.tryAcquire() {
		return nil
	}
	w, err := b.enqueue()
	if w == nil {
		return err
	}
	if err := awaitPermit(ctx, w, b.clock, b.maxWait, b.timeoutErr); err != nil {
		b.abandon(w)
		return err
	}
	return nil
}

// enqueue takes a permit if one is free, returning (nil, nil); else it
// queues a waiter and returns it, or returns (nil, ErrBulkheadFull) if the
// bound on waiters is reached.
func (b *Bulkhead) enqueue() (*permitWaiter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		s := b.state.Load()
		if s&bhWaitersBit != 0 {
			// Others wait: queue behind them, even if a permit is free
			// for the moment (it is theirs, first come first served).
			if b.maxWaiters > 0 && b.queue.n >= b.maxWaiters {
				return nil, ErrBulkheadFull
			}
			break
		}
		if bhInFlight(s) < bhLimit(s) {
			if b.state.CompareAndSwap(s, s+1) {
				return nil, nil
			}
			continue
		}
		// Setting the bit, only if the count is still at the limit, makes
		// the decrement that next frees a permit come to mu and hand it
		// over to this waiter.
		if b.state.CompareAndSwap(s, s|bhWaitersBit) {
			break
		}
	}
	w := newPermitWaiter()
	b.queue.push(w)
	// A permit freed by a decrement still on its way to mu goes to the
	// head of the queue now; on return, a non-empty queue means the count
	// is at the limit.
	b.notifyLocked()
	return w, nil
}

// abandon withdraws w after its wait ended without the permit. If the
// permit was handed over at that very instant, it is passed on to the next
// waiter or back to the pool, so the bulkhead is left as if w never waited.
func (b *Bulkhead) abandon(w *permitWaiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fs != nil {
		b.abandonFairLocked(w)
		return
	}
	if w.granted {
		b.state.Add(^uint64(0)) // w's permit, so the count is at least 1
		b.notifyLocked()
		return
	}
	b.queue.remove(w)
	if b.queue.n == 0 {
		b.state.And(^uint64(bhWaitersBit))
	}
}

// Release gives back a permit taken by TryAcquire or Acquire. If calls
// are waiting and the bulkhead is below its limit, the permit goes to the
// longest-waiting one.
//
// Release without a permit held panics with "ratelimit: Release without
// Acquire", leaving the count unchanged: it is a programmer error.
func (b *Bulkhead) Release() {
	// decrement, written out so that Release inlines.
	if s := b.state.Add(^uint64(0)); s&(bhBorrow|bhWaitersBit) != 0 {
		b.releaseSlow(s)
	}
}

func (b *Bulkhead) releaseSlow(s uint64) {
	if !b.decrementSlow(s) {
		panic(errReleaseWithoutAcquire)
	}
}

const errReleaseWithoutAcquire = "ratelimit: Release without Acquire"

// notifyLocked hands free permits to waiters, first come first served,
// and clears the waiters bit when the queue empties. On return, a
// non-empty queue means the count was at the limit when last looked at;
// a permit freed since is handed over by its decrement (rule 4 of
// Bulkhead.state). Requires b.mu held.
func (b *Bulkhead) notifyLocked() {
	if b.fs != nil {
		b.notifyFairLocked()
		return
	}
	for b.queue.n > 0 {
		s := b.state.Load()
		if s&bhBorrow != 0 || bhInFlight(s) >= bhLimit(s) {
			return
		}
		next := s + 1
		if b.queue.n == 1 {
			next &^= bhWaitersBit
		}
		// A compare-and-swap, not a store: TryAcquire may add meanwhile.
		if !b.state.CompareAndSwap(s, next) {
			continue
		}
		b.queue.pop().grant()
	}
}

// Do runs fn holding a permit: it acquires one as Acquire does, calls
// fn(ctx) and releases the permit when fn returns, or panics (the panic
// then goes on). It returns Acquire's error without calling fn, or fn's
// error. fn must not be nil.
func (b *Bulkhead) Do(ctx context.Context, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: Bulkhead.Do with nil function")
	}
	if err := b.Acquire(ctx); err != nil {
		return err
	}
	defer b.Release()
	return fn(ctx)
}

// InFlight returns the number of permits held now. After SetLimit shrinks
// the bulkhead it may exceed Limit until enough calls finish. It is a
// snapshot for metrics: a TryAcquire being refused at that instant may be
// counted too, so a full bulkhead may report one or two above Limit for
// an instant, though no call is admitted beyond it.
func (b *Bulkhead) InFlight() int { return bhInFlight(bhSettled(b.state.Load())) }

// Limit returns the most calls admitted in flight at once.
func (b *Bulkhead) Limit() int { return bhLimit(bhSettled(b.state.Load())) }

// Waiting returns the number of calls waiting in Acquire now.
func (b *Bulkhead) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fs != nil {
		return b.fs.q.n
	}
	return b.queue.n
}

// SetLimit changes the limit to n. Growing hands the new permits to
// waiting calls at once, in FIFO order. Shrinking drops no one: calls in
// flight finish, and no call is admitted until fewer than n remain. An n
// outside [1, 2³¹-1] returns an error matching ErrInvalidCapacity and
// changes nothing.
func (b *Bulkhead) SetLimit(n int) error {
	if err := validBulkheadLimit(n); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		s := b.state.Load()
		if s&bhBorrow != 0 {
			// A Release without Acquire is putting the count back; its
			// add would carry into the new limit.
			runtime.Gosched()
			continue
		}
		if b.state.CompareAndSwap(s, s&^bhLimitMask|uint64(n)<<bhLimitShift) {
			break
		}
	}
	b.notifyLocked()
	return nil
}

// permitWaiter is a call waiting for a permit. Its ready channel is closed,
// under the lock that guards its queue, when the permit is handed over.
type permitWaiter struct {
	ready      chan struct{}
	granted    bool // guarded by the queue's lock
	prev, next *permitWaiter
	tenant     string // in a fair bulkhead's queue
	class      int    // in a fair bulkhead's queue
}

func newPermitWaiter() *permitWaiter {
	return &permitWaiter{ready: make(chan struct{})}
}

// grant hands the permit to w. Requires the queue's lock held.
func (w *permitWaiter) grant() {
	w.granted = true
	close(w.ready)
}

// permitQueue is a FIFO of waiters, a doubly linked list so that a waiter
// that gives up leaves from anywhere in O(1).
type permitQueue struct {
	head, tail *permitWaiter
	n          int
}

func (q *permitQueue) push(w *permitWaiter) {
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	q.n++
}

func (q *permitQueue) pop() *permitWaiter {
	w := q.head
	q.remove(w)
	return w
}

// remove takes w, which must be in q, out of q.
func (q *permitQueue) remove(w *permitWaiter) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}

// awaitPermit blocks until w is granted a permit (nil), ctx is done
// (ctx.Err()) or maxWait, if positive, passes on clock (timeoutErr). On an
// error the caller must withdraw w under its queue's lock, checking
// w.granted: the permit may have been handed over at the same instant.
func awaitPermit(ctx context.Context, w *permitWaiter, clock Clock, maxWait time.Duration, timeoutErr error) error {
	var timeout <-chan time.Time
	if maxWait > 0 {
		t := clock.NewTimer(maxWait)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return timeoutErr
	}
}
