package ratelimit

import (
	"context"
	"errors"
	"math/bits"
	"strconv"
	"sync"
	"time"
)

// Fair splits one shared limit among the tenants that use it, max-min
// fair: under contention each active tenant may use at least its share of
// the limit, and what one tenant leaves unused the others may take. It
// answers Allow, AllowN, Reserve (only what is allowed now) and WaitN (a
// round-robin queue across tenants, see WaitN) for a tenant, the key of
// those methods, so it is a Limiter. Every event it allows is also allowed
// by the shared Limiter (any algorithm, asked on one shared key), so the
// shared limit's bound holds whatever the tenants do. WithClasses adds
// priority classes with reserved shares (see WithClasses).
//
// The model, in activity windows of the rate's period W, aligned to the Unix
// epoch (the window of t is [k·W, (k+1)·W), k = ⌊t/W⌋):
//
//   - A tenant is active in window k if it asked at least once in window k
//     or in window k−1. An idle tenant stops costing anything one full
//     window after its last request, and its entry is dropped then.
//   - At the start of window k the share is s = max(1, ⌊N/A⌋), where N is
//     the rate's count and A the number of tenants that asked in window
//     k−1 (A = 0 after an idle window). Each of those A tenants is
//     guaranteed g = min(s, what it asked for in window k−1). A tenant not
//     counted in A (new, or back after an idle window) is guaranteed
//     nothing in its first window: it may only borrow.
//   - A request that keeps its tenant within g in the window, and within
//     b + ⌊g·τ/W⌋ by τ into it (the guarantee paced over the window,
//     b = max(1, ⌊g/16⌋) ahead), asks the shared limiter directly. Pacing
//     keeps a flooder from taking its whole share at the window's start
//     from a bucket that others need then.
//   - Any other request borrows: it is allowed only if the shared
//     limiter's Remaining is at least n plus what is held for the others,
//     the sum over them of what they have still to use of their g.
//
// So the unused guarantees of active tenants are held for them until the
// window ends, and only the headroom above them is lent. With a shared
// limit that allows N events in each window aligned with Fair's (a
// FixedWindow of the same rate), a tenant that asked d′ in the window
// before and asks d is allowed at least min(d, d′, s) (TestFairFloorProperty).
// With other algorithms the shared limit's bound holds the same way; the
// floor holds once the shared limiter's Remaining is back above what is
// held (a bucket drained at a window's start refills to its guaranteed
// users first, since nobody may borrow until then). The guarantees never
// add up to more than N: a flood of new tenants competes only for the
// headroom. docs/fairness.md has the measured floors of each algorithm.
//
// Memory: one entry per active tenant, at most WithMaxTenants of them
// (default DefaultMaxTenants). Tenants beyond the cap share one overflow
// entry, so a flood of distinct tenants shares one share: it is never a
// way past the shared limit. A tenant is any string of at most
// WithMaxTenantKeyLen bytes (default DefaultMaxTenantKeyLen), "" included;
// a longer one is refused with ErrTenantKeyTooLong.
//
// The shared limiter should be used only through Fair: calls made to it
// directly count against the limit but not against any tenant, and can use
// the headroom Fair holds for the tenants' guarantees.
//
// A Fair must be built with NewFair. It is safe for concurrent use; its
// decisions take one mutex (the shared key is one point of contention
// anyway) and read the clock once; Allow over a TokenBucket on the same
// clock reads it once in all.
type Fair struct {
	shared     Limiter
	key        string
	perWindow  int64
	window     int64
	nc         nanoClock
	at         allowerAt // shared, when it can take nc's reading (see allowerAt)
	maxTenants int
	maxKeyLen  int

	mu       sync.Mutex
	win      int64              // the current window's index
	share    int64              // s for the current window
	active   int64              // tenants counted active in the current window
	asked    int64              // distinct tenants asked in the current window
	unmet    int64              // Σ over tenants of max(0, g − used)
	tenants  map[string]*tenant // requires mu held
	overflow tenant             // the shared entry of tenants past the cap
	started  bool

	// The queue of waits (fair_queue.go), all requiring mu held but kick.
	queuePerTenant, queueTotal int
	wq                         *classQueues[*fairWaiter] // nil until a wait is queued
	queued                     int
	serving                    bool          // a serve goroutine is running
	kick                       chan struct{} // wakes serve; buffered, 1

	// Priority classes (priority.go), requiring mu held.
	classes    []classState
	classUnmet int64 // Σ over classes of max(0, Reserved − used)

	observer Observer // WithFairObserver; nil: none
	name     string   // WithFairName

	// Tenant groups (WithTenantGroups); groupOf nil: none, or no observer.
	groupNames []string
	groupOf    func(string) int
}

// tenant is one tenant's counts in the current window.
type tenant struct {
	asks    int64 // events asked for in the window (its demand)
	used    int64 // events allowed to it in the window
	g       int64 // its guarantee: min(s, its asks in the window before)
	counted bool  // counted in active
}

// Defaults of Fair's options.
const (
	// DefaultMaxTenants is how many tenants a Fair tracks at once.
	DefaultMaxTenants = 100_000
	// DefaultMaxTenantKeyLen is the longest tenant key a Fair accepts.
	DefaultMaxTenantKeyLen = 256
)

// ErrTenantKeyTooLong means a tenant's key is longer than the Fair's
// WithMaxTenantKeyLen. Nothing is allowed for it.
var ErrTenantKeyTooLong = errors.New("ratelimit: tenant key too long")

// FairOption configures NewFair.
type FairOption func(*fairConfig)

type fairConfig struct {
	clock                      Clock
	key                        string
	maxTenants                 int
	maxKeyLen                  int
	queuePerTenant, queueTotal int
	classes                    []Class
	classesSet                 bool
	observer                   Observer
	name                       string
	groupNames                 []string
	groupOf                    func(string) int
	groupsSet                  bool
}

// WithFairClock sets the clock Fair reads its windows from. It must be the
// shared limiter's clock. The default is the system clock.
func WithFairClock(c Clock) FairOption { return func(c2 *fairConfig) { c2.clock = c } }

// WithFairKey sets the key Fair asks the shared limiter on; the default is
// "" (one global bucket).
func WithFairKey(key string) FairOption { return func(c *fairConfig) { c.key = key } }

// WithMaxTenants caps how many tenants a Fair tracks; n must be positive.
// Tenants first seen while the table is full share one overflow entry
// until entries are dropped at the next window.
func WithMaxTenants(n int) FairOption { return func(c *fairConfig) { c.maxTenants = n } }

// WithMaxTenantKeyLen sets the longest tenant key accepted; n must be
// positive. Longer keys are refused (ErrTenantKeyTooLong), never let past.
func WithMaxTenantKeyLen(n int) FairOption { return func(c *fairConfig) { c.maxKeyLen = n } }

// NewFair returns a Fair over shared, whose sustained limit is rate: N
// events per period, the period being the activity window. rate should be
// what shared allows per period (for a FixedWindow, its own rate; for a
// token bucket, its refill rate). A rate above what shared allows
// oversubscribes the guarantees (the shared bound still holds; the floor
// does not); a rate below it leaves the rest to be borrowed.
//
// It returns an error matching ErrInvalidRate for an invalid rate or one
// whose count does not fit an int, and ErrInvalidOption for a nil shared
// limiter or a non-positive cap.
func NewFair(shared Limiter, rate Rate, opts ...FairOption) (*Fair, error) {
	if shared == nil {
		return nil, errors.Join(ErrInvalidOption, errors.New("ratelimit: NewFair needs a shared limiter"))
	}
	if err := rate.validate(); err != nil {
		return nil, err
	}
	if int64(rate.Period) > maxSpan {
		return nil, errors.Join(ErrInvalidRate, errors.New("ratelimit: fair window longer than "+maxSpanText))
	}
	cfg := fairConfig{
		maxTenants: DefaultMaxTenants, maxKeyLen: DefaultMaxTenantKeyLen,
		queuePerTenant: DefaultFairQueuePerTenant, queueTotal: DefaultFairQueueTotal,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxTenants <= 0 {
		return nil, errors.Join(ErrInvalidOption, errors.New("ratelimit: WithMaxTenants "+strconv.Itoa(cfg.maxTenants)+" is not positive"))
	}
	if cfg.maxKeyLen <= 0 {
		return nil, errors.Join(ErrInvalidOption, errors.New("ratelimit: WithMaxTenantKeyLen "+strconv.Itoa(cfg.maxKeyLen)+" is not positive"))
	}
	if err := validQueue(cfg.queuePerTenant, cfg.queueTotal); err != nil {
		return nil, err
	}
	if err := validClasses(cfg.classes, cfg.classesSet, rate.N); err != nil {
		return nil, err
	}
	if err := validGroups(cfg.groupNames, cfg.groupOf, cfg.groupsSet); err != nil {
		return nil, err
	}
	var classes []classState
	for _, c := range cfg.classes {
		classes = append(classes, classState{Class: c})
	}
	f := &Fair{
		observer:       cfg.observer,
		name:           cfg.name,
		classes:        classes,
		queuePerTenant: cfg.queuePerTenant,
		queueTotal:     cfg.queueTotal,
		kick:           make(chan struct{}, 1),
		shared:         shared,
		key:            cfg.key,
		perWindow:      rate.N,
		window:         int64(rate.Period),
		nc:             newNanoClock(cfg.clock),
		maxTenants:     cfg.maxTenants,
		maxKeyLen:      cfg.maxKeyLen,
		tenants:        make(map[string]*tenant),
	}
	if cfg.observer != nil && cfg.groupsSet {
		f.groupNames, f.groupOf = cfg.groupNames, cfg.groupOf
	}
	if a, ok := shared.(allowerAt); ok {
		if nc := a.nanoClock(); sameClock(nc.clock, f.nc.clock) {
			f.at, f.nc = a, nc
		}
	}
	return f, nil
}

// allowerAt is a shared limiter whose Allow can take the instant Fair read
// already, on the limiter's own time line, instead of reading the clock a
// second time.
type allowerAt interface {
	nanoClock() nanoClock
	allowAt(key string, now int64) bool
}

// sameClock reports whether a and b are the same clock. Clocks of a type
// that cannot be compared are never the same.
func sameClock(a, b Clock) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Allow reports whether one event for tenant may happen now, and records
// it if so, in the tenant's count and in the shared limiter. For a known
// tenant within its share it does not allocate.
func (f *Fair) Allow(tenant string) bool {
	if len(tenant) > f.maxKeyLen {
		return false
	}
	if f.classes != nil {
		return f.AllowPriority(tenant, Priority(len(f.classes)-1))
	}
	if f.groupOf != nil {
		d, err := f.AllowN(context.Background(), tenant, 1)
		return err == nil && d.Allowed
	}
	now := f.nc.now()
	f.mu.Lock()
	t := f.enter(tenant, 1, now)
	var ok bool
	switch {
	case !f.guaranteed(t, 1, now):
		ok = f.borrow(t, 1)
	case f.at != nil:
		ok = f.at.allowAt(f.key, now)
	default:
		ok = f.shared.Allow(f.key)
	}
	if ok {
		f.count(t, 1)
	}
	f.mu.Unlock()
	return ok
}

// AllowN reports whether n events for tenant may happen now, all or
// nothing, and records them if so. The Decision is the shared limiter's;
// when the tenant is refused because it is past its share and the headroom
// is held for others, Allowed is false, Remaining is what is left above the
// held guarantees, and RetryAfter is the time until the next window, when
// the tenant's count starts again (the shared limit may still refuse then).
// n == 0 peeks at the shared limiter. With WithClasses, ctx's priority
// (ContextWithPriority; the lowest class if none) decides the class. It
// fails with ErrNegativeN, ErrTenantKeyTooLong, ErrExceedsLimit,
// ErrUnknownClass, or the shared limiter's error.
func (f *Fair) AllowN(ctx context.Context, tenant string, n int) (Decision, error) {
	if n < 0 {
		return Decision{}, ErrNegativeN
	}
	if len(tenant) > f.maxKeyLen {
		return Decision{}, ErrTenantKeyTooLong
	}
	if f.classes != nil {
		return f.allowClass(ctx, tenant, n, f.classOf(ctx))
	}
	d, err := f.allowN(ctx, tenant, n)
	if err == nil && n > 0 && f.groupOf != nil {
		f.observeGroup(tenant, n, d)
	}
	return d, err
}

// allowN is AllowN for a Fair without classes, n >= 0 and a tenant key
// that is not too long.
func (f *Fair) allowN(ctx context.Context, tenant string, n int) (Decision, error) {
	if n == 0 {
		return f.shared.AllowN(ctx, f.key, 0)
	}
	now := f.nc.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.enter(tenant, int64(n), now)
	if f.guaranteed(t, int64(n), now) {
		d, err := f.shared.AllowN(ctx, f.key, n)
		if err == nil && d.Allowed {
			f.count(t, int64(n))
		}
		return d, err
	}
	peek, err := f.shared.AllowN(ctx, f.key, 0)
	if err != nil {
		return peek, err
	}
	held := f.held(t)
	if n > peek.Limit {
		return Decision{}, ErrExceedsLimit
	}
	if int64(peek.Remaining) < held+int64(n) {
		free := max(0, int64(peek.Remaining)-held)
		return Decision{
			Limit:      peek.Limit,
			Remaining:  int(free),
			RetryAfter: time.Duration((f.win+1)*f.window - now),
			ResetAfter: peek.ResetAfter,
		}, nil
	}
	d, err := f.shared.AllowN(ctx, f.key, n)
	if err == nil && d.Allowed {
		f.count(t, int64(n))
	}
	return d, err
}

// Share reports the current window's share s and how many tenants are
// counted active in it.
func (f *Fair) Share() (share int64, active int) {
	now := f.nc.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll(now / f.window)
	return f.share, int(f.active)
}

// Tenants reports how many tenants have an entry (the overflow entry not
// counted).
func (f *Fair) Tenants() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tenants)
}

// guaranteed reports whether n more events for t are within its paced
// guarantee g: at most g in the window, and at most b + ⌊g·τ/W⌋ by τ into
// it, with b = max(1, ⌊g/16⌋). Requires f.mu held.
func (f *Fair) guaranteed(t *tenant, n, now int64) bool {
	used := t.used + n
	if used > t.g {
		return false
	}
	b := max(1, t.g/16)
	if used <= b {
		return true
	}
	// used ≤ b + ⌊g·τ/W⌋ ⟺ (used − b)·W ≤ g·τ, as used − b is a whole
	// number: two 128-bit products compared, no division.
	// τ is in [0, W) but for a clock that moved back into an earlier
	// window (roll never moves the window back): there, as at the
	// window's start, only b is paced. A negative τ would wrap to a huge
	// product and guarantee all of g at once.
	tau := max(0, now-f.win*f.window)
	ghi, glo := bits.Mul64(uint64(t.g), uint64(tau))
	uhi, ulo := bits.Mul64(uint64(used-b), uint64(f.window))
	return uhi < ghi || uhi == ghi && ulo <= glo
}

// held is what Fair holds for the tenants other than t: the sum of what
// they have still to use of their guarantees. Requires f.mu held.
func (f *Fair) held(t *tenant) int64 { return f.unmet - max(0, t.g-t.used) }

// borrow takes n events of the headroom above what is held for the other
// tenants, if the shared limiter has them. Requires f.mu held.
func (f *Fair) borrow(t *tenant, n int) bool {
	held := f.held(t)
	d, err := f.shared.AllowN(context.Background(), f.key, 0)
	if err != nil || int64(d.Remaining) < held+int64(n) {
		return false
	}
	d, err = f.shared.AllowN(context.Background(), f.key, n)
	return err == nil && d.Allowed
}

// count records n events allowed to t. Requires f.mu held.
func (f *Fair) count(t *tenant, n int64) {
	f.unmet -= min(t.used+n, t.g) - min(t.used, t.g)
	t.used += n
}

// enter rolls the window to now's and returns tenant's entry with n asks
// counted. Requires f.mu held.
func (f *Fair) enter(key string, n, now int64) *tenant {
	f.roll(now / f.window)
	t, ok := f.tenants[key]
	if !ok {
		if len(f.tenants) >= f.maxTenants {
			t = &f.overflow
		} else {
			t = &tenant{}
			f.tenants[key] = t
		}
	}
	if t.asks == 0 {
		// First ask in the window. A tenant not counted at the window's
		// start (new, or back after an idle window) is active from now
		// on, with no guarantee before the next window.
		if !t.counted {
			t.counted = true
			f.active++
		}
		f.asked++
	}
	t.asks += n
	return t
}

// roll moves to window k if it is later than the current one. The tenants
// that asked in the window just closed are the new active set: s is
// max(1, ⌊N/A⌋), and each is guaranteed g = min(s, its asks in that
// window). The entries of the others are dropped. Requires f.mu held.
func (f *Fair) roll(k int64) {
	if f.started && k <= f.win {
		return
	}
	var a int64
	if f.started && k == f.win+1 {
		a = f.asked
	}
	f.started = true
	f.win, f.asked, f.active, f.unmet = k, 0, a, 0
	f.share = max(1, f.perWindow/max(a, 1))
	for key, t := range f.tenants {
		if !f.next(t, a > 0) {
			delete(f.tenants, key)
		}
	}
	f.next(&f.overflow, a > 0)
	f.rollClasses()
}

// next starts t's counts for the window roll moves to, and reports whether
// t is active in it. Requires f.mu held.
func (f *Fair) next(t *tenant, consecutive bool) bool {
	active := consecutive && t.asks > 0
	g := int64(0)
	if active {
		g = min(f.share, t.asks)
	}
	*t = tenant{counted: active, g: g}
	f.unmet += g
	return active
}
