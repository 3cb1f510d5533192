package prometheus

import (
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitkit/ratelimit"
)

// operatorActions counts the operator actions the limiters report
// (ratelimit.EventSetRate and the kinds after it) as
// ratelimit_operator_actions_total{limiter, action}. Its zero value is
// ready: the counter is made at first use.
type operatorActions struct {
	once sync.Once
	vec  *prom.CounterVec
}

func (o *operatorActions) init() *prom.CounterVec {
	o.once.Do(func() {
		o.vec = prom.NewCounterVec(prom.CounterOpts{
			Name: "ratelimit_operator_actions_total",
			Help: "Changes made at run time, by limiter and action (set_rate, set_override, remove_override, reset, settle).",
		}, []string{"limiter", "action"})
	})
	return o.vec
}

// observe counts e under name if it is an operator action.
func (o *operatorActions) observe(name string, e ratelimit.Event) {
	if a := ratelimit.OperatorAction(e.Kind); a != "" {
		o.init().WithLabelValues(name, a).Inc()
	}
}

func (o *operatorActions) describe(ch chan<- *prom.Desc) { o.init().Describe(ch) }
func (o *operatorActions) collect(ch chan<- prom.Metric) { o.init().Collect(ch) }
