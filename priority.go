package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Priority is a request's class in a Fair with classes (WithClasses): the
// index of its class, 0 the highest.
type Priority int

// Class is one priority class of a Fair: a name (for metrics and errors)
// and the events per activity window reserved for it.
type Class struct {
	Name     string
	Reserved int64
}

// ErrUnknownClass means a Priority names no class of the Fair. Nothing is
// allowed for it.
var ErrUnknownClass = errors.New("ratelimit: unknown priority class")

// WithClasses gives a Fair ordered priority classes, highest first, each
// with events reserved for it in every activity window. What a class has
// not yet used of its reserve is held for it against every other class, so
// each class is allowed at least min(its demand, its reserve) per window
// whatever the others send: that is the starvation bound of every class,
// the lowest included (a class reserving 0 may be starved). A request
// within its class's unused reserve goes to the shared limiter directly,
// whatever its tenant's share; one beyond it is decided as without classes
// (the tenant's guarantee or borrowing), and only from the headroom above
// what is held for the other classes. So as the limit fills, the pool above
// the reserves runs out first and the classes past their reserves are
// refused, while the others still have theirs.
//
// The reserves must add up to at most the rate's count, and at least one
// must be positive; NewFair returns ErrInvalidOption otherwise. Without a
// priority (Allow, or AllowN with a ctx that has none) a request is of the
// lowest class.
func WithClasses(classes ...Class) FairOption {
	return func(c *fairConfig) { c.classes, c.classesSet = append([]Class(nil), classes...), true }
}

// classState is a class's reserve and what it used of the window.
type classState struct {
	Class
	used int64
}

func validClasses(classes []Class, set bool, n int64) error {
	if !set {
		return nil
	}
	var sum int64
	for _, c := range classes {
		if c.Reserved < 0 || c.Reserved > n {
			return errors.Join(ErrInvalidOption, errors.New("ratelimit: class "+strconv.Quote(c.Name)+" reserves "+strconv.FormatInt(c.Reserved, 10)+" of a limit of "+strconv.FormatInt(n, 10)))
		}
		if c.Reserved > n-sum { // sum ≤ n here, so n−sum cannot wrap
			return errors.Join(ErrInvalidOption, errors.New("ratelimit: the classes reserve more than the limit of "+strconv.FormatInt(n, 10)))
		}
		sum += c.Reserved
	}
	switch {
	case len(classes) == 0:
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: WithClasses needs at least one class"))
	case sum == 0:
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: no class reserves anything: the classes would have no effect"))
	}
	return nil
}

type priorityKey struct{}

// ContextWithPriority returns a copy of ctx that carries p, the class
// Fair.AllowN and Fair.WaitN decide a request in.
func ContextWithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityFromContext returns the Priority ctx carries, if any.
func PriorityFromContext(ctx context.Context) (Priority, bool) {
	p, ok := ctx.Value(priorityKey{}).(Priority)
	return p, ok
}

// AllowPriority is Allow for a request of class p. It reports false for a
// p that names no class (see ErrUnknownClass).
func (f *Fair) AllowPriority(tenant string, p Priority) bool {
	d, err := f.allowClass(context.Background(), tenant, 1, p)
	return err == nil && d.Allowed
}

// class returns the class of ctx's priority, the lowest by default.
func (f *Fair) classOf(ctx context.Context) Priority {
	if p, ok := PriorityFromContext(ctx); ok {
		return p
	}
	return Priority(len(f.classes) - 1)
}

// allowClass decides n events of tenant in class p, and reports the
// decision to the observer. Requires f.classes.
func (f *Fair) allowClass(ctx context.Context, tenant string, n int, p Priority) (Decision, error) {
	d, err := f.decideClass(ctx, tenant, n, p)
	if err == nil && f.observer != nil && n > 0 {
		f.observeClass(p, n, d)
		if f.groupOf != nil {
			f.observeGroup(tenant, n, d)
		}
	}
	return d, err
}

// decideClass decides n events of tenant in class p.
func (f *Fair) decideClass(ctx context.Context, tenant string, n int, p Priority) (Decision, error) {
	switch {
	case n < 0:
		return Decision{}, ErrNegativeN
	case len(tenant) > f.maxKeyLen:
		return Decision{}, ErrTenantKeyTooLong
	case p < 0 || int(p) >= len(f.classes):
		return Decision{}, ErrUnknownClass
	case n == 0:
		return f.shared.AllowN(ctx, f.key, 0)
	}
	now := f.nc.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.enter(tenant, int64(n), now)
	c := &f.classes[p]
	own := max(0, c.Reserved-c.used)
	if int64(n) <= own { // within the class's reserve
		d, err := f.shared.AllowN(ctx, f.key, n)
		if err == nil && d.Allowed {
			f.countClass(t, c, int64(n))
		}
		return d, err
	}
	peek, err := f.shared.AllowN(ctx, f.key, 0)
	if err != nil {
		return peek, err
	}
	if n > peek.Limit {
		return Decision{}, ErrExceedsLimit
	}
	held := f.classUnmet - own
	if !f.guaranteed(t, int64(n), now) {
		held += f.held(t)
	}
	if int64(peek.Remaining) < held+int64(n) {
		return Decision{
			Limit:      peek.Limit,
			Remaining:  int(max(0, int64(peek.Remaining)-held)),
			RetryAfter: time.Duration((f.win+1)*f.window - now),
			ResetAfter: peek.ResetAfter,
		}, nil
	}
	d, err := f.shared.AllowN(ctx, f.key, n)
	if err == nil && d.Allowed {
		f.countClass(t, c, int64(n))
	}
	return d, err
}

// countClass records n events allowed to t in class c. Requires f.mu held.
func (f *Fair) countClass(t *tenant, c *classState, n int64) {
	f.classUnmet -= min(c.used+n, c.Reserved) - min(c.used, c.Reserved)
	c.used += n
	f.count(t, n)
}

// ClassUsed reports what class p has been allowed in the current window,
// and what is left of its reserve.
func (f *Fair) ClassUsed(p Priority) (used, reserveLeft int64, err error) {
	if p < 0 || int(p) >= len(f.classes) {
		return 0, 0, ErrUnknownClass
	}
	now := f.nc.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll(now / f.window)
	c := f.classes[p]
	return c.used, max(0, c.Reserved-c.used), nil
}

// rollClasses starts the classes' counts for a new window. Requires f.mu
// held.
func (f *Fair) rollClasses() {
	f.classUnmet = 0
	for i := range f.classes {
		f.classes[i].used = 0
		f.classUnmet += f.classes[i].Reserved
	}
}
