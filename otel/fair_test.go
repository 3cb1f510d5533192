package otel_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A Fair's class decisions are counted by class and outcome; no tenant
// appears among the attributes.
func TestMetricsFairClasses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := rlotel.New(provider.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk := ratelimit.NewManualClock(t0)
	fw, err := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithFairName("api"), ratelimit.WithFairObserver(m),
		ratelimit.WithClasses(ratelimit.Class{Name: "critical", Reserved: 3}, ratelimit.Class{Name: "sheddable"}))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		fair.AllowPriority("secret-tenant", 1)
	}
	fair.AllowPriority("secret-tenant", 0)
	ints, _ := collect(t, reader)
	for k, want := range map[string]int64{
		"ratelimit.fair.class.decisions ratelimit.class=sheddable ratelimit.limiter=api ratelimit.outcome=allowed": 7,
		"ratelimit.fair.class.decisions ratelimit.class=sheddable ratelimit.limiter=api ratelimit.outcome=denied":  3,
		"ratelimit.fair.class.decisions ratelimit.class=critical ratelimit.limiter=api ratelimit.outcome=allowed":  1,
	} {
		if ints[k] != want {
			t.Errorf("%s = %d, want %d (have %v)", k, ints[k], want, ints)
		}
	}
}
