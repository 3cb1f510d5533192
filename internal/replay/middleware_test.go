package replay

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
)

const productionRules = `
POST /login:      3/m             per ip
GET /items/{id}:  2/s   burst 3   per ip
/admin/:          1/s             per user
GET /search:      1/s             global  shadow
*:                8/s             global
exempt 10.0.0.0/8
`

// What the replay decides for each request of a random trace is what the
// middleware serving that trace answers, request for request: the class
// (ServeMux's, HEAD as GET, a redirected path as its target), the keys
// (IPv6 by its /64), exemptions, shadow rules, and a request without the
// user a rule needs.
func TestReplayEqualsMiddleware(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	methods := []string{"GET", "GET", "POST", "HEAD", "DELETE"}
	paths := []string{"/login", "/items/5", "/items/77", "/items/5/x", "/admin", "/admin/users", "/search?q=1", "/", "/x/../login"}
	ips := []string{"192.0.2.1", "192.0.2.2", "198.51.100.7", "10.0.0.3", "2001:db8:1:2::1", "2001:db8:1:2::99", "2001:db8:9::1"}
	for round := range 5 {
		clk := ratelimit.NewManualClock(time.Unix(0, 0))
		rules, err := ratelimit.ParseRules(productionRules, ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		h := httplimit.RulesMiddleware(rules, httplimit.WithUser(httplimit.ByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

		type decision struct {
			ok, decided bool
		}
		var got []decision
		r, err := New([]RuleFile{{Name: "p", Text: productionRules}}, Options{Decided: func(_ int, _ time.Time, _ ratelimit.Subject, d *ratelimit.MultiDecision) {
			got = append(got, decision{decided: d != nil, ok: d != nil && d.Allowed})
		}})
		if err != nil {
			t.Fatal(err)
		}
		tm := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
		var statuses []int
		var reqs []string
		for range 1500 {
			tm = tm.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
			method, path, ip := methods[rng.IntN(len(methods))], paths[rng.IntN(len(paths))], ips[rng.IntN(len(ips))]
			user := ""
			if rng.IntN(3) > 0 {
				user = fmt.Sprintf("u%d", rng.IntN(3))
			}
			clk.Set(tm)
			req := httptest.NewRequest(method, path, nil)
			if strings.Contains(ip, ":") {
				req.RemoteAddr = "[" + ip + "]:4000"
			} else {
				req.RemoteAddr = ip + ":4000"
			}
			if user != "" {
				req.Header.Set("X-User", user)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			statuses = append(statuses, rec.Code)
			reqs = append(reqs, fmt.Sprintf("%s %s from %s user %q at %v", method, path, ip, user, tm.Format("15:04:05.000")))
			r.Add("t", 1, &accesslog.Entry{Time: tm.UnixNano(), IP: []byte(ip), User: []byte(user), Method: []byte(method), Path: []byte(path)})
		}
		r.Finish()
		r.Close()
		var refused, noKey, exempt int
		for i, st := range statuses {
			g := got[i]
			var ok bool
			switch {
			case g.decided && g.ok:
				ok = st < 300 // 200, or a redirect the handler never sees
			case g.decided:
				ok, refused = st == http.StatusTooManyRequests, refused+1
			case st < 300:
				ok, exempt = strings.Contains(reqs[i], "from 10."), exempt+1
			default:
				ok, noKey = st != http.StatusTooManyRequests, noKey+1
			}
			if !ok {
				t.Fatalf("round %d, request %d (%s): the middleware answered %d, the replay decided %+v", round, i, reqs[i], st, g)
			}
		}
		if refused == 0 || noKey == 0 || exempt == 0 {
			t.Fatalf("round %d: %d refused, %d without a key, %d exempt: the trace tests too little", round, refused, noKey, exempt)
		}
	}
}
