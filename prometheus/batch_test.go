package prometheus_test

import (
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// TestBatchSizes: EventBatch feeds the batch-size histogram of its
// limiter, and counts as no decision.
func TestBatchSizes(t *testing.T) {
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	m.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: "api", N: 10})
	m.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: "api", N: 3})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		switch f.GetName() {
		case "ratelimit_redis_batch_size":
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 13 {
				t.Errorf("batch sizes: count %d sum %v, want 2 and 13", h.GetSampleCount(), h.GetSampleSum())
			}
			if l := f.GetMetric()[0].GetLabel()[0]; l.GetValue() != "api" {
				t.Errorf("label %v", l)
			}
			found = true
		case "ratelimit_decisions_total":
			for _, mt := range f.GetMetric() {
				if mt.GetCounter().GetValue() != 0 {
					t.Errorf("a batch counted as a decision: %v", mt)
				}
			}
		}
	}
	if !found {
		t.Fatal("no ratelimit_redis_batch_size series")
	}
}
