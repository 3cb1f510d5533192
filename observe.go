package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// Event describes one decision: a limiter's (Allow, AllowN, Reserve,
// WaitN), a Multi's, one rule's in a Rules check, or a bulkhead's
// (TryAcquire, Acquire). An Observer receives it by value.
//
// Key is the key decided on. It is there for summaries that bound their
// memory themselves (TopKeys); never make it a metric label, or a client
// that picks its own key picks your metrics' cardinality.
type Event struct {
	// Limiter names the limit: the name given with WithName (or
	// WithBulkheadName), or the rule's name in a Rules check; "" if none.
	Limiter string
	// Key is the key decided on ("" for a global limit or a bulkhead).
	Key string
	// N is how many events were asked for.
	N int
	// Allowed reports the limit's own answer. For a shadow limit it is
	// what enforcement would have answered: the caller was let through
	// whatever it says.
	Allowed bool
	// Shadow reports that the limit is not enforced (see NewShadow): a
	// shadow event with Allowed false is a would-deny.
	Shadow bool
	// Remaining is how many more events the key could have right after
	// the decision (for a bulkhead: free permits); zero if unknown.
	Remaining int
	// RetryAfter is how long until the events could be allowed (for a
	// booking: its delay); zero when allowed at once.
	RetryAfter time.Duration
	// Waited is how long a WaitN or Acquire waited, or was booked to wait,
	// before the events acted; zero for the calls that never wait.
	Waited time.Duration
	// Fallback reports that the answer came from a failure policy (a
	// backend that could not be reached), not from the limit.
	Fallback bool
	// Kind says what the event reports. The zero value, EventDecision, is
	// a decision, and every field above reads as described; other kinds
	// say in their own documentation which fields they fill. An observer
	// that only counts decisions must skip the other kinds.
	Kind EventKind
}

// EventKind says what an Event reports: a decision (the zero value) or
// something else a limiter has to tell, each kind documented where it is
// declared.
type EventKind uint8

// EventDecision is the kind of an event that reports a decision.
const EventDecision EventKind = 0

// Observer receives decision events. It is called on the hot path, after
// the decision and outside every lock of this package, from many goroutines
// at once: it must be quick, must not block and must be safe for
// concurrent use. Counter and TopKeys are observers; ObserverFunc adapts a
// function.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers returns an observer that hands each event to every one of obs
// in turn. Nil observers are skipped; with none left it returns nil.
func Observers(obs ...Observer) Observer {
	var list []Observer
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return observerList(list)
}

type observerList []Observer

func (l observerList) Observe(e Event) {
	for _, o := range l {
		o.Observe(e)
	}
}

// Bind binds every observer of the list that is a Binder.
func (l observerList) Bind(name string) Observer {
	out := make(observerList, len(l))
	for i, o := range l {
		out[i] = bind(o, name)
	}
	return out
}

// Binder is an Observer that keeps something per limiter name, as Counter
// and the metrics modules do. A limiter, bulkhead or Shadow built with one
// calls Bind once, with its name, and reports its events to the observer
// Bind returns: the look-up by name is made once, not on every event.
// Bind's observer must count an event as the Binder's Observe would.
type Binder interface {
	Observer
	Bind(name string) Observer
}

// bind returns what o reports to for the limiter named name.
func bind(o Observer, name string) Observer {
	if b, ok := o.(Binder); ok {
		return b.Bind(name)
	}
	return o
}

// WithObserver makes the limiter call o with an Event for each decision
// taken by Allow, AllowN (n > 0; peeks are not reported), Reserve and
// WaitN (once, when it returns; not for a context already done). Given
// more than once, every observer is called, in order. With no
// observer (the default) a decision costs what it did without this option;
// with one, Allow takes the full decision (the one AllowN takes) so that
// the event has its Remaining and RetryAfter, and allocates nothing more
// than o does. A limiter that is a part of a Multi, an AllowAll or a
// Rules check reports its own part of each such decision once it is taken:
// its pair's Decision, Allowed saying whether this limit allowed (the
// request as a whole may have been denied by another).
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = Observers(c.observer, o) }
}

// withoutObserver drops the observers given so far.
func withoutObserver(c *config) { c.observer = nil }

// WithName names the limiter in its events (Event.Limiter), such as "api"
// or "login per ip". Metrics exporters use it as a label: give each
// limiter a name of its own, from a fixed set.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// observed is what a keyed limiter needs to report its decisions: one
// pointer, nil when nothing observes, so that the hot path pays one load
// and one comparison.
type observed struct {
	obs  Observer
	name string
}

func newObserved(c *config) *observed {
	if c.observer == nil {
		return nil
	}
	return &observed{obs: bind(c.observer, c.name), name: c.name}
}

// report hands the event of one decision to the observer; o is not nil.
func (o *observed) report(key string, n int, d Decision, waited time.Duration) {
	o.obs.Observe(Event{
		Limiter:    o.name,
		Key:        key,
		N:          n,
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		Waited:     waited,
	})
}

// ReportDeferred reports a decision that a caller made on the limiter
// and reports once itself (see internal/deferred).
func (o *observed) ReportDeferred(key string, n int, d Decision) { o.report(key, n, d, 0) }

// Counter is a ready observer that counts decisions per limiter name:
// allowed, denied, and shadow would-denies. It holds one small record per
// distinct name, so names must come from a fixed set (they do when they
// come from WithName, rule names and bulkhead names; never from keys).
//
// The zero value is ready to use. It is safe for concurrent use; Observe
// takes no lock and allocates nothing once a name has been seen.
type Counter struct {
	names sync.Map // string -> *counts
}

type counts struct {
	allowed, denied, wouldDeny atomic.Int64
}

// Counts are a Counter's totals for one limiter name.
type Counts struct {
	// Allowed counts decisions that allowed (shadow ones included).
	Allowed int64
	// Denied counts decisions that denied, shadow ones excluded.
	Denied int64
	// WouldDeny counts shadow decisions that enforcement would have denied
	// (the caller was let through).
	WouldDeny int64
}

// Observe counts e.
func (c *Counter) Observe(e Event) { c.of(e.Limiter).Observe(e) }

// Bind returns the counts of name, to which a limiter built with c reports
// directly (see Binder).
func (c *Counter) Bind(name string) Observer { return c.of(name) }

func (c *Counter) of(name string) *counts {
	v, ok := c.names.Load(name)
	if !ok {
		v, _ = c.names.LoadOrStore(name, new(counts))
	}
	return v.(*counts)
}

// Observe counts e, whatever its name; events of another kind than a
// decision are not counted.
func (n *counts) Observe(e Event) {
	if e.Kind != EventDecision {
		return
	}
	switch {
	case e.Allowed:
		n.allowed.Add(1)
	case e.Shadow:
		n.wouldDeny.Add(1)
	default:
		n.denied.Add(1)
	}
}

// Get returns the totals for one limiter name; zero if it was never seen.
func (c *Counter) Get(name string) Counts {
	v, ok := c.names.Load(name)
	if !ok {
		return Counts{}
	}
	n := v.(*counts)
	return Counts{Allowed: n.allowed.Load(), Denied: n.denied.Load(), WouldDeny: n.wouldDeny.Load()}
}

// Snapshot returns the totals of every limiter name seen. Each name's
// totals are read one counter at a time, so a snapshot taken under load
// may mix instants by a few decisions.
func (c *Counter) Snapshot() map[string]Counts {
	out := make(map[string]Counts)
	c.names.Range(func(k, _ any) bool {
		name := k.(string)
		out[name] = c.Get(name)
		return true
	})
	return out
}
