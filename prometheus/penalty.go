package prometheus

import (
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitkit/ratelimit"
)

// penaltyCounters counts a PenaltyBox's blocks
// (ratelimit_penalty_blocks_total{limiter}) and the ends of blocks
// (ratelimit_penalty_unblocks_total{limiter, early}, early "true" for a
// block dropped before its end to make room). Its zero value is ready: the
// counters are made at first use.
type penaltyCounters struct {
	once     sync.Once
	blocks   *prom.CounterVec
	unblocks *prom.CounterVec
}

func (p *penaltyCounters) init() {
	p.once.Do(func() {
		p.blocks = prom.NewCounterVec(prom.CounterOpts{
			Name: "ratelimit_penalty_blocks_total",
			Help: "Keys blocked by a penalty box, by limiter.",
		}, []string{"limiter"})
		p.unblocks = prom.NewCounterVec(prom.CounterOpts{
			Name: "ratelimit_penalty_unblocks_total",
			Help: "Blocks of a penalty box that ended, by limiter; early=\"true\" if dropped before their end to make room.",
		}, []string{"limiter", "early"})
	})
}

// observe counts e under name if it is a penalty box event.
func (p *penaltyCounters) observe(name string, e ratelimit.Event) {
	switch e.Kind {
	case ratelimit.EventBlocked:
		p.init()
		p.blocks.WithLabelValues(name).Inc()
	case ratelimit.EventUnblocked:
		p.init()
		early := "false"
		if e.RetryAfter > 0 {
			early = "true"
		}
		p.unblocks.WithLabelValues(name, early).Inc()
	}
}

func (p *penaltyCounters) describe(ch chan<- *prom.Desc) {
	p.init()
	p.blocks.Describe(ch)
	p.unblocks.Describe(ch)
}

func (p *penaltyCounters) collect(ch chan<- prom.Metric) {
	p.init()
	p.blocks.Collect(ch)
	p.unblocks.Collect(ch)
}
