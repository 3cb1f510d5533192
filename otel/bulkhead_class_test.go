package otel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A bulkhead's class decisions are counted by class and outcome; no tenant
// appears among the attributes.
func TestMetricsBulkheadClasses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := rlotel.New(provider.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, err := ratelimit.NewBulkhead(3, ratelimit.WithBulkheadName("db"), ratelimit.WithBulkheadObserver(m),
		ratelimit.WithBulkheadFairQueue(1, 1),
		ratelimit.WithBulkheadClasses(ratelimit.Class{Name: "critical", Reserved: 1}, ratelimit.Class{Name: "batch"}))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.TryAcquire() // batch: 2 allowed, 1 rejected (the reserve)
	}
	if err := b.AcquireFor(ratelimit.ContextWithPriority(context.Background(), 0), "secret-tenant"); err != nil {
		t.Fatal(err)
	}
	ints, _ := collect(t, reader)
	for k, want := range map[string]int64{
		"ratelimit.bulkhead.class.decisions ratelimit.bulkhead=db ratelimit.class=batch ratelimit.outcome=allowed":    2,
		"ratelimit.bulkhead.class.decisions ratelimit.bulkhead=db ratelimit.class=batch ratelimit.outcome=rejected":   1,
		"ratelimit.bulkhead.class.decisions ratelimit.bulkhead=db ratelimit.class=critical ratelimit.outcome=allowed": 1,
	} {
		if ints[k] != want {
			t.Errorf("%s = %d, want %d (have %v)", k, ints[k], want, ints)
		}
	}
	if s := fmt.Sprint(ints); strings.Contains(s, "secret-tenant") {
		t.Error("a tenant appears among the attributes")
	}
}
