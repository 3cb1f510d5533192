package httplimit

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// settling is a handler that settles its request at the actual cost the
// test names in X-Actual ("" leaves it unsettled), before writing its
// response or, with X-Settle-Late, after; it answers the Settle error's
// text, or "settled".
func settling(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("X-Actual")
		if a == "" {
			io.WriteString(w, "unsettled")
			return
		}
		actual, err := strconv.Atoi(a)
		if err != nil {
			t.Errorf("X-Actual %q", a)
		}
		late := r.Header.Get("X-Settle-Late") != ""
		if late {
			w.WriteHeader(http.StatusOK)
		}
		if err := Settle(r, actual); err != nil {
			io.WriteString(w, err.Error())
			return
		}
		io.WriteString(w, "settled")
	})
}

// Settle gives back a surplus and books an excess as debt, on the key the
// request was charged on, and the headers show the state after it.
// Timeline, a bucket of 10 refilled at 1/s, on a real server:
//
//	t0    cost 5, settled at 2: r=8 (the 3 not used come back)
//	t0    cost 3, settled at 6: r=2, t=8 (3 of debt)
//	t0    cost 3: 429, Retry-After 1 (2 left)
//	t0    cost 2, never settled: r=0; the charge counts
//	t0+1s cost 1, settled at 1 after the response was written: r=0 as
//	      charged; then nothing changes (actual == charge)
//	t0+2s cost 1, settled at 0 after the response was written: the
//	      header still says r=0, but the token comes back:
//	t0+2s cost 1: 200, r=0 (without the give-back, a 429)
//	t0+2s cost 1: 429
func TestSettleMiddleware(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 10, clock)
	srv := httptest.NewServer(Middleware(lim, WithCost(costHeader), WithHeaders(IETFHeaders|XRateLimitHeaders))(settling(t)))
	defer srv.Close()
	steps := []struct {
		at                   time.Duration
		cost, actual, late   string
		code                 int
		body                 string
		limit, remain, retry string
	}{
		{0, "5", "2", "", 200, "settled", `"default";r=8;t=2`, "8", ""},
		{0, "3", "6", "", 200, "settled", `"default";r=2;t=8`, "2", ""},
		{0, "3", "", "", 429, "too many requests, retry after 1s\n", `"default";r=2;t=1`, "2", "1"},
		{0, "2", "", "", 200, "unsettled", `"default";r=0;t=10`, "0", ""},
		{time.Second, "1", "1", "y", 200, "settled", `"default";r=0;t=10`, "0", ""},
		{2 * time.Second, "1", "0", "y", 200, "settled", `"default";r=0;t=10`, "0", ""},
		{2 * time.Second, "1", "", "", 200, "unsettled", `"default";r=0;t=10`, "0", ""},
		{2 * time.Second, "1", "", "", 429, "too many requests, retry after 1s\n", `"default";r=0;t=1`, "0", "1"},
	}
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		h := []string{"X-Cost", s.cost}
		if s.actual != "" {
			h = append(h, "X-Actual", s.actual)
		}
		if s.late != "" {
			h = append(h, "X-Settle-Late", s.late)
		}
		got := fetchFrom(t, srv, "/", h...)
		step := fmt.Sprintf("step %d (at %v cost %s actual %q)", i, s.at, s.cost, s.actual)
		if got.code != s.code || got.body != s.body {
			t.Fatalf("%s: %d %q, want %d %q", step, got.code, got.body, s.code, s.body)
		}
		if v := got.header.Get("RateLimit"); v != s.limit {
			t.Errorf("%s: RateLimit %q, want %q", step, v, s.limit)
		}
		if v := got.header.Get("X-RateLimit-Remaining"); v != s.remain {
			t.Errorf("%s: X-RateLimit-Remaining %q, want %q", step, v, s.remain)
		}
		if v := got.header.Get("Retry-After"); v != s.retry {
			t.Errorf("%s: Retry-After %q, want %q", step, v, s.retry)
		}
	}
}

// A debt really delays what follows by exactly its cost: a bucket of 4
// refilled at 1/s, a request charged 1 and settled at 7 (6 of debt: the
// bucket is 3 below empty) lets the next one-event request through 4s
// later, not 1ns before.
func TestSettleDebtDelaysExactly(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	lim := tokenBucket(t, ratelimit.PerSecond(1), 4, clock)
	h := Middleware(lim, WithCost(costHeader))(settling(t))
	if w := serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "1", "X-Actual", "7"); w.Code != 200 || w.Body.String() != "settled" {
		t.Fatalf("settle: %d %q", w.Code, w.Body.String())
	}
	w := serve(h, "GET", "/", "192.0.2.1:1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "4" {
		t.Fatalf("after the debt: %d, Retry-After %q, want 429 after 4s", w.Code, w.Header().Get("Retry-After"))
	}
	clock.Advance(4*time.Second - 1)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 429 {
		t.Fatalf("1ns before the debt is paid: %d", w.Code)
	}
	clock.Advance(1)
	if w := serve(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("when the debt is paid: %d", w.Code)
	}
}

// hidden is a limiter that cannot book for a settlement: it hides the
// Take of the limiter inside.
type hidden struct{ ratelimit.Limiter }

// Settle says what it cannot do, and changes nothing it should not.
func TestSettleErrors(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	errOf := func(h func(http.Handler) http.Handler, header ...string) string {
		t.Helper()
		var got error
		called := false
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			got = Settle(r, 1)
			if errors.Is(got, ratelimit.ErrCannotSettle) {
				return
			}
			t.Errorf("Settle: %v, want an error matching ErrCannotSettle", got)
		})
		serve(h(inner), "GET", "/", "192.0.2.1:1", header...)
		if !called {
			t.Fatal("the handler did not run")
		}
		return got.Error()
	}
	type mw = func(http.Handler) http.Handler
	cases := []struct {
		name   string
		mw     mw
		header []string
		want   string
	}{
		{"no middleware", func(h http.Handler) http.Handler { return h }, nil,
			"httplimit: nothing to settle: the request went through no middleware with WithCost, or it was exempt or let through unlimited by WithFailOpen"},
		{"without WithCost", Middleware(tokenBucket(t, ratelimit.PerSecond(1), 5, clock)), nil,
			"httplimit: nothing to settle: the request went through no middleware with WithCost, or it was exempt or let through unlimited by WithFailOpen"},
		{"no Taker", Middleware(hidden{tokenBucket(t, ratelimit.PerSecond(1), 5, clock)}, WithCost(costHeader)), nil,
			"httplimit: nothing to settle: the middleware's limiter cannot book for a settlement (it is no ratelimit.Taker)"},
		{"rules without a Taker", RulesMiddleware(mustRulesOf(t, ratelimit.Rule{Class: "*", Rate: ratelimit.PerSecond(1), Scope: ratelimit.Global,
			Limiter: hidden{tokenBucket(t, ratelimit.PerSecond(1), 1, clock)}}), WithCost(costHeader)), nil,
			"httplimit: nothing to settle: a limiter of the request's rules cannot book for a settlement (it is no ratelimit.Taker)"},
		{"free", Middleware(tokenBucket(t, ratelimit.PerSecond(1), 5, clock), WithCost(costHeader)), []string{"X-Cost", "0"},
			"httplimit: nothing to settle: the request cost 0, so nothing was booked"},
		{"free under rules", RulesMiddleware(mustRules(t, "*: 5/s global"), WithCost(costHeader)), []string{"X-Cost", "0"},
			"httplimit: nothing to settle: the request cost 0, so nothing was booked"},
		{"exempt", Middleware(tokenBucket(t, ratelimit.PerSecond(1), 5, clock), WithCost(costHeader), WithExempt(netip.MustParsePrefix("192.0.2.0/24"))), nil,
			"httplimit: nothing to settle: the request went through no middleware with WithCost, or it was exempt or let through unlimited by WithFailOpen"},
	}
	for _, c := range cases {
		if got := errOf(c.mw, c.header...); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}

	// A negative actual settles nothing, and the booking can still be
	// settled; a second Settle is refused. The bucket shows each step.
	lim := tokenBucket(t, ratelimit.PerSecond(1), 5, clock)
	var errs []error
	h := Middleware(lim, WithCost(costHeader))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		errs = append(errs, Settle(r, -1))
		if d, _ := lim.AllowN(r.Context(), "192.0.2.1", 0); d.Remaining != 2 {
			t.Errorf("after Settle(-1): %d left, want 2 (charged 3)", d.Remaining)
		}
		errs = append(errs, Settle(r, 1), Settle(r, 2))
	}))
	w := serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "3")
	if len(errs) != 3 || !errors.Is(errs[0], ratelimit.ErrNegativeN) || errs[1] != nil || !errors.Is(errs[2], ratelimit.ErrSettled) {
		t.Errorf("Settle(-1), Settle(1), Settle(2): %v", errs)
	}
	if d, _ := lim.AllowN(t.Context(), "192.0.2.1", 0); d.Remaining != 4 || w.Header().Get("RateLimit") != `"default";r=4;t=1` {
		t.Errorf("settled at 1: %d left, RateLimit %q; want 4", d.Remaining, w.Header().Get("RateLimit"))
	}
}

func mustRulesOf(t *testing.T, rules ...ratelimit.Rule) *ratelimit.Rules {
	t.Helper()
	rs, err := ratelimit.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Under RulesMiddleware a request settles every rule it was charged
// under, and the headers show the strictest after the settlement. Per-IP
// burst 10 and global burst 6, both refilled at 1/s:
//
//	t0    cost 4, settled at 1: ip r=9, global r=5; global reported
//	t0    cost 5, settled at 9: ip r=0, global r=0 and 4 below empty
//	t0+5s cost 2: ip has 5, global 1: denied by global, Retry-After 1,
//	      and nothing booked on ip.
func TestSettleRules(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		GET /items: 10/10s per ip as ip
		*:          6/6s   global as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(RulesMiddleware(rules, WithCost(costHeader))(settling(t)))
	defer srv.Close()
	ip := rules.For("GET /items").Rules()[0].Limiter
	global := rules.For("GET /items").Rules()[1].Limiter
	left := func(l ratelimit.Limiter, key string) int {
		d, err := l.AllowN(t.Context(), key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	got := fetchFrom(t, srv, "/items", "X-Cost", "4", "X-Actual", "1")
	if got.code != 200 || got.header.Get("RateLimit") != `"global";r=5;t=1` || left(ip, "127.0.0.1") != 9 || left(global, "") != 5 {
		t.Fatalf("cost 4 settled at 1: %d %q, ip %d, global %d", got.code, got.header.Get("RateLimit"), left(ip, "127.0.0.1"), left(global, ""))
	}
	got = fetchFrom(t, srv, "/items", "X-Cost", "5", "X-Actual", "9")
	if got.code != 200 || got.header.Get("RateLimit") != `"global";r=0;t=10` || left(ip, "127.0.0.1") != 0 || left(global, "") != 0 {
		t.Fatalf("cost 5 settled at 9: %d %q, ip %d, global %d", got.code, got.header.Get("RateLimit"), left(ip, "127.0.0.1"), left(global, ""))
	}
	clock.Advance(5 * time.Second)
	got = fetchFrom(t, srv, "/items", "X-Cost", "2")
	if got.code != 429 || got.header.Get("Retry-After") != "1" {
		t.Fatalf("cost 2 with global at 1: %d, Retry-After %q", got.code, got.header.Get("Retry-After"))
	}
	if left(ip, "127.0.0.1") != 5 {
		t.Errorf("the denied request booked on ip: %d left, want 5", left(ip, "127.0.0.1"))
	}
}

// The bound a user relies on, through the middleware: a token bucket of
// capacity C refilled one event per T admits requests so that, for any
// requests i before j that it allowed, with each request counted at its
// settled cost (its charge if never settled) except j, counted at its
// charge,
//
//	Σ_{k=i}^{j-1} settled_k + charge_j ≤ C + ⌊(t_j − t_i)/T⌋.
//
// Proof: the bucket's theoretical arrival time after request k is at
// least t_i plus the settled costs from i to k, times T (each booking
// moves it by its charge, each settlement by the difference, and a free
// request not at all); request j is allowed only if that time, plus its
// charge times T, is at most t_j + C·T. The last request's excess is not
// in the bound: it is booked after the request was let in, as debt the
// next ones wait for (which the bound of those next requests covers).
//
// Requests come through a real server in random order of cost (0 to C+1,
// and -1 now and then), with random settlements (below, at, above the
// charge, none, after the response was written) and random clock moves,
// on two keys; a seeded run is reproducible.
func TestSettleKeepsBound(t *testing.T) {
	const C, T = 8, 250 * time.Millisecond
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			clock := ratelimit.NewManualClock(t0)
			lim := tokenBucket(t, ratelimit.Per(1, T), C, clock)
			h := Middleware(lim, WithCost(costHeader), WithKey(ByHeader("X-Key")), withLog(func(string) {}))(settling(t))
			srv := httptest.NewServer(h)
			defer srv.Close()
			type event struct {
				at             time.Time
				charge, settle int
			}
			allowed := map[string][]event{}
			var denials, settled, debts int
			for range 300 {
				clock.Advance(time.Duration(rng.Int64N(int64(3 * T))))
				key := []string{"a", "b"}[rng.IntN(2)]
				cost := rng.IntN(C + 2)
				if rng.IntN(20) == 0 {
					cost = -1
				}
				actual := -2 // not settled
				switch k := rng.IntN(5); {
				case cost < 0:
				case k <= 1:
					actual = rng.IntN(cost + 1) // below or at
				case k == 2:
					actual = cost + rng.IntN(2*C) // at or above
				}
				header := []string{"X-Key", key, "X-Cost", strconv.Itoa(cost)}
				if actual >= 0 {
					header = append(header, "X-Actual", strconv.Itoa(actual))
					if rng.IntN(3) == 0 {
						header = append(header, "X-Settle-Late", "y")
					}
				}
				got := fetchFrom(t, srv, "/", header...)
				switch {
				case cost < 0:
					if got.code != 500 {
						t.Fatalf("cost %d: %d", cost, got.code)
					}
					continue
				case cost > C:
					if got.code != 429 || got.header.Get("Retry-After") != "" {
						t.Fatalf("cost %d: %d", cost, got.code)
					}
					continue
				case got.code == 429:
					denials++
					continue
				case got.code != 200:
					t.Fatalf("cost %d: %d %q", cost, got.code, got.body)
				}
				if cost == 0 {
					continue // free: let through without a decision, it takes nothing
				}
				e := event{at: clock.Now(), charge: cost, settle: cost}
				if actual >= 0 && cost > 0 {
					if got.body != "settled" {
						t.Fatalf("cost %d settled at %d: %q", cost, actual, got.body)
					}
					e.settle = actual
					settled++
					if actual > cost {
						debts++
					}
				}
				allowed[key] = append(allowed[key], e)
			}
			for key, es := range allowed {
				for j := range es {
					sum := es[j].charge
					for i := j - 1; i >= 0; i-- {
						sum += es[i].settle
						if room := C + int(es[j].at.Sub(es[i].at)/T); sum > room {
							t.Fatalf("key %s: requests %d..%d cost %d in %v, more than %d", key, i, j, sum, es[j].at.Sub(es[i].at), room)
						}
					}
				}
			}
			// The run must have exercised what it checks.
			if denials == 0 || settled == 0 || debts == 0 {
				t.Fatalf("denials %d, settlements %d, debts %d: the run checks little", denials, settled, debts)
			}
		})
	}
}

// Eight clients at once through RulesMiddleware, with random costs and
// settlements, the clock standing still: no booking is lost and none is
// counted twice. Each rule's bucket ends having consumed (ResetAfter over
// the refill interval) at least what the allowed requests were settled at
// (a surplus comes back only while its booking is the key's latest) and
// at most the larger of charge and settlement, summed.
func TestSettleConcurrent(t *testing.T) {
	const T = time.Millisecond
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		GET /items: 1000/s burst 400 per ip as ip
		*:          1000/s burst 300 global as global
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(RulesMiddleware(rules, WithCost(costHeader))(settling(t)))
	defer srv.Close()
	type tally struct{ settled, most, denied int }
	results := make(chan tally, 8)
	for g := range 8 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var tl tally
			for range 40 {
				cost := 1 + rng.IntN(10)
				actual := rng.IntN(20)
				h := []string{"X-Cost", strconv.Itoa(cost)}
				settle := rng.IntN(4) != 0
				if settle {
					h = append(h, "X-Actual", strconv.Itoa(actual))
				}
				got := fetchFrom(t, srv, "/items", h...)
				if got.code != 200 {
					tl.denied += cost
					continue
				}
				if !settle {
					actual = cost
				} else if got.body != "settled" {
					t.Errorf("settle: %q", got.body)
				}
				tl.settled += actual
				tl.most += max(cost, actual)
			}
			results <- tl
		}()
	}
	var sum tally
	for range 8 {
		tl := <-results
		sum.settled += tl.settled
		sum.most += tl.most
		sum.denied += tl.denied
	}
	for i, key := range []string{"127.0.0.1", ""} {
		lim := rules.For("GET /items").Rules()[i].Limiter
		d, _ := lim.AllowN(t.Context(), key, 0)
		used := int(d.ResetAfter / T)
		if used < sum.settled || used > sum.most+sum.denied {
			t.Errorf("rule %d: consumed %d, want between %d (settled) and %d", i, used, sum.settled, sum.most+sum.denied)
		}
	}
	if sum.settled == 0 || sum.denied == 0 {
		t.Fatalf("settled %d, denied %d: the run checks little", sum.settled, sum.denied)
	}
}

// A shadow rule is charged the cost, as enforcement would have charged
// it, and keeps that charge when the enforced rules settle; a class of
// shadow rules alone has nothing to settle.
func TestSettleShadowRules(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rules, err := ratelimit.ParseRules(`
		GET /a: 10/10s per ip as ip
		GET /a: 10/10s per ip shadow as trial
		GET /b: 10/10s per ip shadow as only-shadow
	`, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(RulesMiddleware(rules, WithCost(costHeader))(settling(t)))
	defer srv.Close()
	got := fetchFrom(t, srv, "/a", "X-Cost", "4", "X-Actual", "1")
	if got.code != 200 || got.body != "settled" || got.header.Get("RateLimit") != `"ip";r=9;t=1` {
		t.Fatalf("/a: %d %q %q", got.code, got.body, got.header.Get("RateLimit"))
	}
	set := rules.For("GET /a").Rules()
	trial := set[1].Limiter.(*ratelimit.Shadow).Limiter()
	if d, _ := trial.AllowN(t.Context(), "127.0.0.1", 0); d.Remaining != 6 {
		t.Errorf("the shadow rule has %d left, want 6: charged 4, not settled", d.Remaining)
	}
	got = fetchFrom(t, srv, "/b", "X-Cost", "4", "X-Actual", "1")
	if got.code != 200 || got.body != "httplimit: nothing to settle: the request's rules are all shadow rules, which do not settle" || got.header.Get("RateLimit") != "" {
		t.Errorf("/b: %d %q %q", got.code, got.body, got.header.Get("RateLimit"))
	}
}

// Every algorithm of package ratelimit can be settled through the
// middlewares: limit 5, a request charged 3 and settled at 1 leaves room
// for 4 more, and not 5; through RulesMiddleware with two rules of the
// algorithm, a request the second rule denies books nothing under the
// first, and one settled at 0 gives its whole charge back. (A leaky
// bucket lets events through only when its queue is empty: the test
// waits for the settled event's slot to pass.)
func TestSettleEveryAlgorithm(t *testing.T) {
	rate := ratelimit.Per(5, 5*time.Second)
	algos := []struct {
		name  string
		make  func(clock ratelimit.Clock) (ratelimit.Limiter, error)
		drain bool // a queue: wait for what was booked to depart
	}{
		{"TokenBucket", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(rate, 5, ratelimit.WithClock(c))
		}, false},
		{"LeakyBucket", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewLeakyBucket(rate, 5, ratelimit.WithClock(c))
		}, true},
		{"FixedWindow", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewFixedWindow(rate, ratelimit.WithClock(c))
		}, false},
		{"SlidingLog", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingLog(rate, ratelimit.WithClock(c))
		}, false},
		{"SlidingWindowCounter", func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewSlidingWindowCounter(rate, ratelimit.WithClock(c))
		}, false},
	}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			clock := ratelimit.NewManualClock(t0)
			mk := func() ratelimit.Limiter {
				l, err := a.make(clock)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := l.(ratelimit.Taker); !ok {
					t.Fatalf("%T is no Taker", l)
				}
				return l
			}
			check := func(name string, h http.Handler, path string) {
				t.Helper()
				steps := []struct {
					cost, actual string
					code         int
				}{{"3", "1", 200}, {"5", "", 429}, {"4", "", 200}, {"1", "", 429}}
				for i, s := range steps {
					if i == 2 && a.drain {
						clock.Advance(time.Second)
					}
					hdr := []string{"X-Cost", s.cost}
					if s.actual != "" {
						hdr = append(hdr, "X-Actual", s.actual)
					}
					if w := serve(h, "GET", path, "192.0.2.1:1", hdr...); w.Code != s.code {
						t.Errorf("%s step %d (cost %s): %d %q, want %d", name, i, s.cost, w.Code, w.Body.String(), s.code)
					}
				}
			}
			check("Middleware", Middleware(mk(), WithCost(costHeader))(settling(t)), "/")

			first, second := mk(), mk()
			rules := mustRulesOf(t,
				ratelimit.Rule{Class: "*", Name: "first", Rate: rate, Burst: 5, Scope: ratelimit.PerIP, Limiter: first},
				ratelimit.Rule{Class: "*", Name: "second", Rate: rate, Burst: 5, Scope: ratelimit.Global, Limiter: second})
			h := RulesMiddleware(rules, WithCost(costHeader))(settling(t))
			if w := serve(h, "GET", "/", "192.0.2.9:1", "X-Cost", "4"); w.Code != 200 { // second: 1 left
				t.Fatalf("rules, another client: %d", w.Code)
			}
			if w := serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "2"); w.Code != 429 {
				t.Fatalf("rules, cost 2 with 1 left on second: %d", w.Code)
			}
			if d, _ := first.AllowN(t.Context(), "192.0.2.1", 0); d.Remaining != 5 {
				t.Errorf("rules: first has %d left after a denial by second, want 5", d.Remaining)
			}
			if a.drain {
				clock.Advance(4 * time.Second)
			}
			before, _ := second.AllowN(t.Context(), "", 0)
			w := serve(h, "GET", "/", "192.0.2.1:1", "X-Cost", "1", "X-Actual", "0")
			if d, _ := second.AllowN(t.Context(), "", 0); w.Code != 200 || w.Body.String() != "settled" || d.Remaining != before.Remaining {
				t.Errorf("rules: cost 1 settled at 0: %d %q, second has %d left, want %d", w.Code, w.Body.String(), d.Remaining, before.Remaining)
			}
		})
	}
}
