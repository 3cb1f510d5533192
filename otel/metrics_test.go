package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var t0 = time.Unix(1_700_000_000, 0)

// upDown names the instruments that are UpDownCounters; the limit stays a
// gauge.
var upDown = map[string]bool{
	"ratelimit.keys":               true,
	"ratelimit.bulkhead.in_flight": true,
	"ratelimit.bulkhead.waiting":   true,
}

// collect reads every instrument through the SDK's manual reader and
// returns each int64 point as "name attr=value,..." -> value, and the
// wait histogram's points by limiter.
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]int64, map[string]metricdata.HistogramDataPoint[float64]) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ints := make(map[string]int64)
	hists := make(map[string]metricdata.HistogramDataPoint[float64])
	key := func(name string, set attribute.Set) string {
		k := name
		for _, kv := range set.ToSlice() {
			k += " " + string(kv.Key) + "=" + kv.Value.String()
		}
		return k
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				// Counts that go up and down (keys held, calls in flight or
				// waiting) are UpDownCounters, as the semantic conventions
				// have http.server.active_requests; every other sum only
				// goes up.
				if want := !upDown[m.Name]; d.IsMonotonic != want {
					t.Errorf("%s: monotonic %v, want %v", m.Name, d.IsMonotonic, want)
				}
				if upDown[m.Name] && d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: temporality %v, want cumulative", m.Name, d.Temporality)
				}
				for _, p := range d.DataPoints {
					ints[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				if upDown[m.Name] {
					t.Errorf("%s is a gauge, want an UpDownCounter", m.Name)
				}
				for _, p := range d.DataPoints {
					ints[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					t.Errorf("%s in %q, want s", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					hists[key(m.Name, p.Attributes)] = p
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return ints, hists
}

// The instruments of a limiter, a shadow, a bulkhead and the Redis error
// hook, read through the SDK: every count is the one the calls returned,
// and no key appears among the attributes.
func TestMetricsManualReader(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk := ratelimit.NewManualClock(t0)
	api, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3, ratelimit.WithClock(clk),
		ratelimit.WithName("api"), ratelimit.WithObserver(m))
	if err := m.WatchStats("api", api); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStats("api", api); err == nil {
		t.Error("watching one name twice was accepted")
	}
	trial, _ := ratelimit.NewFixedWindow(ratelimit.PerMinute(2), ratelimit.WithClock(clk))
	sh, _ := ratelimit.NewShadow(trial, ratelimit.WithName("trial"), ratelimit.WithObserver(m))
	for range 5 {
		api.Allow("secret-client-key") // 3 allowed, 2 denied
		sh.Allow("secret-client-key")  // 2 allowed, 3 would-deny
	}
	if r, _ := api.Reserve(context.Background(), "secret-client-key", 1); r.Delay() != time.Second {
		t.Fatalf("booked %v ahead, want 1s", r.Delay())
	}
	bh, _ := ratelimit.NewBulkhead(1, ratelimit.WithBulkheadObserver(m), ratelimit.WithBulkheadName("db"))
	if err := m.WatchBulkhead("db", bh); err != nil {
		t.Fatal(err)
	}
	bh.TryAcquire()
	bh.TryAcquire()
	onErr := m.OnRedisError("shared")
	onErr("secret-client-key", errors.New("refused"))

	ints, hists := collect(t, reader)
	want := map[string]int64{
		"ratelimit.decisions ratelimit.limiter=api ratelimit.outcome=allowed":       4,
		"ratelimit.decisions ratelimit.limiter=api ratelimit.outcome=denied":        2,
		"ratelimit.decisions ratelimit.limiter=trial ratelimit.outcome=allowed":     2,
		"ratelimit.decisions ratelimit.limiter=trial ratelimit.outcome=would_deny":  3,
		"ratelimit.keys ratelimit.limiter=api":                                      1,
		"ratelimit.key.inserts ratelimit.limiter=api":                               1,
		"ratelimit.key.evictions ratelimit.eviction.kind=lru ratelimit.limiter=api": 0,
		"ratelimit.bulkhead.in_flight ratelimit.bulkhead=db":                        1,
		"ratelimit.bulkhead.limit ratelimit.bulkhead=db":                            1,
		"ratelimit.bulkhead.rejections ratelimit.bulkhead=db":                       1,
		"ratelimit.redis.errors ratelimit.limiter=shared":                           1,
		"ratelimit.fallback.decisions ratelimit.limiter=shared":                     1,
	}
	for k, v := range want {
		got, ok := ints[k]
		if !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, v)
		}
	}
	for k := range ints {
		if strings.Contains(k, "secret") {
			t.Errorf("a key appears in %q", k)
		}
	}
	h, ok := hists["ratelimit.wait.duration ratelimit.limiter=api"]
	if !ok || h.Count != 1 || h.Sum != 1 {
		t.Errorf("wait histogram %+v, want one wait of 1s", h)
	}

	// Past the cap, names share one series.
	m2, _ := rlotel.New(provider.Meter("capped"), rlotel.WithMaxNames(1))
	defer m2.Close()
	for _, n := range []string{"a", "b", "c"} {
		m2.Observe(ratelimit.Event{Limiter: n})
	}
	ints, _ = collect(t, reader)
	if ints["ratelimit.decisions ratelimit.limiter=_other ratelimit.outcome=denied"] != 2 {
		t.Errorf("names past the cap: %v", ints)
	}
}

// Observe allocates nothing for a name already seen.
func TestObserveDoesNotAllocate(t *testing.T) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("x"))
	if err != nil {
		t.Fatal(err)
	}
	e := ratelimit.Event{Limiter: "api", Key: "k", Allowed: true}
	m.Observe(e)
	if a := testing.AllocsPerRun(100, func() { m.Observe(e) }); a != 0 {
		t.Errorf("Observe allocates %v times", a)
	}
}
