package otel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Lease events become the outstanding up-down counter and the unit
// counters, under the limiter's name, and are not counted as decisions.
func TestLeaseInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, e := range []ratelimit.Event{
		{Kind: ratelimit.EventLeaseTaken, Limiter: "api:", Key: "k", N: 10},
		{Kind: ratelimit.EventLeaseTaken, Limiter: "api:", Key: "k", N: 4},
		{Kind: ratelimit.EventLeaseSpent, Limiter: "api:", Key: "k", N: 6},
		{Kind: ratelimit.EventLeaseReturned, Limiter: "api:", Key: "k", N: 3},
		{Kind: ratelimit.EventLeaseLapsed, Limiter: "api:", Key: "k", N: 1},
	} {
		m.Observe(e)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if d, ok := x.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(rlotel.LimiterKey); !ok || v.AsString() != "api:" {
						t.Errorf("%s: attributes %v", x.Name, p.Attributes.ToSlice())
					}
					if p.Attributes.Len() != 1 && strings.HasPrefix(x.Name, "ratelimit.lease.") {
						t.Errorf("%s: attributes %v, want the limiter's alone", x.Name, p.Attributes.ToSlice())
					}
					got[x.Name] += p.Value
				}
			}
		}
	}
	for name, want := range map[string]int64{
		"ratelimit.lease.outstanding": 4, "ratelimit.lease.taken": 14,
		"ratelimit.lease.returned": 3, "ratelimit.lease.lapsed": 1, "ratelimit.decisions": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
}
