package otel_test

import (
	"strings"
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

// A Fair's decisions are counted by tenant group and outcome; no tenant
// appears among the attributes; a tenant out of the groups' range counts
// as ratelimit.OtherGroup.
func TestMetricsFairGroups(t *testing.T) {
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
	group := func(tenant string) int {
		if tenant == "secret-paid" {
			return 1
		}
		if tenant == "secret-free" {
			return 0
		}
		return -1
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithFairName("api"), ratelimit.WithFairObserver(m),
		ratelimit.WithTenantGroups([]string{"free", "paid"}, group))
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		fair.Allow("secret-free")
	}
	fair.Allow("secret-paid")
	fair.Allow("secret-unknown")
	ints, _ := collect(t, reader)
	for k, want := range map[string]int64{
		"ratelimit.fair.group.decisions ratelimit.group=free ratelimit.limiter=api ratelimit.outcome=allowed": 10,
		"ratelimit.fair.group.decisions ratelimit.group=free ratelimit.limiter=api ratelimit.outcome=denied":  2,
		"ratelimit.fair.group.decisions ratelimit.group=paid ratelimit.limiter=api ratelimit.outcome=denied":  1,
		"ratelimit.fair.group.decisions ratelimit.group=other ratelimit.limiter=api ratelimit.outcome=denied": 1,
	} {
		if ints[k] != want {
			t.Errorf("%s = %d, want %d (have %v)", k, ints[k], want, ints)
		}
	}
	for k := range ints {
		if strings.Contains(k, "secret") {
			t.Errorf("a tenant among the attributes: %s", k)
		}
	}
}
