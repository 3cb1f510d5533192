// Package prometheus exports the decisions of the ratelimit package's
// limiters and bulkheads as Prometheus metrics.
//
// A Metrics is both a ratelimit.Observer and a prometheus.Collector: give
// it to the limiters (ratelimit.WithObserver, each with a
// ratelimit.WithName), register it, and scrape:
//
//	m := prometheus.New()
//	reg.MustRegister(m)
//	api, err := ratelimit.NewTokenBucket(rate, 100,
//		ratelimit.WithName("api"), ratelimit.WithObserver(m))
//	err = m.WatchStats("api", api)
//
// The metrics, all under the "ratelimit_" prefix:
//
//	ratelimit_decisions_total{limiter, outcome}   counter; outcome is
//	                                               allowed, denied or would_deny
//	ratelimit_fallback_decisions_total{limiter}   counter, once there is one
//	ratelimit_wait_seconds{limiter}               histogram of waits that waited
//	ratelimit_keys{limiter}                       gauge, from Stats
//	ratelimit_key_inserts_total{limiter}          counter, from Stats
//	ratelimit_key_evictions_total{limiter, kind}  counter, kind at_rest or lru
//	ratelimit_bulkhead_in_flight{bulkhead}        gauge
//	ratelimit_bulkhead_waiting{bulkhead}          gauge
//	ratelimit_bulkhead_limit{bulkhead}            gauge
//	ratelimit_bulkhead_rejected_total{bulkhead}   counter
//	ratelimit_redis_errors_total{limiter}         counter, per OnRedisError name
//	ratelimit_lease_outstanding_units{limiter}    gauge, and counters of the
//	                                              units leased (see lease.go)
//
// No label ever carries a key: the label values are the names given to
// limiters, rules and bulkheads, and Metrics holds at most a fixed number
// of them (WithMaxNames); events of further names are counted under the
// name "_other", so a misconfiguration that names limiters after keys
// cannot grow the metrics without bound.
package prometheus

import (
	"fmt"
	"sync"
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimitkit/ratelimit"
)

// OtherName is the limiter label of the events of names past the cap set by
// WithMaxNames.
const OtherName = "_other"

// Metrics collects decision events and the state of watched limiters and
// bulkheads. Build it with New. It is safe for concurrent use; Observe takes
// no lock and allocates nothing once a name has been seen.
type Metrics struct {
	maxNames int
	names    atomic.Int64
	series   sync.Map // string -> *series

	wait  *prom.HistogramVec
	batch batchSizes // the Redis backend's batches (batch.go)

	mu        sync.Mutex // guards stats, bulkheads and series.redis
	stats     []watchedStats
	bulkheads []watchedBulkhead

	fair          fairClasses // fair.go
	fairGroup     fairClasses // fair.go: by tenant group
	bulkheadClass fairClasses // bulkhead_class.go

	decisions, fallbacks, redisErrors   *prom.Desc
	keys, inserts, evictions            *prom.Desc
	inFlight, waiting, bhLimit, rejects *prom.Desc
	ops                                 operatorActions // see operator.go
	penalty                             penaltyCounters // see penalty.go
}

type series struct {
	name                             string
	allowed, denied, wouldDeny, fall atomic.Uint64
	redisErrors                      atomic.Uint64
	redis                            bool // OnRedisError was called for it
	wait                             atomic.Pointer[waitSeries]
	lease                            atomic.Pointer[leaseSeries] // see lease.go
}

// waitSeries is a name's wait histogram, made at its first wait so that
// names that never wait have no series.
type waitSeries struct{ prom.Observer }

type watchedStats struct {
	name string
	src  interface{ Stats() ratelimit.Stats }
}

type watchedBulkhead struct {
	name string
	src  Concurrency
}

// Concurrency is what WatchBulkhead reads of a bulkhead: ratelimit's
// Bulkhead and AdaptiveBulkhead have it.
type Concurrency interface {
	InFlight() int
	Waiting() int
	Limit() int
}

// Option configures New.
type Option func(*config)

type config struct {
	maxNames int       // default: 256
	buckets  []float64 // default: DefaultWaitBuckets
}

// DefaultWaitBuckets are the wait-time histogram's buckets, in seconds:
// from a millisecond to a minute.
var DefaultWaitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}

// WithMaxNames bounds how many distinct limiter names get series of their
// own (default 256); events of names past it count under OtherName. n < 1
// is taken as 1.
func WithMaxNames(n int) Option { return func(c *config) { c.maxNames = max(n, 1) } }

// WithWaitBuckets sets the wait-time histogram's buckets, in seconds.
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// New returns a Metrics to register with a prometheus.Registerer.
func New(opts ...Option) *Metrics {
	c := config{maxNames: 256, buckets: DefaultWaitBuckets}
	for _, o := range opts {
		o(&c)
	}
	lim := []string{"limiter"}
	bh := []string{"bulkhead"}
	return &Metrics{
		maxNames: c.maxNames,
		wait: prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "ratelimit_wait_seconds",
			Help:    "How long calls that waited for a limiter or bulkhead waited, or were booked to wait.",
			Buckets: c.buckets,
		}, lim),
		decisions:   prom.NewDesc("ratelimit_decisions_total", "Decisions taken, by limiter and outcome (allowed, denied, or would_deny for a shadow limit).", []string{"limiter", "outcome"}, nil),
		fallbacks:   prom.NewDesc("ratelimit_fallback_decisions_total", "Decisions answered by a failure policy, not by the limit.", lim, nil),
		redisErrors: prom.NewDesc("ratelimit_redis_errors_total", "Calls to Redis that failed, each answered by the failure policy.", lim, nil),
		keys:        prom.NewDesc("ratelimit_keys", "Keys held by the limiter's store.", lim, nil),
		inserts:     prom.NewDesc("ratelimit_key_inserts_total", "Keys added to the limiter's store.", lim, nil),
		evictions:   prom.NewDesc("ratelimit_key_evictions_total", "Keys dropped from the limiter's store, by kind: at_rest (lossless) or lru (at the cap).", []string{"limiter", "kind"}, nil),
		inFlight:    prom.NewDesc("ratelimit_bulkhead_in_flight", "Calls holding a permit of the bulkhead.", bh, nil),
		waiting:     prom.NewDesc("ratelimit_bulkhead_waiting", "Calls waiting for a permit of the bulkhead.", bh, nil),
		bhLimit:     prom.NewDesc("ratelimit_bulkhead_limit", "The bulkhead's limit on calls in flight.", bh, nil),
		rejects:     prom.NewDesc("ratelimit_bulkhead_rejected_total", "Calls the bulkhead refused a permit.", bh, nil),

		bulkheadClass: fairClasses{desc: bulkheadClassDesc},
		fairGroup:     fairClasses{desc: fairGroupDesc},
	}
}

// get returns the series of name, creating it unless the cap is reached.
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
	s := &series{name: name}
	v, loaded := m.series.LoadOrStore(name, s)
	if loaded && name != OtherName {
		m.names.Add(-1) // another goroutine made it first
	}
	return v.(*series)
}

// Observe counts one decision event. It implements ratelimit.Observer.
func (m *Metrics) Observe(e ratelimit.Event) { m.bound(m.get(e.Limiter)).Observe(e) }

// Bind returns the observer of name's series, to which a limiter built
// with m reports directly (see ratelimit.Binder).
func (m *Metrics) Bind(name string) ratelimit.Observer { return m.bound(m.get(name)) }

func (m *Metrics) bound(s *series) boundSeries { return boundSeries{m, s} }

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
		b.m.batch.observe(b.s.name, e.N)
		return
	}
	if e.Kind != ratelimit.EventDecision {
		observeLease(b.s, e)
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
		w := s.wait.Load()
		if w == nil {
			s.wait.CompareAndSwap(nil, &waitSeries{b.m.wait.WithLabelValues(s.name)})
			w = s.wait.Load()
		}
		w.Observe(e.Waited.Seconds())
	}
}

// WatchStats exports the Stats of the limiter named name at each scrape:
// keys held, inserts and evictions by kind. A name already watched returns
// an error, as its series would clash.
func (m *Metrics) WatchStats(name string, l interface{ Stats() ratelimit.Stats }) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.stats {
		if w.name == name {
			return fmt.Errorf("ratelimit: the stats of %q are already watched", name)
		}
	}
	m.stats = append(m.stats, watchedStats{name: name, src: l})
	return nil
}

// WatchBulkhead exports the bulkhead named name at each scrape: calls in
// flight, waiting, its limit, and (from its events, see
// ratelimit.WithBulkheadObserver and WithBulkheadName) the calls refused.
// A name already watched returns an error, as its series would clash.
func (m *Metrics) WatchBulkhead(name string, b Concurrency) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.bulkheads {
		if w.name == name {
			return fmt.Errorf("ratelimit: the bulkhead %q is already watched", name)
		}
	}
	m.bulkheads = append(m.bulkheads, watchedBulkhead{name: name, src: b})
	m.get(name)
	return nil
}

// OnRedisError returns a function for the Redis backend's WithOnError
// option: it counts each failed call under name, as an error and as a
// decision the failure policy answered. It never looks at the key.
func (m *Metrics) OnRedisError(name string) func(key string, err error) {
	m.mu.Lock()
	s := m.get(name)
	s.redis = true
	m.mu.Unlock()
	return func(string, error) {
		s.redisErrors.Add(1)
		s.fall.Add(1)
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{m.decisions, m.fallbacks, m.redisErrors, m.keys, m.inserts,
		m.evictions, m.inFlight, m.waiting, m.bhLimit, m.rejects} {
		ch <- d
	}
	m.wait.Describe(ch)
	describeLease(ch)
	ch <- fairClassDesc
	ch <- fairGroupDesc
	ch <- bulkheadClassDesc
	m.batch.describe(ch)
	m.ops.describe(ch)
	m.penalty.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	m.batch.collect(ch)
	counter := func(d *prom.Desc, v uint64, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prom.Desc, v int, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.GaugeValue, float64(v), labels...)
	}
	m.fair.collect(ch)
	m.fairGroup.collect(ch)
	m.bulkheadClass.collect(ch)
	m.mu.Lock()
	defer m.mu.Unlock() // for the watched lists and series.redis
	stats, bulkheads := m.stats, m.bulkheads
	isBulkhead := make(map[string]bool, len(bulkheads))
	for _, b := range bulkheads {
		isBulkhead[b.name] = true
	}
	m.series.Range(func(_, v any) bool {
		s := v.(*series)
		if isBulkhead[s.name] {
			counter(m.rejects, s.denied.Load(), s.name)
		}
		counter(m.decisions, s.allowed.Load(), s.name, "allowed")
		counter(m.decisions, s.denied.Load(), s.name, "denied")
		counter(m.decisions, s.wouldDeny.Load(), s.name, "would_deny")
		if f := s.fall.Load(); f > 0 || s.redis {
			counter(m.fallbacks, f, s.name)
		}
		if s.redis {
			counter(m.redisErrors, s.redisErrors.Load(), s.name)
		}
		collectLease(ch, s)
		return true
	})
	m.wait.Collect(ch)
	m.ops.collect(ch)
	m.penalty.collect(ch)
	for _, w := range stats {
		st := w.src.Stats()
		gauge(m.keys, st.Keys, w.name)
		counter(m.inserts, st.Inserts, w.name)
		counter(m.evictions, st.EvictedAtRest, w.name, "at_rest")
		counter(m.evictions, st.EvictedLRU, w.name, "lru")
	}
	for _, b := range bulkheads {
		gauge(m.inFlight, b.src.InFlight(), b.name)
		gauge(m.waiting, b.src.Waiting(), b.name)
		gauge(m.bhLimit, b.src.Limit(), b.name)
	}
}

var (
	_ ratelimit.Binder = (*Metrics)(nil)
	_ prom.Collector   = (*Metrics)(nil)
)
