package otel_test

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestBatchSizes: EventBatch feeds the batch-size histogram of its
// limiter.
func TestBatchSizes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: "api", N: 10})
	m.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: "api", N: 3})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != "ratelimit.redis.batch.size" {
				continue
			}
			h, ok := mt.Data.(metricdata.Histogram[int64])
			if !ok || len(h.DataPoints) != 1 {
				t.Fatalf("batch sizes: %#v", mt.Data)
			}
			p := h.DataPoints[0]
			if v, _ := p.Attributes.Value(rlotel.LimiterKey); p.Count != 2 || p.Sum != 13 || v.AsString() != "api" {
				t.Errorf("batch sizes: count %d sum %d limiter %q, want 2, 13, api", p.Count, p.Sum, v.AsString())
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no ratelimit.redis.batch.size")
	}
}
