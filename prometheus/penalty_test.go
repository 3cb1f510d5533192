package prometheus_test

import (
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// A penalty box's blocks and their ends are counted by limiter, and the
// decisions it refuses itself as denials.
func TestMetricsPenalty(t *testing.T) {
	clk := ratelimit.NewManualClock(t0)
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(1), 1, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	box, err := ratelimit.NewPenaltyBox(tb, 2, time.Minute, time.Hour, ratelimit.WithClock(clk),
		ratelimit.WithName("login"), ratelimit.WithObserver(m), ratelimit.WithMaxKeys(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"secret-a", "secret-b"} { // b's history drops a's block early
		for i := 0; i < 3; i++ {
			box.Allow(k)
		}
	}
	box.Allow("secret-b") // refused by the block
	clk.Advance(2 * time.Hour)
	box.Allow("secret-b") // the block ran out
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_penalty_blocks_total{limiter="login"} 2`,
		`ratelimit_penalty_unblocks_total{early="true",limiter="login"} 1`,
		`ratelimit_penalty_unblocks_total{early="false",limiter="login"} 1`,
		`ratelimit_decisions_total{limiter="login",outcome="denied"} 1`,
	)
	if strings.Contains(page, "secret") {
		t.Error("a key appears on the page")
	}
}
