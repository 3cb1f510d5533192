package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
)

type algo struct {
	name string
	make func(rate ratelimit.Rate, burst int, opts ...ratelimit.Option) (ratelimit.Limiter, error)
}

var algos = []algo{
	{"token bucket", func(r ratelimit.Rate, b int, o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(r, b, o...)
	}},
	{"leaky bucket", func(r ratelimit.Rate, b int, o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyBucket(r, b, o...)
	}},
	{"fixed window", func(r ratelimit.Rate, _ int, o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewFixedWindow(r, o...)
	}},
	{"sliding log", func(r ratelimit.Rate, _ int, o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingLog(r, o...)
	}},
	{"sliding window counter", func(r ratelimit.Rate, _ int, o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingWindowCounter(r, o...)
	}},
}

type req struct {
	t    int64
	ip   string
	path string
}

// The replay decides each request as the algorithm's own limiter does,
// fed the trace in time order on a manual clock, whatever the order the
// lines come in within the reorder window: random traces, the five
// algorithms, random rates, bursts and windows.
func TestReplayEqualsLimiters(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for round := range 60 {
		a := algos[round%len(algos)]
		rate := ratelimit.Rate{N: 1 + rng.Int64N(5), Period: time.Duration(1+rng.IntN(3)) * time.Second}
		burst := int(rate.N)
		if a.name == "token bucket" || a.name == "leaky bucket" {
			burst = 1 + rng.IntN(6)
		}
		window := time.Duration(rng.IntN(3)) * time.Second
		n := 200 + rng.IntN(400)
		trace := make([]req, n)
		tm := base
		for i := range trace {
			tm += rng.Int64N(int64(400 * time.Millisecond))
			trace[i] = req{t: tm, ip: fmt.Sprintf("192.0.2.%d", rng.IntN(4)), path: []string{"/a", "/b"}[rng.IntN(2)]}
		}
		// Read order: each line displaced by less than the window.
		read := slices.Clone(trace)
		disp := make(map[int]int64)
		for i := range read {
			if window > 0 {
				disp[i] = rng.Int64N(int64(window))
			}
		}
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(x, y int) int {
			ex, ey := read[x].t+disp[x], read[y].t+disp[y]
			switch {
			case ex < ey:
				return -1
			case ex > ey:
				return 1
			}
			return 0
		})
		ordered := make([]req, n)
		for i, j := range idx {
			ordered[i] = read[j]
		}

		type got struct {
			at      int64
			ip      string
			allowed bool
		}
		var decided []got
		build := func(text string, opts ...ratelimit.Option) (*ratelimit.Rules, error) {
			lim, err := a.make(rate, burst, opts...)
			if err != nil {
				return nil, err
			}
			return ratelimit.NewRules([]ratelimit.Rule{{Class: "GET /a", Rate: rate, Burst: burst, Scope: ratelimit.PerIP, Limiter: lim}}, opts...)
		}
		r, err := New([]RuleFile{{Name: "t"}}, Options{Reorder: window, Build: build,
			Decided: func(_ int, at time.Time, who ratelimit.Subject, d *ratelimit.MultiDecision) {
				decided = append(decided, got{at.UnixNano(), who.IP, d.Allowed})
			}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := accesslog.NewParser(accesslog.Common, accesslog.Fields{})
		for i, q := range ordered {
			var e accesslog.Entry
			line := fmt.Sprintf(`%s - - [%s] "GET %s HTTP/1.1" 200 1`, q.ip, time.Unix(0, q.t).UTC().Format("02/Jan/2006:15:04:05 -0700"), q.path)
			if err := p.Parse([]byte(line), &e); err != nil {
				t.Fatal(err)
			}
			e.Time = q.t // keep the nanoseconds the common log format drops
			r.Add("t", int64(i+1), &e)
		}
		rep := r.Finish()
		r.Close()
		if rep.Late != 0 {
			t.Fatalf("round %d: %d late lines within the window %v: %+v", round, rep.Late, window, rep.LateLines)
		}

		// The reference: the same limiter on a manual clock, in time order
		// (ties in the order read), "/a" only.
		clk := ratelimit.NewManualClock(time.Unix(0, base))
		ref, err := a.make(rate, burst, ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		sorted := slices.Clone(ordered)
		slices.SortStableFunc(sorted, func(x, y req) int {
			switch {
			case x.t < y.t:
				return -1
			case x.t > y.t:
				return 1
			}
			return 0
		})
		if len(decided) != n {
			t.Fatalf("round %d: %d decisions for %d requests", round, len(decided), n)
		}
		refused := int64(0)
		for i, q := range sorted {
			want := true
			if q.path == "/a" {
				clk.Set(time.Unix(0, q.t))
				want = ref.Allow(q.ip)
			}
			if !want {
				refused++
			}
			g := decided[i]
			if g.at != q.t || g.ip != q.ip || g.allowed != want {
				t.Fatalf("round %d (%s, %v burst %d, window %v): request %d at %v by %s: replay %v at %v by %s, limiter %v",
					round, a.name, rate, burst, window, i, time.Unix(0, q.t).UTC(), q.ip, g.allowed, time.Unix(0, g.at).UTC(), g.ip, want)
			}
		}
		if got := rep.Sets[0].Refused; got != refused {
			t.Fatalf("round %d: report says %d refused, the limiter %d", round, got, refused)
		}
		if got := rep.Sets[0].Rules[0].Refused; got != refused {
			t.Fatalf("round %d: the rule's report says %d refused, the limiter %d", round, got, refused)
		}
	}
}

// Lines later than the window are counted as late, quoted, and decided at
// the last instant decided: the clock never goes back.
func TestLateLines(t *testing.T) {
	var at []int64
	r, err := New([]RuleFile{{Name: "t", Text: "*: 1/s per ip"}}, Options{Reorder: time.Second,
		Decided: func(_ int, when time.Time, _ ratelimit.Subject, _ *ratelimit.MultiDecision) {
			at = append(at, when.UnixNano())
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := int64(time.Second)
	for i, tm := range []int64{10 * s, 12 * s, 9 * s, 11 * s, 15 * s, 10 * s} {
		r.Add("x.log", int64(i+1), &accesslog.Entry{Time: tm, IP: []byte("192.0.2.1"), Method: []byte("GET"), Path: []byte("/")})
	}
	rep := r.Finish()
	// 10 decided when 12 arrives (window 1s); 9 is late (< 10);
	// 11 is held, then 11 and 12 decided when 15 arrives; the last 10 is
	// late (< 12).
	want := []int64{10 * s, 10 * s, 11 * s, 12 * s, 12 * s, 15 * s}
	if !slices.Equal(at, want) {
		t.Fatalf("decided at %v, want %v", at, want)
	}
	if rep.Late != 2 || len(rep.LateLines) != 2 || rep.LateLines[0].Line != 3 || rep.LateLines[1].Line != 6 || !strings.Contains(rep.LateLines[0].Error, "1s before a decided line") {
		t.Fatalf("late: %d %+v", rep.Late, rep.LateLines)
	}
}

// An address is keyed as the middleware keys it: IPv6 by its /64, an
// IPv4-mapped address as IPv4; a user is never taken for an address.
func TestKeys(t *testing.T) {
	r, err := New([]RuleFile{{Name: "t", Text: "*: 1/s per ip"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for in, want := range map[string]string{
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"192.0.2.1":            "192.0.2.1",
		"fe80::1%eth0":         "fe80::/64",
		"host.example":         "host.example",
		"-":                    "",
	} {
		if got := r.ipKey([]byte(in)); got != want {
			t.Errorf("ipKey(%q) = %q, want %q", in, got, want)
		}
		if got := r.ipKey([]byte(in)); got != want { // cached
			t.Errorf("ipKey(%q) again = %q, want %q", in, got, want)
		}
	}
	if got := r.userKey([]byte("2001:db8:1:2:3:4:5:6")); got != "2001:db8:1:2:3:4:5:6" {
		t.Errorf("a user was keyed as %q", got)
	}
}

func TestBadRules(t *testing.T) {
	if _, err := New([]RuleFile{{Name: "bad.rules", Text: "GET /x 1/s per ip"}}, Options{}); err == nil || !strings.Contains(err.Error(), "bad.rules") {
		t.Fatalf("got %v", err)
	}
	if _, err := New([]RuleFile{{Name: "r", Text: "*: 1/s per ip"}}, Options{Reorder: -1}); err == nil {
		t.Fatal("a negative window accepted")
	}
}

// Memory follows the bounds, not the log: a flood of distinct clients and
// paths leaves the interning tables, the route table and the refused keys
// counted within their bounds, and the distinct count flagged as a lower
// bound once the refused keys overflow.
func TestBoundedMemory(t *testing.T) {
	r, err := New([]RuleFile{{Name: "t", Text: "*: 1/h burst 1 per ip\n*: 1/h burst 1 per user"}}, Options{MaxTracked: 100, MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := maxKeys + maxRoutes + 5000
	for i := range n {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		v6 := fmt.Sprintf("2001:db8:%x::1", i)
		for _, a := range []string{ip, v6} {
			e := accesslog.Entry{Time: int64(i), IP: []byte(a), User: []byte("u" + a), Method: []byte("GET"), Path: []byte(fmt.Sprint("/p/", i))}
			r.Add("t", int64(i), &e)
			r.Add("t", int64(i), &e) // refused: the second in an hour
		}
		if len(r.keys) > maxKeys || len(r.groups) > maxKeys || len(r.routes) > maxRoutes {
			t.Fatalf("after %d lines: %d keys, %d groups, %d routes", i, len(r.keys), len(r.groups), len(r.routes))
		}
	}
	rep := r.Finish()
	for _, rr := range rep.Sets[0].Rules {
		if rr.DistinctKeys > 100 || !rr.DistinctAtLeast || rr.Refused != int64(2*n) {
			t.Fatalf("%s: %d distinct (lower bound %v), %d refused of %d", rr.Name, rr.DistinctKeys, rr.DistinctAtLeast, rr.Refused, rr.Seen)
		}
	}
}
