package otel

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
	"go.opentelemetry.io/otel/metric"
)

// The lease instruments, of a backend that hands a key's allowance out in
// leases (the redis module's WithLease, named after its key prefix), with
// the attribute ratelimit.limiter:
//
//	ratelimit.lease.outstanding  up-down counter {unit}: units held in
//	                             leases not yet ended
//	ratelimit.lease.taken        counter {unit}
//	ratelimit.lease.returned     counter {unit}: unspent, settled back
//	ratelimit.lease.lapsed       counter {unit}: neither spent nor given back
//
// They are recorded as the lease events happen (once per lease, not per
// decision).
type leaseInstruments struct {
	outstanding             metric.Int64UpDownCounter
	taken, returned, lapsed metric.Int64Counter
}

func newLeaseInstruments(meter metric.Meter) (leaseInstruments, error) {
	var l leaseInstruments
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = meter.Int64Counter(name, metric.WithUnit("{unit}"), metric.WithDescription(desc))
		return c
	}
	l.taken = counter("ratelimit.lease.taken", "Units taken into leases.")
	l.returned = counter("ratelimit.lease.returned", "Unspent units of ended leases, settled back to the shared store.")
	l.lapsed = counter("ratelimit.lease.lapsed", "Units of ended leases neither spent nor given back.")
	if err != nil {
		return l, err
	}
	l.outstanding, err = meter.Int64UpDownCounter("ratelimit.lease.outstanding", metric.WithUnit("{unit}"),
		metric.WithDescription("Units held in leases not yet ended: taken, not yet reported spent, returned or lapsed."))
	return l, err
}

// observeLease records a lease event (kinds 30–39) under s's name.
func (l *leaseInstruments) observe(s *series, e ratelimit.Event) {
	if e.Kind < ratelimit.EventLeaseTaken || e.Kind > ratelimit.EventLeaseTaken+9 || l.outstanding == nil {
		return
	}
	ctx, n, attrs := context.Background(), int64(e.N), metric.WithAttributeSet(s.lim)
	switch e.Kind {
	case ratelimit.EventLeaseTaken:
		l.taken.Add(ctx, n, attrs)
		l.outstanding.Add(ctx, n, attrs)
	case ratelimit.EventLeaseSpent:
		l.outstanding.Add(ctx, -n, attrs)
	case ratelimit.EventLeaseReturned:
		l.returned.Add(ctx, n, attrs)
		l.outstanding.Add(ctx, -n, attrs)
	case ratelimit.EventLeaseLapsed:
		l.lapsed.Add(ctx, n, attrs)
		l.outstanding.Add(ctx, -n, attrs)
	}
}
