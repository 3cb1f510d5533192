package httplimit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A rule with classes works end to end through RulesMiddleware on a real
// server with WithPriority: while batch requests flood
// "*: 20/s global classes critical=5,batch", each second's first five
// critical requests pass; without WithPriority every request is of the
// lowest class and the flood leaves the critical ones nothing; a priority
// naming no class is an error (the default handler's 503), never a pass.
func TestRulesMiddlewareClasses(t *testing.T) {
	for _, withPriority := range []bool{true, false} {
		clock := ratelimit.NewManualClock(t0)
		rules, err := ratelimit.ParseRules("*: 20/s global classes critical=5,batch", ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		opts := []RulesOption{}
		if withPriority {
			opts = append(opts, WithPriority(func(r *http.Request) ratelimit.Priority {
				switch r.Header.Get("X-Class") {
				case "critical":
					return 0
				case "bogus":
					return 7
				}
				return 1
			}))
		}
		srv := httptest.NewServer(RulesMiddleware(rules, opts...)(okHandler))
		get := func(class string) int {
			req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
			req.Header.Set("X-Class", class)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		critOK := 0
		for sec := range 3 {
			clock.Set(t0.Add(time.Duration(sec) * time.Second))
			for range 40 {
				get("batch")
			}
			for range 5 {
				if get("critical") == http.StatusOK {
					critOK++
				}
			}
		}
		if withPriority {
			if critOK != 15 {
				t.Errorf("with WithPriority: %d of 15 critical requests passed under the flood, want all", critOK)
			}
			if code := get("bogus"); code != http.StatusServiceUnavailable {
				t.Errorf("a priority naming no class: status %d, want the error handler's 503", code)
			}
		} else if critOK != 0 {
			t.Errorf("without WithPriority: %d critical requests passed, want 0 (all of the lowest class)", critOK)
		}
		srv.Close()
		rules.Close()
	}
}
