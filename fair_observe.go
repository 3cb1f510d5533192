package ratelimit

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
