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

func (f *fairClasses) init(meter metric.Meter) error {
	var err error
	f.nameKey, f.key, f.denied = LimiterKey, ClassKey, "denied"
	f.counter, err = meter.Int64Counter("ratelimit.fair.class.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of a fair-share limit with priority classes, by limiter, class and outcome (allowed or denied)."))
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

// initGroups makes f count the decisions of Fairs by tenant group
// (ratelimit.EventFairGroup) as ratelimit.fair.group.decisions, by
// limiter, group and outcome.
func (f *fairClasses) initGroups(meter metric.Meter) error {
	var err error
	f.nameKey, f.key, f.denied = LimiterKey, GroupKey, "denied"
	f.counter, err = meter.Int64Counter("ratelimit.fair.group.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of a fair-share limit by tenant group, by limiter, group and outcome (allowed or denied)."))
	return err
}
