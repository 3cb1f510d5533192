package replay

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
)

// Suggest's answers, checked by replaying them through the rules as the
// replay command would: the share refused at the burst suggested is at
// most the target, one less exceeds it; the burst said to refuse nothing
// refuses nothing, and one less refuses something. Random traces (bursty
// clients, out of order), rates and targets, shares of requests and of
// keys.
func TestSuggestVerifiedByReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for round := range 40 {
		tr, err := NewTrace(ratelimit.PerIP, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var lines []accesslog.Entry
		tm := base
		for range 300 + rng.IntN(700) {
			tm += rng.Int64N(int64(50 * time.Millisecond))
			at := tm - rng.Int64N(int64(time.Second)) // out of order
			ip := fmt.Sprintf("192.0.2.%d", rng.IntN(1+rng.IntN(8)))
			e := accesslog.Entry{Time: at, IP: []byte(ip), Method: []byte("GET"), Path: []byte("/")}
			lines = append(lines, e)
			tr.Add("t", 0, &e)
		}
		rate := ratelimit.Rate{N: 1 + rng.Int64N(20), Period: time.Duration(1+rng.IntN(5)) * time.Second}
		targets := []float64{0, 0.001, 0.01, 0.05, 0.2}
		ofKeys := round%2 == 1
		rows, err := tr.Suggest([]ratelimit.Rate{rate}, targets, ofKeys)
		if err != nil {
			t.Fatal(err)
		}
		row := rows[0]
		// The rules path: the same trace, in time order (a window as wide
		// as the disorder), through a rule of that rate and burst.
		replayed := func(burst int) (refused, keys int64) {
			if burst == 0 {
				return int64(tr.Requests()), int64(tr.Keys())
			}
			build := func(_ string, opts ...ratelimit.Option) (*ratelimit.Rules, error) {
				return ratelimit.NewRules([]ratelimit.Rule{{Class: "*", Rate: rate, Burst: burst, Scope: ratelimit.PerIP}}, opts...)
			}
			r, err := New([]RuleFile{{Name: "s"}}, Options{Build: build, Reorder: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i := range lines {
				r.Add("t", int64(i), &lines[i])
			}
			rep := r.Finish()
			if rep.Late != 0 {
				t.Fatalf("%d late", rep.Late)
			}
			return rep.Sets[0].Refused, rep.Sets[0].Rules[0].DistinctKeys
		}
		share := func(burst int) float64 {
			req, keys := replayed(burst)
			if ofKeys {
				return float64(keys) / float64(tr.Keys())
			}
			return float64(req) / float64(tr.Requests())
		}
		if s := share(row.NoRefusal); s != 0 {
			t.Fatalf("round %d: burst %d said to refuse nothing refuses %v", round, row.NoRefusal, s)
		}
		if s := share(row.NoRefusal - 1); s == 0 {
			t.Fatalf("round %d: burst %d, one less than the no-refusal burst, refuses nothing", round, row.NoRefusal-1)
		}
		for _, c := range row.Cells {
			if s := share(c.At.Burst); s > c.Target {
				t.Fatalf("round %d (%v, target %v): burst %d refuses %v", round, rate, c.Target, c.At.Burst, s)
			}
			if req, _ := replayed(c.At.Burst); req != c.At.Refused {
				t.Fatalf("round %d: suggest counts %d refused at burst %d, the replay %d", round, c.At.Refused, c.At.Burst, req)
			}
			if c.At.Burst > 1 {
				if s := share(c.At.Burst - 1); s <= c.Target {
					t.Fatalf("round %d (%v, target %v): burst %d suggested but %d refuses only %v", round, rate, c.Target, c.At.Burst, c.At.Burst-1, s)
				}
				if c.Smaller == nil || c.Smaller.Burst != c.At.Burst-1 {
					t.Fatalf("round %d: no outcome one step smaller: %+v", round, c)
				}
			}
		}
	}
}

func TestSuggestErrors(t *testing.T) {
	if _, err := NewTrace(ratelimit.PerIP, "GET /{", 0); err == nil {
		t.Fatal("a bad class accepted")
	}
	if _, err := ParseScope("per tenant"); err == nil {
		t.Fatal("an unknown scope accepted")
	}
	tr, _ := NewTrace(ratelimit.Global, "POST /login", 0)
	tr.Add("t", 1, &accesslog.Entry{Time: 1, Method: []byte("GET"), Path: []byte("/login")})
	if _, err := tr.Suggest([]ratelimit.Rate{{N: 1, Period: time.Second}}, []float64{0.01}, false); err == nil || tr.Other != 1 {
		t.Fatalf("a trace of no request of the class: %v, %d other", err, tr.Other)
	}
	tr.Add("t", 2, &accesslog.Entry{Time: 2, Method: []byte("POST"), Path: []byte("/login?x")})
	if _, err := tr.Suggest([]ratelimit.Rate{{N: 1, Period: time.Second}}, []float64{1.5}, false); err == nil {
		t.Fatal("a target over 1 accepted")
	}
}
