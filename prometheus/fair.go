package prometheus

import (
	"sync"
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimitkit/ratelimit"
)

// fairClassDesc is the series of a Fair's class decisions
// (ratelimit.EventFairClass), by limiter, class and outcome.
var fairClassDesc = prom.NewDesc("ratelimit_fair_class_decisions_total",
	"Decisions of a fair-share limit with priority classes, by limiter, class and outcome (allowed or denied).",
	[]string{"limiter", "class", "outcome"}, nil)

// fairGroupDesc is the series of a Fair's decisions by tenant group
// (ratelimit.EventFairGroup), by limiter, group and outcome.
var fairGroupDesc = prom.NewDesc("ratelimit_fair_group_decisions_total",
	"Decisions of a fair-share limit by tenant group, by limiter, group and outcome (allowed or denied).",
	[]string{"limiter", "group", "outcome"}, nil)

// maxFairClasses bounds the class series of one Metrics; class names come
// from the program's configuration, so this is only a guard.
const maxFairClasses = 1024

// fairClasses counts class decisions (or group decisions). The limiter
// label is the series' name, already capped by WithMaxNames.
type fairClasses struct {
	desc   *prom.Desc // nil: fairClassDesc; fairGroupDesc, or bulkheadClassDesc for bulkheads
	mu     sync.Mutex
	counts map[[2]string]*[2]atomic.Uint64 // {limiter, class} -> {allowed, denied}
}

func (f *fairClasses) observe(limiter string, e ratelimit.Event) {
	f.mu.Lock()
	c := f.counts[[2]string{limiter, e.Key}]
	if c == nil {
		if f.counts == nil {
			f.counts = make(map[[2]string]*[2]atomic.Uint64)
		}
		if len(f.counts) >= maxFairClasses {
			f.mu.Unlock()
			return
		}
		c = new([2]atomic.Uint64)
		f.counts[[2]string{limiter, e.Key}] = c
	}
	f.mu.Unlock()
	if e.Allowed {
		c[0].Add(1)
	} else {
		c[1].Add(1)
	}
}

func (f *fairClasses) collect(ch chan<- prom.Metric) {
	d, denied := f.desc, "denied"
	if d == nil {
		d = fairClassDesc
	} else if d == bulkheadClassDesc {
		denied = "rejected"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, c := range f.counts {
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(c[0].Load()), k[0], k[1], "allowed")
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(c[1].Load()), k[0], k[1], denied)
	}
}
