// Package otel exports the decisions of the ratelimit package's limiters
// and bulkheads as OpenTelemetry metrics.
//
// A Metrics is a ratelimit.Observer built on a metric.Meter: give it to the
// limiters (ratelimit.WithObserver, each with a ratelimit.WithName) and
// read the meter's instruments as usual:
//
//	m, err := otel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
//	api, err := ratelimit.NewTokenBucket(rate, 100,
//		ratelimit.WithName("api"), ratelimit.WithObserver(m))
//	err = m.WatchStats("api", api)
//
// The instruments, named after OpenTelemetry's conventions (dot-separated
// namespaces, units in UCUM, attributes rather than name suffixes):
//
//	ratelimit.decisions             counter {decision}; attributes
//	                                ratelimit.limiter, ratelimit.outcome
//	                                (allowed, denied, would_deny)
//	ratelimit.fallback.decisions    counter {decision}; ratelimit.limiter
//	ratelimit.wait.duration         histogram, s, of waits that waited
//	ratelimit.keys                  updowncounter {key}, from Stats
//	ratelimit.key.inserts           counter {key}, from Stats
//	ratelimit.key.evictions         counter {key}; ratelimit.eviction.kind
//	                                (at_rest, lru)
//	ratelimit.bulkhead.in_flight    updowncounter {call}; ratelimit.bulkhead
//	ratelimit.bulkhead.waiting      updowncounter {call}
//	ratelimit.bulkhead.limit        gauge {call}
//	ratelimit.bulkhead.rejections   counter {call}
//	ratelimit.redis.errors          counter {error}; ratelimit.limiter
//	ratelimit.lease.outstanding     up-down counter {unit}, and counters of
//	                                the units leased (see lease.go)
//
// No attribute ever carries a key; names past a fixed number (WithMaxNames)
// count under "_other".
package otel

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// OtherName is the ratelimit.limiter attribute of the events of names past
// the cap set by WithMaxNames.
const OtherName = "_other"

// Attribute keys.
const (
	LimiterKey  = attribute.Key("ratelimit.limiter")
	OutcomeKey  = attribute.Key("ratelimit.outcome")
	EvictionKey = attribute.Key("ratelimit.eviction.kind")
	BulkheadKey = attribute.Key("ratelimit.bulkhead")
)

// Metrics turns decision events into OpenTelemetry measurements. Build it
// with New. It is safe for concurrent use; Observe takes no lock and
// allocates nothing once a name has been seen (the counters are kept as
// atomics and reported by one callback at each collection; only waits are
// recorded as they happen).
type Metrics struct {
	maxNames int
	names    atomic.Int64
	series   sync.Map // string -> *series

	wait  metric.Float64Histogram
	batch metric.Int64Histogram // the Redis backend's batches (batch.go)
	reg   metric.Registration

	mu        sync.Mutex
	stats     []watched[interface{ Stats() ratelimit.Stats }]
	bulkheads []watched[Concurrency]

	decisions, fallbacks, redisErrors, inserts, evictions, rejections metric.Int64ObservableCounter
	// Counts that go up and down are UpDownCounters (as the semantic
	// conventions' http.server.active_requests); the limit is a gauge.
	keys, inFlight, waiting metric.Int64ObservableUpDownCounter
	limit                   metric.Int64ObservableGauge
	ops                     operatorActions  // see operator.go
	lease                   leaseInstruments // see lease.go
	penalty                 penaltyCounters  // see penalty.go

	fair          fairClasses // fair.go
	fairGroup     fairClasses // fair.go: by tenant group
	bulkheadClass fairClasses // bulkhead_class.go
}

type series struct {
	name                             string
	allowed, denied, wouldDeny, fall atomic.Int64
	redisErrors                      atomic.Int64
	waitOpt                          []metric.RecordOption
	lim                              attribute.Set
	outcomes                         [3]attribute.Set
}

type watched[T any] struct {
	name string
	src  T
}

// Concurrency is what WatchBulkhead reads of a bulkhead.
type Concurrency interface {
	InFlight() int
	Waiting() int
	Limit() int
}

// Option configures New.
type Option func(*config)

type config struct {
	maxNames int
	buckets  []float64
}

// DefaultWaitBuckets are the wait histogram's bucket boundaries, in seconds.
var DefaultWaitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}

// WithMaxNames bounds how many distinct limiter names get series of their
// own (default 256); events of names past it count under OtherName.
func WithMaxNames(n int) Option { return func(c *config) { c.maxNames = max(n, 1) } }

// WithWaitBuckets sets the wait histogram's bucket boundaries, in seconds.
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// New creates the instruments on meter and returns the Metrics.
func New(meter metric.Meter, opts ...Option) (*Metrics, error) {
	c := config{maxNames: 256, buckets: DefaultWaitBuckets}
	for _, o := range opts {
		o(&c)
	}
	m := &Metrics{maxNames: c.maxNames}
	var err error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var ins metric.Int64ObservableCounter
		ins, err = meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return ins
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var ins metric.Int64ObservableGauge
		ins, err = meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return ins
	}
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		if err != nil {
			return nil
		}
		var ins metric.Int64ObservableUpDownCounter
		ins, err = meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return ins
	}
	m.decisions = counter("ratelimit.decisions", "{decision}", "Decisions taken, by limiter and outcome (allowed, denied, or would_deny for a shadow limit).")
	m.fallbacks = counter("ratelimit.fallback.decisions", "{decision}", "Decisions answered by a failure policy, not by the limit.")
	m.redisErrors = counter("ratelimit.redis.errors", "{error}", "Calls to Redis that failed, each answered by the failure policy.")
	m.inserts = counter("ratelimit.key.inserts", "{key}", "Keys added to the limiter's store.")
	m.evictions = counter("ratelimit.key.evictions", "{key}", "Keys dropped from the limiter's store, by kind: at_rest (lossless) or lru (at the cap).")
	m.rejections = counter("ratelimit.bulkhead.rejections", "{call}", "Calls the bulkhead refused a permit.")
	m.keys = upDown("ratelimit.keys", "{key}", "Keys held by the limiter's store.")
	m.inFlight = upDown("ratelimit.bulkhead.in_flight", "{call}", "Calls holding a permit of the bulkhead.")
	m.waiting = upDown("ratelimit.bulkhead.waiting", "{call}", "Calls waiting for a permit of the bulkhead.")
	m.limit = gauge("ratelimit.bulkhead.limit", "{call}", "The bulkhead's limit on calls in flight.")
	if err != nil {
		return nil, err
	}
	if err = m.fair.init(meter, fairClassCounter); err != nil {
		return nil, err
	}
	if err = m.bulkheadClass.init(meter, bulkheadClassCounter); err != nil {
		return nil, err
	}
	if err = m.fairGroup.init(meter, fairGroupCounter); err != nil {
		return nil, err
	}
	m.wait, err = meter.Float64Histogram("ratelimit.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long calls that waited for a limiter or bulkhead waited, or were booked to wait."),
		metric.WithExplicitBucketBoundaries(c.buckets...))
	if err != nil {
		return nil, err
	}
	if m.lease, err = newLeaseInstruments(meter); err != nil {
		return nil, err
	}
	if m.batch, err = newBatchHistogram(meter); err != nil {
		return nil, err
	}
	if m.ops, err = newOperatorActions(meter); err != nil {
		return nil, err
	}
	if m.penalty, err = newPenaltyCounters(meter); err != nil {
		return nil, err
	}
	m.reg, err = meter.RegisterCallback(m.collect, m.decisions, m.fallbacks, m.redisErrors, m.inserts,
		m.evictions, m.rejections, m.keys, m.inFlight, m.waiting, m.limit)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Close unregisters the collection callback.
func (m *Metrics) Close() error { return m.reg.Unregister() }

var outcomes = [3]string{"allowed", "denied", "would_deny"}

func (m *Metrics) get(name string) *series {
	if v, ok := m.series.Load(name); ok {
		return v.(*series)
	}
	if m.names.Add(1) > int64(m.maxNames) {
		m.names.Add(-1)
		name = OtherName
		if v, ok := m.series.Load(name); ok {
			return v.(*series)
		}
	}
	s := &series{name: name, lim: attribute.NewSet(LimiterKey.String(name))}
	s.waitOpt = []metric.RecordOption{metric.WithAttributeSet(s.lim)}
	for i, o := range outcomes {
		s.outcomes[i] = attribute.NewSet(LimiterKey.String(name), OutcomeKey.String(o))
	}
	v, loaded := m.series.LoadOrStore(name, s)
	if loaded && name != OtherName {
		m.names.Add(-1)
	}
	return v.(*series)
}

// Observe counts one decision event. It implements ratelimit.Observer.
func (m *Metrics) Observe(e ratelimit.Event) { boundSeries{m, m.get(e.Limiter)}.Observe(e) }

// Bind returns the observer of name's series, to which a limiter built
// with m reports directly (see ratelimit.Binder).
func (m *Metrics) Bind(name string) ratelimit.Observer { return boundSeries{m, m.get(name)} }

// boundSeries counts the events of one name.
type boundSeries struct {
	m *Metrics
	s *series
}

// Observe counts e under the series' name, whatever e's.
func (b boundSeries) Observe(e ratelimit.Event) {
	if e.Kind == ratelimit.EventFairClass {
		b.m.fair.observe(b.s.name, e)
	}
	if e.Kind == ratelimit.EventFairGroup {
		b.m.fairGroup.observe(b.s.name, e)
	}
	if e.Kind == ratelimit.EventBulkheadClass {
		b.m.bulkheadClass.observe(b.s.name, e)
	}
	if e.Kind == ratelimit.EventBatch {
		b.batch(e.N)
		return
	}
	if e.Kind != ratelimit.EventDecision {
		b.m.lease.observe(b.s, e)
		b.m.ops.observe(b.s.name, e)
		b.m.penalty.observe(b.s.name, e)
		return
	}
	s := b.s
	switch {
	case e.Allowed:
		s.allowed.Add(1)
	case e.Shadow:
		s.wouldDeny.Add(1)
	default:
		s.denied.Add(1)
	}
	if e.Fallback {
		s.fall.Add(1)
	}
	if e.Waited > 0 {
		b.m.wait.Record(context.Background(), e.Waited.Seconds(), s.waitOpt...)
	}
}

// WatchStats reports the Stats of the limiter named name at each
// collection. A name already watched returns an error.
func (m *Metrics) WatchStats(name string, l interface{ Stats() ratelimit.Stats }) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.stats {
		if w.name == name {
			return fmt.Errorf("ratelimit: the stats of %q are already watched", name)
		}
	}
	m.stats = append(m.stats, watched[interface{ Stats() ratelimit.Stats }]{name, l})
	return nil
}

// WatchBulkhead reports the bulkhead named name at each collection, and
// its refusals from its events (see ratelimit.WithBulkheadObserver). A
// name already watched returns an error.
func (m *Metrics) WatchBulkhead(name string, b Concurrency) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.bulkheads {
		if w.name == name {
			return fmt.Errorf("ratelimit: the bulkhead %q is already watched", name)
		}
	}
	m.bulkheads = append(m.bulkheads, watched[Concurrency]{name, b})
	m.get(name)
	return nil
}

// OnRedisError returns a function for the Redis backend's WithOnError
// option: it counts each failed call under name, as an error and as a
// decision the failure policy answered. It never looks at the key.
func (m *Metrics) OnRedisError(name string) func(key string, err error) {
	s := m.get(name)
	return func(string, error) {
		s.redisErrors.Add(1)
		s.fall.Add(1)
	}
}

func (m *Metrics) collect(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	stats := append(m.stats[:0:0], m.stats...)
	bulkheads := append(m.bulkheads[:0:0], m.bulkheads...)
	m.mu.Unlock()
	isBulkhead := make(map[string]bool, len(bulkheads))
	for _, b := range bulkheads {
		isBulkhead[b.name] = true
	}
	m.series.Range(func(_, v any) bool {
		s := v.(*series)
		o.ObserveInt64(m.decisions, s.allowed.Load(), metric.WithAttributeSet(s.outcomes[0]))
		o.ObserveInt64(m.decisions, s.denied.Load(), metric.WithAttributeSet(s.outcomes[1]))
		o.ObserveInt64(m.decisions, s.wouldDeny.Load(), metric.WithAttributeSet(s.outcomes[2]))
		o.ObserveInt64(m.fallbacks, s.fall.Load(), metric.WithAttributeSet(s.lim))
		o.ObserveInt64(m.redisErrors, s.redisErrors.Load(), metric.WithAttributeSet(s.lim))
		if isBulkhead[s.name] {
			o.ObserveInt64(m.rejections, s.denied.Load(), metric.WithAttributes(BulkheadKey.String(s.name)))
		}
		return true
	})
	for _, w := range stats {
		st := w.src.Stats()
		lim := LimiterKey.String(w.name)
		o.ObserveInt64(m.keys, int64(st.Keys), metric.WithAttributes(lim))
		o.ObserveInt64(m.inserts, int64(st.Inserts), metric.WithAttributes(lim))
		o.ObserveInt64(m.evictions, int64(st.EvictedAtRest), metric.WithAttributes(lim, EvictionKey.String("at_rest")))
		o.ObserveInt64(m.evictions, int64(st.EvictedLRU), metric.WithAttributes(lim, EvictionKey.String("lru")))
	}
	for _, b := range bulkheads {
		bh := metric.WithAttributes(BulkheadKey.String(b.name))
		o.ObserveInt64(m.inFlight, int64(b.src.InFlight()), bh)
		o.ObserveInt64(m.waiting, int64(b.src.Waiting()), bh)
		o.ObserveInt64(m.limit, int64(b.src.Limit()), bh)
	}
	return nil
}

var _ ratelimit.Binder = (*Metrics)(nil)
