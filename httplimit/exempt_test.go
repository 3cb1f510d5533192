package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// sessionUser is an authenticated user as a test server proves it: a
// session cookie the server issued, never a header the client names.
var sessionUser = ByUser(func(r *http.Request) (string, bool) {
	c, err := r.Cookie("session")
	if err != nil || c.Value != "signed:alice" && c.Value != "signed:bob" {
		return "", false
	}
	return c.Value[len("signed:"):], true
})

func hasRateHeaders(w *httptest.ResponseRecorder) bool {
	h := w.Header()
	return h.Get("RateLimit") != "" || h.Get("RateLimit-Policy") != "" || h.Get("Retry-After") != ""
}

// exemptCase is one request: who it comes from and whether it is exempt.
type exemptCase struct {
	name   string
	remote string
	header []string
	want   bool
}

var exemptCases = []exemptCase{
	{"inside the prefix", "10.1.2.3:5000", nil, true},
	{"outside", "192.0.2.1:5000", nil, false},
	{"IPv4-mapped IPv6 peer", "[::ffff:10.1.2.3]:5000", nil, true},
	{"mapped outside", "[::ffff:11.1.2.3]:5000", nil, false},
	{"exempt IPv6 /48 holds the peer's /64", "[2001:db8:0:7::1]:5000", nil, true},
	{"IPv6 outside", "[2001:db9::1]:5000", nil, false},
	// The attack: a client not behind a trusted proxy claims an exempt
	// address. It is keyed, and judged, by its own address.
	{"spoofed X-Forwarded-For from an untrusted peer", "192.0.2.1:5000", []string{"X-Forwarded-For", "10.0.0.1"}, false},
	{"spoofed Forwarded from an untrusted peer", "192.0.2.1:5000", []string{"Forwarded", "for=10.0.0.1"}, false},
	{"spoofed X-Real-IP from an untrusted peer", "192.0.2.1:5000", []string{"X-Real-IP", "10.0.0.1"}, false},
	// Through the trusted proxy, its appended address is believed; what
	// the client wrote to its left is not.
	{"trusted proxy forwards an exempt client", "203.0.113.5:443", []string{"X-Forwarded-For", "10.9.9.9"}, true},
	{"trusted proxy forwards a client that spoofs on the left", "203.0.113.5:443", []string{"X-Forwarded-For", "10.0.0.1, 192.0.2.1"}, false},
	{"trusted proxy forwards a mapped exempt client", "203.0.113.5:443", []string{"X-Forwarded-For", "::ffff:10.0.0.1"}, true},
	{"unix socket: no address, not exempt", "@", nil, false},
}

func exemptPrefixes(t *testing.T) []netip.Prefix {
	ps, err := ParsePrefixes("10.0.0.0/8", "2001:db8::/48")
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func clientIPBehind(t *testing.T) KeyFunc {
	proxies, _ := ParsePrefixes("203.0.113.5")
	f, err := ClientIP(IPConfig{TrustedProxies: proxies})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Invariant: an exempt request reaches the handler, consumes nothing and
// gets no rate-limit header; every other request is limited as without
// the exemption. Address exemptions read the address exactly as the key
// does: forwarded headers only from a trusted peer.
func TestMiddlewareExempt(t *testing.T) {
	for _, c := range exemptCases {
		t.Run(c.name, func(t *testing.T) {
			clock := ratelimit.NewManualClock(t0)
			lim := tokenBucket(t, ratelimit.PerHour(1), 1, clock)
			ip := clientIPBehind(t)
			h := Middleware(lim, WithKey(ip), WithClientIP(ip), WithExempt(exemptPrefixes(t)...))(okHandler)
			for i := range 3 {
				w := serve(h, "GET", "/", c.remote, c.header...)
				switch {
				case c.want && (w.Code != 200 || hasRateHeaders(w)):
					t.Fatalf("request %d: exempt, got %d with headers %v", i, w.Code, w.Header())
				case !c.want && c.remote == "@" && w.Code != http.StatusForbidden:
					t.Fatalf("request %d: no address: got %d, want 403", i, w.Code)
				case !c.want && c.remote != "@" && i > 0 && w.Code != http.StatusTooManyRequests:
					t.Fatalf("request %d: not exempt, got %d past an exhausted limit", i, w.Code)
				case !c.want && c.remote != "@" && !hasRateHeaders(w):
					t.Fatalf("request %d: not exempt, got no headers", i)
				}
			}
			if c.want {
				// Nothing consumed: the key still has its whole allowance.
				key, _ := ip(requestFrom(c.remote, c.header))
				if d, _ := lim.AllowN(t.Context(), key, 0); d.Remaining != 1 {
					t.Errorf("exempt requests consumed: %+v", d)
				}
			}
		})
	}
}

func requestFrom(remote string, header []string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// The same table through RulesMiddleware, with the exemption stated once
// as an option and once in the rules; the per-IP key and the exemption
// share the WithClientIP function.
func TestRulesMiddlewareExempt(t *testing.T) {
	for _, form := range []string{"option", "rules"} {
		for _, c := range exemptCases {
			t.Run(form+"/"+c.name, func(t *testing.T) {
				config := "*: 1/h per ip"
				var opts []RulesOption
				ip := clientIPBehind(t)
				opts = append(opts, WithClientIP(ip))
				if form == "rules" {
					config = "exempt 10.0.0.0/8 2001:db8::/48\n" + config
				} else {
					opts = append(opts, WithExempt(exemptPrefixes(t)...))
				}
				rules, err := ratelimit.ParseRules(config, ratelimit.WithClock(ratelimit.NewManualClock(t0)))
				if err != nil {
					t.Fatal(err)
				}
				h := RulesMiddleware(rules, opts...)(okHandler)
				for i := range 3 {
					w := serve(h, "GET", "/", c.remote, c.header...)
					switch {
					case c.want && (w.Code != 200 || hasRateHeaders(w)):
						t.Fatalf("request %d: exempt, got %d with headers %v", i, w.Code, w.Header())
					case !c.want && c.remote == "@" && w.Code != http.StatusForbidden:
						t.Fatalf("request %d: no address: got %d, want 403", i, w.Code)
					case !c.want && c.remote != "@" && i > 0 && w.Code != http.StatusTooManyRequests:
						t.Fatalf("request %d: not exempt, got %d past an exhausted limit", i, w.Code)
					}
				}
			})
		}
	}
}

// A user exemption holds only for the user the WithUser function proves;
// a client naming the user elsewhere gets nothing, and a request without a
// user is limited (or refused, where a per-user rule needs one).
func TestExemptUsers(t *testing.T) {
	alice := []string{"Cookie", "session=signed:alice"}
	bob := []string{"Cookie", "session=signed:bob"}
	forged := []string{"Cookie", "session=alice", "X-User", "alice"}
	t.Run("Middleware", func(t *testing.T) {
		lim := tokenBucket(t, ratelimit.PerHour(1), 1, ratelimit.NewManualClock(t0))
		h := Middleware(lim, WithUser(sessionUser), WithExemptUsers("alice"))(okHandler)
		for i := range 3 {
			if w := serve(h, "GET", "/", "192.0.2.1:1", alice...); w.Code != 200 || hasRateHeaders(w) {
				t.Fatalf("alice %d: %d %v", i, w.Code, w.Header())
			}
		}
		if w := serve(h, "GET", "/", "192.0.2.9:1", forged...); w.Code != 200 || !hasRateHeaders(w) {
			t.Fatalf("forged: first request %d, headers %v", w.Code, w.Header())
		}
		if w := serve(h, "GET", "/", "192.0.2.9:1", forged...); w.Code != http.StatusTooManyRequests {
			t.Fatalf("forged: second request %d, want 429", w.Code)
		}
	})
	t.Run("RulesMiddleware", func(t *testing.T) {
		rules, err := ratelimit.ParseRules("exempt user alice\n*: 1/h per user", ratelimit.WithClock(ratelimit.NewManualClock(t0)))
		if err != nil {
			t.Fatal(err)
		}
		h := RulesMiddleware(rules, WithUser(sessionUser))(okHandler)
		for i := range 3 {
			if w := serve(h, "GET", "/", "192.0.2.1:1", alice...); w.Code != 200 || hasRateHeaders(w) {
				t.Fatalf("alice %d: %d %v", i, w.Code, w.Header())
			}
		}
		serve(h, "GET", "/", "192.0.2.1:1", bob...)
		if w := serve(h, "GET", "/", "192.0.2.1:1", bob...); w.Code != http.StatusTooManyRequests {
			t.Fatalf("bob: %d, want 429", w.Code)
		}
		if w := serve(h, "GET", "/", "192.0.2.1:1", forged...); w.Code != http.StatusForbidden {
			t.Fatalf("forged: %d, want 403 (no authenticated user)", w.Code)
		}
	})
	t.Run("user exemption without a per-user rule", func(t *testing.T) {
		rules, err := ratelimit.ParseRules("exempt user alice\n*: 1/h per ip", ratelimit.WithClock(ratelimit.NewManualClock(t0)))
		if err != nil {
			t.Fatal(err)
		}
		h := RulesMiddleware(rules, WithUser(sessionUser))(okHandler)
		for i := range 3 {
			if w := serve(h, "GET", "/", "192.0.2.1:1", alice...); w.Code != 200 || hasRateHeaders(w) {
				t.Fatalf("alice %d: %d %v", i, w.Code, w.Header())
			}
		}
		// No user: limited by address, not refused.
		serve(h, "GET", "/", "192.0.2.1:1")
		if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("anonymous: %d, want 429", w.Code)
		}
	})
	t.Run("without WithUser it panics", func(t *testing.T) {
		lim := tokenBucket(t, ratelimit.PerHour(1), 1, ratelimit.NewManualClock(t0))
		rules, _ := ratelimit.ParseRules("exempt user alice\n*: 1/h per ip")
		for name, f := range map[string]func(){
			"Middleware":      func() { Middleware(lim, WithExemptUsers("alice")) },
			"RulesMiddleware": func() { RulesMiddleware(rules) },
			"RulesMiddleware option": func() {
				RulesMiddleware(rules, WithExemptUsers("bob"))
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: no panic", name)
					}
				}()
				f()
			}()
		}
	})
}

// An exemption adds no allocation to a request, exempt (IPv4 peer) or
// not: the count is that of the same middleware without one.
func TestExemptAllocs(t *testing.T) {
	lim := tokenBucket(t, ratelimit.PerSecond(1e9), 1e9, ratelimit.NewManualClock(t0))
	plain := Middleware(lim, WithHeaders(0))(okHandler)
	h := Middleware(lim, WithHeaders(0), WithExempt(exemptPrefixes(t)...))(okHandler)
	allocs := func(h http.Handler, remote string) float64 {
		r := requestFrom(remote, nil)
		w := discard{h: http.Header{}}
		return testing.AllocsPerRun(100, func() { h.ServeHTTP(w, r) })
	}
	for _, remote := range []string{"10.1.1.1:1", "192.0.2.1:1"} {
		if n, base := allocs(h, remote), allocs(plain, remote); n > base {
			t.Errorf("%s: %v allocations, %v without the exemption", remote, n, base)
		}
	}
}

type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}
