package prometheus

import prom "github.com/prometheus/client_golang/prometheus"

// bulkheadClassDesc is the series of a bulkhead's class decisions
// (ratelimit.EventBulkheadClass), by bulkhead, class and outcome.
var bulkheadClassDesc = prom.NewDesc("ratelimit_bulkhead_class_decisions_total",
	"TryAcquire and Acquire calls of a bulkhead with priority classes, by bulkhead, class and outcome (allowed or rejected).",
	[]string{"bulkhead", "class", "outcome"}, nil)
