package otel

import "go.opentelemetry.io/otel/metric"

// initBulkhead makes f count the class decisions of bulkheads
// (ratelimit.EventBulkheadClass) as ratelimit.bulkhead.class.decisions, by
// bulkhead, class and outcome.
func (f *fairClasses) initBulkhead(meter metric.Meter) error {
	var err error
	f.nameKey, f.key, f.denied = BulkheadKey, ClassKey, "rejected"
	f.counter, err = meter.Int64Counter("ratelimit.bulkhead.class.decisions", metric.WithUnit("{call}"),
		metric.WithDescription("TryAcquire and Acquire calls of a bulkhead with priority classes, by bulkhead, class and outcome (allowed or rejected)."))
	return err
}
