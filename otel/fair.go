package otel

import (
	"context"
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ClassKey is the attribute of a fair-share limit's priority class.
const ClassKey = attribute.Key("ratelimit.class")

// GroupKey is the attribute of a fair-share limit's tenant group.
const GroupKey = attribute.Key("ratelimit.group")

// maxFairClasses bounds the attribute sets of class decisions one Metrics
// keeps; class names come from the program's configuration, so this is
// only a guard.
const maxFairClasses = 1024

// fairClasses counts the class decisions of Fairs (ratelimit.EventFairClass)
// as ratelimit.fair.class.decisions, by limiter, class and outcome.
type fairClasses struct {
	counter metric.Int64Counter
	nameKey attribute.Key // LimiterKey, or BulkheadKey for bulkheads
	key     attribute.Key // ClassKey, or GroupKey for tenant groups
	denied  string        // the outcome of a refusal
	mu      sync.Mutex
	opts    map[[3]string][]metric.AddOption // {limiter, class, outcome}
}

// fairCounter is one counter of class (or group) decisions: its name,
// unit and description, and its attributes.
type fairCounter struct {
	name, unit, desc string
	nameKey, key     attribute.Key
	denied           string
}

// The counters of fairClasses.
var (
	fairClassCounter = fairCounter{"ratelimit.fair.class.decisions", "{decision}",
		"Decisions of a fair-share limit with priority classes, by limiter, class and outcome (allowed or denied).",
		LimiterKey, ClassKey, "denied"}
	fairGroupCounter = fairCounter{"ratelimit.fair.group.decisions", "{decision}",
		"Decisions of a fair-share limit by tenant group, by limiter, group and outcome (allowed or denied).",
		LimiterKey, GroupKey, "denied"}
	bulkheadClassCounter = fairCounter{"ratelimit.bulkhead.class.decisions", "{call}",
		"TryAcquire and Acquire calls of a bulkhead with priority classes, by bulkhead, class and outcome (allowed or rejected).",
		BulkheadKey, ClassKey, "rejected"}
)

// init makes f count as c says: the class decisions of Fairs
// (ratelimit.EventFairClass, fairClassCounter), their decisions by tenant
// group (ratelimit.EventFairGroup, fairGroupCounter) or the class
// decisions of bulkheads (ratelimit.EventBulkheadClass,
// bulkheadClassCounter).
func (f *fairClasses) init(meter metric.Meter, c fairCounter) error {
	var err error
	f.nameKey, f.key, f.denied = c.nameKey, c.key, c.denied
	f.counter, err = meter.Int64Counter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc))
	return err
}

func (f *fairClasses) observe(limiter string, e ratelimit.Event) {
	outcome := f.denied
	if e.Allowed {
		outcome = "allowed"
	}
	k := [3]string{limiter, e.Key, outcome}
	f.mu.Lock()
	opt, ok := f.opts[k]
	if !ok {
		if f.opts == nil {
			f.opts = make(map[[3]string][]metric.AddOption)
		}
		if len(f.opts) >= maxFairClasses {
			f.mu.Unlock()
			return
		}
		opt = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			f.nameKey.String(limiter), f.key.String(e.Key), OutcomeKey.String(outcome)))}
		f.opts[k] = opt
	}
	f.mu.Unlock()
	f.counter.Add(context.Background(), 1, opt...)
}
