package ratelimit

import (
	"context"
	"errors"
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

// fairWaiter is one queued wait. ready is closed when it is granted or
// fails; err says which. Both are written under Fair.mu.
type fairWaiter struct {
	n      int
	p      Priority // its class, with WithClasses
	tenant string
	ready  chan struct{}
	done   bool
	err    error
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
// With classes (WithClasses), the queue is ordered by class: the wait
// served next is of the highest class with waits whose class may take its
// events now (within its reserve, or from the headroom above what is held
// for the other classes), round-robin across tenants within that class.
// So a queued higher-class wait goes before every lower-class one. The
// lowest class with waits is not starved: after 8 grants in a row to
// higher classes while it waits, its next wait is served first whenever
// its class may take the events. The bound of one grant per other tenant
// holds among the tenants of one class.
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
	if f.wq == nil {
		f.wq = newClassQueues[*fairWaiter](max(len(f.classes), 1), f.queuePerTenant, f.queueTotal)
	}
	if total, own := f.wq.full(tenant); total || own {
		return nil, ErrQueueFull
	}
	// A tenant with no waits queued joins its class's round at the back
	// (classQueues, rule 2).
	w := &fairWaiter{n: n, p: p, tenant: tenant, ready: make(chan struct{})}
	f.wq.push(int(p), tenant, w)
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

// remove takes w, not granted, out of the queue; the queue drops its
// tenant if it is left with none. Requires f.mu held.
func (f *Fair) remove(w *fairWaiter) {
	if f.wq.remove(int(w.p), w.tenant, w) {
		f.queued--
		f.kickServer() // a head may have changed
	}
}

// serve grants the queued waits, in class order and round-robin across
// tenants within a class (classQueues), and returns when the queue is
// empty. One runs at a time (f.serving).
func (f *Fair) serve() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.queued > 0 {
		now := f.nc.now()
		f.roll(now / f.window)
		c, ok := f.wq.pick(func(c int) bool { return f.classWait(f.wq.head(c), now) == 0 })
		var d Decision
		var err error
		if !ok {
			hi, _ := f.wq.bounds()
			d.RetryAfter = f.classWait(f.wq.head(hi), now) // held for other classes
		} else {
			d, err = f.shared.AllowN(context.Background(), f.key, f.wq.head(c).n)
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
		w := f.wq.pop(c)
		if err == nil {
			t := f.enter(w.tenant, int64(w.n), now)
			if f.classes != nil {
				f.countClass(t, &f.classes[w.p], int64(w.n))
			} else {
				f.count(t, int64(w.n))
			}
		}
		w.done, w.err = true, err
		close(w.ready)
		f.queued--
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
