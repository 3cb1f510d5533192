package ratelimit

import (
	"errors"
	"slices"
	"strconv"
)

// EventFairClass is the kind of the event a Fair with classes
// (WithClasses) reports to its observer (WithFairObserver) for each
// decision of Allow, AllowN and AllowPriority, and for the first try of
// WaitN (queued grants are not reported). Limiter is the Fair's name
// (WithFairName); Key is the class's name, one of the few given to
// WithClasses, so it is safe as a metric label (the tenant is never
// reported: TopKeys on the shared limiter shows the heaviest); N, Allowed,
// Remaining and RetryAfter are as in a decision. Kinds 50 to 59 are kept
// for Fair.
const EventFairClass EventKind = 50

// WithFairObserver gives a Fair an observer of its classes' decisions
// (EventFairClass). It is called after each decision, outside Fair's lock.
func WithFairObserver(o Observer) FairOption {
	return func(c *fairConfig) { c.observer = Observers(c.observer, o) }
}

// WithFairName names a Fair in its events (Event.Limiter).
func WithFairName(name string) FairOption { return func(c *fairConfig) { c.name = name } }

// observeClass reports a decision of class p.
func (f *Fair) observeClass(p Priority, n int, d Decision) {
	f.observer.Observe(Event{
		Kind:       EventFairClass,
		Limiter:    f.name,
		Key:        f.classes[p].Name,
		N:          n,
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
	})
}

// EventFairGroup is the kind of the event a Fair with tenant groups
// (WithTenantGroups) reports to its observer for each decision of Allow,
// AllowN and AllowPriority (as EventFairClass, queued grants of WaitN are
// not reported). Limiter is the Fair's name; Key is the name of the
// tenant's group, one of the names given to WithTenantGroups or
// OtherGroup, never the tenant; N, Allowed, Remaining and RetryAfter are
// as in a decision (Allow reports Allowed and N only).
const EventFairGroup EventKind = 51

// OtherGroup is the group of a tenant whose group function returns an
// index outside the names given to WithTenantGroups.
const OtherGroup = "other"

// maxTenantGroups bounds the names of WithTenantGroups: each is a metric
// label value.
const maxTenantGroups = 64

// WithTenantGroups reports each decision of a Fair to its observer
// (WithFairObserver) under the tenant's group as well as under its class:
// group(tenant) is an index into names, and the event (EventFairGroup)
// carries that name, so metrics can be kept per group (free and paid
// plans, say) without a tenant ever becoming a label. An index outside
// names is reported as OtherGroup. group is called outside Fair's lock,
// once per decision, and must be safe for concurrent use. names must hold
// 1 to 64 distinct, non-empty names and group must not be nil, or NewFair
// fails with an error matching ErrInvalidOption. Without an observer the
// groups are checked but never asked.
func WithTenantGroups(names []string, group func(tenant string) int) FairOption {
	return func(c *fairConfig) {
		c.groupNames, c.groupOf, c.groupsSet = slices.Clone(names), group, true
	}
}

// validGroups checks the options of WithTenantGroups.
func validGroups(names []string, group func(string) int, set bool) error {
	if !set {
		return nil
	}
	bad := func(why string) error {
		return errors.Join(ErrInvalidOption, errors.New("ratelimit: WithTenantGroups: "+why))
	}
	switch {
	case group == nil:
		return bad("nil group function")
	case len(names) == 0:
		return bad("no group names")
	case len(names) > maxTenantGroups:
		return bad(strconv.Itoa(len(names)) + " names, more than " + strconv.Itoa(maxTenantGroups))
	}
	for i, n := range names {
		if n == "" {
			return bad("an empty group name")
		}
		if slices.Contains(names[:i], n) {
			return bad("group " + strconv.Quote(n) + " named twice")
		}
	}
	return nil
}

// observeGroup reports a decision of n events for tenant under its group.
// Requires f.groupOf, and f.mu not held (groupOf is the caller's code).
func (f *Fair) observeGroup(tenant string, n int, d Decision) {
	name := OtherGroup
	if i := f.groupOf(tenant); i >= 0 && i < len(f.groupNames) {
		name = f.groupNames[i]
	}
	f.observer.Observe(Event{
		Kind:       EventFairGroup,
		Limiter:    f.name,
		Key:        name,
		N:          n,
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
	})
}
