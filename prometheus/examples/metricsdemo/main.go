// Command metricsdemo shows the metrics page of a small HTTP server under a
// burst: rules with a shadow rule beside the enforced ones, a bulkhead, and
// the Prometheus collector of github.com/ratelimitkit/ratelimit/prometheus.
// The server listens on 127.0.0.1 only; the clock is a manual one, so that
// the page reads the same on every run.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

const rules = `
	GET /api: 5/s  per ip             as api
	GET /api: 2/s  per ip  shadow     as api-strict
	*:        20/s global             as all
`

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	clk := ratelimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	metrics := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(metrics)

	rs, err := ratelimit.ParseRules(rules, ratelimit.WithClock(clk), ratelimit.WithObserver(metrics))
	if err != nil {
		return err
	}
	for _, r := range rs.For("GET /api").Rules() {
		lim := r.Limiter
		if sh, ok := lim.(*ratelimit.Shadow); ok {
			lim = sh.Limiter()
		}
		if err := metrics.WatchStats(r.Name, lim.(interface{ Stats() ratelimit.Stats })); err != nil {
			return err
		}
	}
	db, err := ratelimit.NewBulkhead(2, ratelimit.WithBulkheadName("db"), ratelimit.WithBulkheadObserver(metrics))
	if err != nil {
		return err
	}
	if err := metrics.WatchBulkhead("db", db); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /api", func(w http.ResponseWriter, r *http.Request) {
		if !db.TryAcquire() {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		db.Release()
	})
	api := httplimit.RulesMiddleware(rs, httplimit.WithClientIP(httplimit.ByHeader("X-Client")))(mux)
	srv := httptest.NewServer(api)
	defer srv.Close()
	page := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer page.Close()

	fmt.Fprintln(out, "A burst of 8 requests from each of 3 clients, at one instant:")
	codes := map[int]int{}
	for i := range 24 {
		req, _ := http.NewRequest("GET", srv.URL+"/api", nil)
		req.Header.Set("X-Client", fmt.Sprintf("198.51.100.%d", i%3))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		codes[res.StatusCode]++
	}
	fmt.Fprintf(out, "  %d served, %d refused (429)\n\n", codes[200], codes[429])

	fmt.Fprintln(out, "The metrics page, our series only, zeros left out:")
	res, err := http.Get(page.URL)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "ratelimit_") && !strings.HasSuffix(l, " 0") {
			fmt.Fprintln(out, "  "+l)
		}
	}
	return sc.Err()
}
