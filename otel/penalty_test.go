package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A penalty box's blocks and their ends are counted by limiter.
func TestMetricsPenalty(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk := ratelimit.NewManualClock(t0)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(1), 1, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	box, err := ratelimit.NewPenaltyBox(tb, 2, time.Minute, time.Hour, ratelimit.WithClock(clk),
		ratelimit.WithName("login"), ratelimit.WithObserver(m), ratelimit.WithMaxKeys(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} { // b's history drops a's block early
		for i := 0; i < 3; i++ {
			box.Allow(k)
		}
	}
	box.Allow("b") // refused by the block
	clk.Advance(2 * time.Hour)
	box.Allow("b") // the block ran out
	ints, _ := collect(t, reader)
	for k, v := range map[string]int64{
		"ratelimit.penalty.blocks ratelimit.limiter=login":                                 2,
		"ratelimit.penalty.unblocks ratelimit.limiter=login ratelimit.penalty.early=true":  1,
		"ratelimit.penalty.unblocks ratelimit.limiter=login ratelimit.penalty.early=false": 1,
		"ratelimit.decisions ratelimit.limiter=login ratelimit.outcome=denied":             1,
	} {
		if got, ok := ints[k]; !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, v)
		}
	}
}
