// Command httpserver runs a small social-network API behind rate limits
// and fires bursts of requests at it, printing what comes back: per-user
// limits per endpoint, a per-address limit and a global one, checked as one
// decision, with the IETF RateLimit headers and Retry-After.
//
// The server listens on loopback and, like a real deployment behind a load
// balancer, believes X-Forwarded-For only from its trusted proxy (here the
// loopback address the demo's client connects from). It answers 401 to an
// anonymous request on a per-user endpoint, where the library's default is
// 403. Time comes from a manual clock, so the output is the same on every
// run.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// The limits, as an operator would write them. "*" rules apply to every
// request; the numbers are small so that the demo reaches them.
const limits = `
	POST /posts:   1/s      per user  as posts
	POST /likes:   5/s      per user  as likes
	POST /friends: 150/day  per user  as friends
	*:             10/s     per ip    as per-ip
	*:             16/s     global    as global
`

// tokens stands in for real authentication: a bearer token names a user.
var tokens = map[string]string{"t-alice": "alice", "t-bob": "bob", "t-carol": "carol"}

func user(r *http.Request) (string, bool) {
	u, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	return u, ok
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

// proxies are the addresses of the load balancers the server trusts to
// set X-Forwarded-For: here the loopback address the demo's client
// connects from, as a load balancer would.
var proxies = []string{"127.0.0.1", "::1"}

func run(out io.Writer) error {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	rules, err := ratelimit.ParseRules(limits, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}
	defer rules.Close()

	trusted, err := httplimit.ParsePrefixes(proxies...)
	if err != nil {
		return err
	}
	clientIP, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: trusted,
		Header:         "X-Forwarded-For",
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	for _, pattern := range []string{"POST /posts", "POST /likes", "POST /friends"} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	}
	mux.HandleFunc("GET /feed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "[]\n") })
	limited := httplimit.RulesMiddleware(rules,
		httplimit.WithUser(httplimit.ByUser(user)),
		httplimit.WithClientIP(clientIP),
		httplimit.WithProblemJSON(),
		// The library answers 403 Forbidden to a request it finds no key
		// for; here the missing key is a user, so ask for a sign-in.
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, httplimit.ErrNoKey) {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		}),
	)(mux)
	// For the demo only: tell the client which address the limits keyed
	// its request by.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key, err := clientIP(r); err == nil {
			w.Header().Set("X-Demo-Client-Key", key)
		}
		limited.ServeHTTP(w, r)
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	p := func(s ...any) { fmt.Fprintln(out, s...) }
	p("A social API on loopback, limited by these rules (manual clock):")
	p(strings.TrimRight(strings.ReplaceAll(limits, "\t", "  "), " \n"))
	p()
	p("The server trusts X-Forwarded-For only from its load balancers (here")
	p("the loopback address the demo's client connects from):")
	p(`  trusted, _ := httplimit.ParsePrefixes("` + strings.Join(proxies, `", "`) + `")`)
	p("  clientIP, _ := httplimit.ClientIP(httplimit.IPConfig{")
	p(`      TrustedProxies: trusted, Header: "X-Forwarded-For"})`)
	p("and keys a request by the right-most address in that header that is not")
	p("one of them. Each request below carries the header a proxy would send.")
	p()
	var lastPolicy string
	// send sends a request and prints the answer; it returns the address
	// the server keyed the request by.
	send := func(who, forwarded, method, path string) string {
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("X-Forwarded-For", forwarded)
		for tok, u := range tokens {
			if u == who {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p("  error:", err)
			return ""
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if pol := resp.Header.Get("RateLimit-Policy"); pol != "" && pol != lastPolicy {
			p("  RateLimit-Policy: " + pol)
			lastPolicy = pol
		}
		line := fmt.Sprintf("  %-6s %-12s -> %d", nonEmpty(who, "(anon)"), method+" "+path, resp.StatusCode)
		if rl := resp.Header.Get("RateLimit"); rl != "" {
			line += "  RateLimit: " + rl
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += "  Retry-After: " + ra
		}
		if resp.StatusCode == http.StatusUnauthorized {
			line += "  " + strings.TrimSpace(string(body))
		}
		p(line)
		if resp.StatusCode == http.StatusTooManyRequests {
			p("      " + violated(body))
		}
		return resp.Header.Get("X-Demo-Client-Key")
	}

	p("alice (198.51.100.7) posts twice: one post a second per user.")
	send("alice", "198.51.100.7", "POST", "/posts")
	send("alice", "198.51.100.7", "POST", "/posts")
	p("alice likes six times: five at once per user.")
	for range 6 {
		send("alice", "198.51.100.7", "POST", "/likes")
	}
	p("Nobody signed in: per-user limits need a user. The library's default")
	p("answer to a request without a key is 403 Forbidden; this server's")
	p("WithErrorHandler answers 401 Unauthorized, since signing in would help.")
	send("", "203.0.113.50", "POST", "/posts")
	p("bob (192.0.2.10) reads his feed ten times: ten a second per address.")
	for range 10 {
		send("bob", "192.0.2.10", "GET", "/feed")
	}
	p("bob's 11th read prepends a made-up address; the proxy appends his real")
	p("one, so the server receives, from 127.0.0.1 (trusted):")
	p("  X-Forwarded-For: 10.9.9.9, 192.0.2.10")
	key := send("bob", "10.9.9.9, 192.0.2.10", "GET", "/feed")
	p("The server keyed it by " + key + ", the right-most address no trusted")
	p("proxy vouches for: the made-up one gets bob no fresh allowance.")
	p("The global limit (16/s) is now spent: carol is refused by it alone,")
	p("and her own allowance is untouched (all or nothing).")
	send("carol", "192.0.2.20", "POST", "/posts")
	clock.Advance(time.Second)
	p("One second later, as Retry-After said:")
	send("carol", "192.0.2.20", "POST", "/posts")
	send("alice", "198.51.100.7", "POST", "/posts")
	return nil
}

func nonEmpty(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// violated extracts the violated policies from a problem+json body.
func violated(body []byte) string {
	s := string(body)
	i := strings.Index(s, `"violated-policies":`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"violated-policies":`):]
	if j := strings.IndexByte(s, ']'); j >= 0 {
		s = s[:j+1]
	}
	return "violated " + s
}
