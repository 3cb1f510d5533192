package prometheus

import (
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimitkit/ratelimit"
)

// The lease metrics, of a backend that hands a key's allowance out in
// leases (the redis module's WithLease, named after its key prefix):
//
//	ratelimit_lease_outstanding_units{limiter}   gauge: units held in leases
//	                                              not yet ended
//	ratelimit_lease_taken_units_total{limiter}    counter
//	ratelimit_lease_returned_units_total{limiter} counter: unspent, settled back
//	ratelimit_lease_lapsed_units_total{limiter}   counter: neither spent nor
//	                                              given back
//
// A name gets them from its first lease event on.
var (
	leaseOutstanding = prom.NewDesc("ratelimit_lease_outstanding_units", "Units held in leases not yet ended: taken, not yet reported spent, returned or lapsed.", []string{"limiter"}, nil)
	leaseTaken       = prom.NewDesc("ratelimit_lease_taken_units_total", "Units taken into leases.", []string{"limiter"}, nil)
	leaseReturned    = prom.NewDesc("ratelimit_lease_returned_units_total", "Unspent units of ended leases, settled back to the shared store.", []string{"limiter"}, nil)
	leaseLapsed      = prom.NewDesc("ratelimit_lease_lapsed_units_total", "Units of ended leases neither spent nor given back.", []string{"limiter"}, nil)
)

// leaseSeries counts one name's lease events.
type leaseSeries struct {
	taken, spent, returned, lapsed atomic.Int64
}

// observeLease counts a lease event (kinds 30–39) of s's name; it reports
// whether e was one.
func observeLease(s *series, e ratelimit.Event) bool {
	if e.Kind < ratelimit.EventLeaseTaken || e.Kind > ratelimit.EventLeaseTaken+9 {
		return false
	}
	l := s.lease.Load()
	if l == nil {
		s.lease.CompareAndSwap(nil, new(leaseSeries))
		l = s.lease.Load()
	}
	n := int64(e.N)
	switch e.Kind {
	case ratelimit.EventLeaseTaken:
		l.taken.Add(n)
	case ratelimit.EventLeaseSpent:
		l.spent.Add(n)
	case ratelimit.EventLeaseReturned:
		l.returned.Add(n)
	case ratelimit.EventLeaseLapsed:
		l.lapsed.Add(n)
	}
	return true
}

func describeLease(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{leaseOutstanding, leaseTaken, leaseReturned, leaseLapsed} {
		ch <- d
	}
}

// collectLease reports s's lease metrics, if it has had a lease event.
func collectLease(ch chan<- prom.Metric, s *series) {
	l := s.lease.Load()
	if l == nil {
		return
	}
	taken, spent, returned, lapsed := l.taken.Load(), l.spent.Load(), l.returned.Load(), l.lapsed.Load()
	ch <- prom.MustNewConstMetric(leaseOutstanding, prom.GaugeValue, float64(taken-spent-returned-lapsed), s.name)
	ch <- prom.MustNewConstMetric(leaseTaken, prom.CounterValue, float64(taken), s.name)
	ch <- prom.MustNewConstMetric(leaseReturned, prom.CounterValue, float64(returned), s.name)
	ch <- prom.MustNewConstMetric(leaseLapsed, prom.CounterValue, float64(lapsed), s.name)
}
