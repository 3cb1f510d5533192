// Command httpserver runs a small social-network API behind rate limits
// and fires bursts of requests at it, printing what comes back: per-user
// limits per endpoint, a per-address limit and a global one, checked as one
// decision, with the IETF RateLimit headers and Retry-After.
//
// The server listens on loopback and, like a real deployment behind a load
// balancer, believes X-Forwarded-For only from its trusted proxy (here the
// loopback address the demo's client connects from). Time comes from a
// manual clock, so the output is the same on every run.
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := ratelimit.NewManualClock(start)
	rules, err := ratelimit.ParseRules(limits, ratelimit.WithClock(clock))
	if err != nil {
		return err
	}
	defer rules.Close()

	trusted, _ := httplimit.ParsePrefixes("127.0.0.1", "::1")
	clientIP, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: trusted})
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
		// Per-user endpoints need a signed-in user: say so with a 401.
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, httplimit.ErrNoKey) {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		}),
	)(mux)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: limited}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	fmt.Println("A social API on loopback, limited by these rules (manual clock):")
	fmt.Println(strings.TrimRight(strings.ReplaceAll(limits, "\t", "  "), " \n"))
	fmt.Println()
	var lastPolicy string
	send := func(who, ip, method, path string) {
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("X-Forwarded-For", ip)
		for tok, u := range tokens {
			if u == who {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("  error:", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if p := resp.Header.Get("RateLimit-Policy"); p != "" && p != lastPolicy {
			fmt.Printf("  %-41s RateLimit-Policy: %s\n", "", p)
			lastPolicy = p
		}
		line := fmt.Sprintf("  t=%-3s %-6s %-20s %-13s -> %d", clock.Now().Sub(start), nonEmpty(who, "(anon)"), ip, method+" "+path, resp.StatusCode)
		if rl := resp.Header.Get("RateLimit"); rl != "" {
			line += "  RateLimit: " + rl
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += "  Retry-After: " + ra
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			line += "  " + violated(body)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			line += "  " + strings.TrimSpace(string(body))
		}
		fmt.Println(line)
	}

	fmt.Println("alice posts twice: one post a second per user.")
	send("alice", "198.51.100.7", "POST", "/posts")
	send("alice", "198.51.100.7", "POST", "/posts")
	fmt.Println("alice likes six times: five at once per user.")
	for range 6 {
		send("alice", "198.51.100.7", "POST", "/likes")
	}
	fmt.Println("Nobody signed in: per-user limits need a user.")
	send("", "203.0.113.50", "POST", "/posts")
	fmt.Println("bob reads his feed ten times: ten a second per address.")
	for range 10 {
		send("bob", "192.0.2.10", "GET", "/feed")
	}
	fmt.Println("bob's 11th read prepends a made-up address to X-Forwarded-For. The proxy")
	fmt.Println("appended his real one, and the right-most address it did not vouch for")
	fmt.Println("is the key: no fresh allowance for bob.")
	send("bob", "10.9.9.9, 192.0.2.10", "GET", "/feed")
	fmt.Println("The global limit (16/s) is now spent: carol is refused by it alone,")
	fmt.Println("and her own allowance is untouched (all or nothing).")
	send("carol", "192.0.2.20", "POST", "/posts")
	clock.Advance(time.Second)
	fmt.Println("One second later, as Retry-After said:")
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
