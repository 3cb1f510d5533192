package ratelimit

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// ErrQueueFull means a Fair refused to queue a wait: its tenant already had
// WithFairQueue's per-tenant number of waits queued, or the Fair its total.
// Nothing was consumed.
var ErrQueueFull = errors.New("ratelimit: fair queue full")

// Defaults of WithFairQueue.
const (
	DefaultFairQueuePerTenant = 64
	DefaultFairQueueTotal     = 4096
)

// WithFairQueue bounds Fair's queue of waits: at most perTenant queued for
// one tenant and total for all; both must be positive. Past either, WaitN
// returns ErrQueueFull at once.
func WithFairQueue(perTenant, total int) FairOption {
	return func(c *fairConfig) { c.queuePerTenant, c.queueTotal = perTenant, total }
}

// fairQueue is one tenant's queued waits, oldest first.
type fairQueue struct {
	key     string
	waiters []*fairWaiter
}

// fairWaiter is one queued wait. ready is closed when it is granted or
// fails; err says which. Both are written under Fair.mu.
type fairWaiter struct {
	n     int
	p     Priority // its class, with WithClasses
	q     *fairQueue
	ready chan struct{}
	done  bool
	err   error
}

// Queued reports how many waits are queued.
func (f *Fair) Queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queued
}

// Wait is shorthand for WaitN(ctx, tenant, 1).
func (f *Fair) Wait(ctx context.Context, tenant string) error { return f.WaitN(ctx, tenant, 1) }

// WaitN blocks until n events for tenant may happen, and records them.
//
// With no wait queued, it first tries AllowN's decision (the tenant's
// guarantee, or borrowing). Otherwise the wait is queued: queues are served
// round-robin across tenants, first in first out within one, each turn
// granting the oldest wait of the next tenant as soon as the shared limiter
// allows its n events. So a wait queued behind other tenants' waits is
// granted after at most one grant to each other tenant with waits queued,
// however many waits any of them has queued. Queued grants are taken from
// the shared limiter directly (the round-robin is their fairness) and
// counted in the tenant's window like any other. Calls to Allow and AllowN
// are not queued and may take capacity ahead of the queue, within their
// own rules.
//
// It returns nil once granted; ErrQueueFull at once if the queue bounds
// (WithFairQueue) are reached; ctx.Err() if ctx is done first, with nothing
// consumed (a wait granted as ctx ends counts as granted: nil). It fails
// with ErrNegativeN, ErrTenantKeyTooLong or ErrExceedsLimit (n above the
// shared limit) at once. n == 0 returns nil. Unlike Limiter.WaitN, it does
// not refuse up front a wait that could not end before ctx's deadline: a
// queue's delay depends on the other tenants.
func (f *Fair) WaitN(ctx context.Context, tenant string, n int) error {
	if n < 0 {
		return ErrNegativeN
	}
	if len(tenant) > f.maxKeyLen {
		return ErrTenantKeyTooLong
	}
	if n == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	peek, err := f.shared.AllowN(ctx, f.key, 0)
	if err != nil {
		return err
	}
	if n > peek.Limit {
		return ErrExceedsLimit
	}
	f.mu.Lock()
	if f.queued == 0 {
		f.mu.Unlock()
		d, err := f.AllowN(ctx, tenant, n)
		if err != nil || d.Allowed {
			return err
		}
		f.mu.Lock()
	}
	var p Priority
	if f.classes != nil {
		p = f.classOf(ctx)
		if p < 0 || int(p) >= len(f.classes) {
			f.mu.Unlock()
			return ErrUnknownClass
		}
	}
	w, err := f.enqueue(tenant, n, p)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.done {
		return w.err
	}
	f.remove(w)
	return ctx.Err()
}

// enqueue queues a wait of n for tenant and makes sure the queue is being
// served. Requires f.mu held.
func (f *Fair) enqueue(tenant string, n int, p Priority) (*fairWaiter, error) {
	q := f.queues[tenant]
	if f.queued >= f.queueTotal || (q != nil && len(q.waiters) >= f.queuePerTenant) {
		return nil, ErrQueueFull
	}
	if q == nil {
		if f.queues == nil {
			f.queues = make(map[string]*fairQueue)
		}
		// A tenant with no waits queued joins at the back of the round:
		// just before the queue whose turn is next.
		q = &fairQueue{key: tenant}
		f.queues[tenant] = q
		f.ring = slices.Insert(f.ring, f.turn, q)
		if len(f.ring) > 1 {
			f.turn++
		}
	}
	w := &fairWaiter{n: n, p: p, q: q, ready: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	f.queued++
	if !f.serving {
		f.serving = true
		go f.serve()
	} else {
		f.kickServer()
	}
	return w, nil
}

// kickServer wakes the server to look at the queue again. Requires f.mu
// held.
func (f *Fair) kickServer() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// remove takes w, not granted, out of its queue, and its queue out of the
// ring if it is left empty. Requires f.mu held.
func (f *Fair) remove(w *fairWaiter) {
	q := w.q
	i := slices.Index(q.waiters, w)
	if i < 0 {
		return
	}
	q.waiters = slices.Delete(q.waiters, i, i+1)
	f.queued--
	if i == 0 {
		f.kickServer() // the head changed
	}
	if len(q.waiters) == 0 {
		f.dropQueue(q)
	}
}

// dropQueue takes the empty queue q out of the ring, keeping the turn on
// the queue that follows it. Requires f.mu held.
func (f *Fair) dropQueue(q *fairQueue) {
	i := slices.Index(f.ring, q)
	f.ring = slices.Delete(f.ring, i, i+1)
	delete(f.queues, q.key)
	if i < f.turn {
		f.turn--
	}
	if f.turn >= len(f.ring) {
		f.turn = 0
	}
}

// serve grants the queued waits, round-robin across tenants, and returns
// when the queue is empty. One runs at a time (f.serving).
func (f *Fair) serve() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.queued > 0 {
		q := f.ring[f.turn]
		w := q.waiters[0]
		now := f.nc.now()
		f.roll(now / f.window)
		var d Decision
		var err error
		if wait := f.classWait(w, now); wait > 0 {
			d.RetryAfter = wait // held for other classes
		} else {
			d, err = f.shared.AllowN(context.Background(), f.key, w.n)
		}
		if err == nil && !d.Allowed {
			timer := f.nc.clock.NewTimer(max(d.RetryAfter, 1))
			f.mu.Unlock()
			select {
			case <-timer.C():
			case <-f.kick:
			}
			timer.Stop()
			f.mu.Lock()
			continue // the queue may have changed meanwhile
		}
		if err == nil {
			t := f.enter(q.key, int64(w.n), now)
			if f.classes != nil {
				f.countClass(t, &f.classes[w.p], int64(w.n))
			} else {
				f.count(t, int64(w.n))
			}
		}
		w.done, w.err = true, err
		close(w.ready)
		q.waiters = q.waiters[1:]
		f.queued--
		if len(q.waiters) == 0 {
			f.dropQueue(q)
		} else {
			f.turn = (f.turn + 1) % len(f.ring)
		}
	}
	f.serving = false
}

// validQueue checks WithFairQueue's bounds.
func validQueue(perTenant, total int) error {
	if perTenant <= 0 || total <= 0 {
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: WithFairQueue("+strconv.Itoa(perTenant)+", "+strconv.Itoa(total)+") needs positive bounds"))
	}
	return nil
}

// classWait returns 0 if w's class may take its n events from the shared
// limiter now (no classes, within its reserve, or the headroom above what
// is held for the other classes has them), and otherwise how long to wait
// before looking again: one event's interval of the rate, or less if the
// window ends sooner. Requires f.mu held.
func (f *Fair) classWait(w *fairWaiter, now int64) time.Duration {
	if f.classes == nil {
		return 0
	}
	c := f.classes[w.p]
	own := max(0, c.Reserved-c.used)
	if int64(w.n) <= own {
		return 0
	}
	peek, err := f.shared.AllowN(context.Background(), f.key, 0)
	if err != nil || int64(peek.Remaining) >= int64(w.n)+f.classUnmet-own {
		return 0
	}
	return time.Duration(max(1, min((f.win+1)*f.window-now, f.window/f.perWindow)))
}

// Reserve books n events for tenant only if they may happen now, as
// AllowN decides (Fair does not book ahead, as Limiter allows for a
// composite): the Reservation is OK with no delay if they were allowed
// and recorded, and otherwise not OK, having booked nothing, with the
// Decision's RetryAfter as the time to ask again. Its Cancel gives nothing
// back: the events acted when booked. With it Fair is a Limiter, and can
// go where one is expected (httplimit.Middleware, grpclimit), the key
// being the tenant.
func (f *Fair) Reserve(ctx context.Context, tenant string, n int) (*Reservation, error) {
	d, err := f.AllowN(ctx, tenant, n)
	if err != nil {
		return nil, err
	}
	clk := f.nc.clock
	return NewReservation(clk, d.Allowed, d, clk.Now(), nil), nil
}

var _ Limiter = (*Fair)(nil)
