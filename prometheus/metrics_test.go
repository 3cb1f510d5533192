package prometheus_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

var t0 = time.Unix(1_700_000_000, 0)

// scrape serves reg over a real HTTP handler and returns the text page.
func scrape(t *testing.T, reg *prom.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s: %s", res.Status, body)
	}
	return string(body)
}

// has fails unless the page holds the sample line exactly.
func has(t *testing.T, page string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(page, "\n"+l+"\n") {
			t.Errorf("the page lacks %q", l)
		}
	}
}

// The metrics of a limiter, a shadow, a bulkhead and a Redis error hook,
// scraped from a real registry's handler: every count is the one the
// calls returned, no key appears, and the client library's lint passes.
func TestMetricsScrape(t *testing.T) {
	clk := ratelimit.NewManualClock(t0)
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)

	api, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3, ratelimit.WithClock(clk),
		ratelimit.WithName("api"), ratelimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStats("api", api); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStats("api", api); err == nil {
		t.Error("watching one name twice was accepted")
	}
	trial, _ := ratelimit.NewFixedWindow(ratelimit.PerMinute(2), ratelimit.WithClock(clk))
	sh, err := ratelimit.NewShadow(trial, ratelimit.WithName("trial"), ratelimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		api.Allow("secret-client-key") // 3 allowed, 2 denied
		sh.Allow("secret-client-key")  // 2 allowed, 3 would-deny
	}
	if err := api.Wait(context.Background(), "other-key"); err != nil { // no wait
		t.Fatal(err)
	}
	r, _ := api.Reserve(context.Background(), "secret-client-key", 1) // booked 1s ahead
	if r.Delay() != time.Second {
		t.Fatalf("the booking is %v ahead, want 1s", r.Delay())
	}

	bh, _ := ratelimit.NewBulkhead(1, ratelimit.WithBulkheadObserver(m), ratelimit.WithBulkheadName("db"))
	if err := m.WatchBulkhead("db", bh); err != nil {
		t.Fatal(err)
	}
	bh.TryAcquire()
	bh.TryAcquire() // refused

	onErr := m.OnRedisError("shared")
	onErr("key", errors.New("dial tcp: refused"))
	onErr("key", errors.New("dial tcp: refused"))

	page := scrape(t, reg)
	has(t, page,
		`ratelimit_decisions_total{limiter="api",outcome="allowed"} 5`, // 3 + the Wait + the Reserve
		`ratelimit_decisions_total{limiter="api",outcome="denied"} 2`,
		`ratelimit_decisions_total{limiter="trial",outcome="allowed"} 2`,
		`ratelimit_decisions_total{limiter="trial",outcome="would_deny"} 3`,
		`ratelimit_decisions_total{limiter="trial",outcome="denied"} 0`,
		`ratelimit_keys{limiter="api"} 2`,
		`ratelimit_key_inserts_total{limiter="api"} 2`,
		`ratelimit_key_evictions_total{kind="lru",limiter="api"} 0`,
		`ratelimit_wait_seconds_bucket{limiter="api",le="1"} 1`,
		`ratelimit_wait_seconds_bucket{limiter="api",le="0.5"} 0`,
		`ratelimit_wait_seconds_count{limiter="api"} 1`,
		`ratelimit_bulkhead_in_flight{bulkhead="db"} 1`,
		`ratelimit_bulkhead_waiting{bulkhead="db"} 0`,
		`ratelimit_bulkhead_limit{bulkhead="db"} 1`,
		`ratelimit_bulkhead_rejected_total{bulkhead="db"} 1`,
		`ratelimit_redis_errors_total{limiter="shared"} 2`,
		`ratelimit_fallback_decisions_total{limiter="shared"} 2`,
	)
	if strings.Contains(page, "secret-client-key") || strings.Contains(page, "other-key") {
		t.Error("a key appears on the metrics page")
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// An attacker who gets names chosen from keys gains nothing: past the cap
// every further name counts under one series.
func TestMetricsNamesAreCapped(t *testing.T) {
	m := rlprom.New(rlprom.WithMaxNames(3))
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	for i := range 100 {
		m.Observe(ratelimit.Event{Limiter: "name-" + string(rune('a'+i%26)) + strings.Repeat("x", i)})
	}
	page := scrape(t, reg)
	if n := strings.Count(page, "ratelimit_decisions_total{"); n != 4*3 {
		t.Errorf("%d decision series, want 3 names and %s, 3 outcomes each", n, rlprom.OtherName)
	}
	has(t, page, `ratelimit_decisions_total{limiter="_other",outcome="denied"} 97`)
}

// Rules report one event per rule, named after it; a shadow rule counts
// would-denies.
func TestMetricsRules(t *testing.T) {
	clk := ratelimit.NewManualClock(t0)
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	rs, err := ratelimit.ParseRules(`
		POST /posts: 1/m per user as posts
		POST /posts: 1/h per user shadow as posts-hourly
	`, ratelimit.WithClock(clk), ratelimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	who := ratelimit.Subject{User: "u"}
	rs.Allow("POST /posts", who)
	clk.Advance(time.Minute)
	rs.Allow("POST /posts", who) // allowed; the hourly shadow would deny
	rs.Allow("POST /posts", who) // denied by posts; the shadow is not asked
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_decisions_total{limiter="posts",outcome="allowed"} 2`,
		`ratelimit_decisions_total{limiter="posts",outcome="denied"} 1`,
		`ratelimit_decisions_total{limiter="posts-hourly",outcome="allowed"} 1`,
		`ratelimit_decisions_total{limiter="posts-hourly",outcome="would_deny"} 1`,
	)
}

// Observe allocates nothing for a name already seen.
func TestObserveDoesNotAllocate(t *testing.T) {
	m := rlprom.New()
	e := ratelimit.Event{Limiter: "api", Key: "k", Waited: time.Millisecond}
	m.Observe(e)
	if a := testing.AllocsPerRun(100, func() { m.Observe(e) }); a != 0 {
		t.Errorf("Observe allocates %v times", a)
	}
}
