package replay

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
)

// SuggestAlgorithm's answers for the leaky bucket and the windows, checked
// by replaying them through the rules as the replay command would, with
// the algorithm's own limiter: the share refused at the limit suggested is
// at most the target and one less exceeds it; the limit said to refuse
// nothing refuses nothing and one less refuses something; the leaky
// bucket's unmet cells are not met at capacity 1 nor at a larger random
// capacity. Random traces (bursty clients, out of order), rates, windows
// and targets, shares of requests and of keys.
func TestSuggestAlgorithmVerifiedByReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for round := range 80 {
		a := Algorithm(1 + round%4)
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
		rate := ratelimit.Rate{N: 1 + rng.Int64N(40), Period: time.Duration(1+rng.IntN(5)) * time.Second}
		window := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		targets := []float64{0, 0.001, 0.01, 0.05, 0.2, 0.6}
		ofKeys := round/4%2 == 1
		rows, err := tr.SuggestAlgorithm(a, []ratelimit.Rate{rate}, []time.Duration{window}, targets, ofKeys)
		if err != nil {
			t.Fatal(err)
		}
		row := rows[0]
		// The rule of limit n: a bucket of capacity n at rate, or n per
		// window.
		ruleOf := func(n int) ratelimit.Rate {
			if a.Windowed() {
				return ratelimit.Rate{N: int64(n), Period: window}
			}
			return rate
		}
		replayed := func(n int) (refused, keys int64) {
			if n == 0 {
				return int64(tr.Requests()), int64(tr.Keys())
			}
			r := ruleOf(n)
			build := func(_ string, opts ...ratelimit.Option) (*ratelimit.Rules, error) {
				var lim ratelimit.Limiter
				var err error
				switch a {
				case LeakyBucket:
					lim, err = ratelimit.NewLeakyBucket(r, n, opts...)
				case FixedWindow:
					lim, err = ratelimit.NewFixedWindow(r, opts...)
				case SlidingLog:
					lim, err = ratelimit.NewSlidingLog(r, opts...)
				case SlidingCounter:
					lim, err = ratelimit.NewSlidingWindowCounter(r, opts...)
				}
				if err != nil {
					return nil, err
				}
				return ratelimit.NewRules([]ratelimit.Rule{{Class: "*", Rate: r, Burst: n, Scope: ratelimit.PerIP, Limiter: lim}}, opts...)
			}
			rp, err := New([]RuleFile{{Name: "s"}}, Options{Build: build, Reorder: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer rp.Close()
			for i := range lines {
				rp.Add("t", int64(i), &lines[i])
			}
			rep := rp.Finish()
			if rep.Late != 0 {
				t.Fatalf("%d late", rep.Late)
			}
			return rep.Sets[0].Refused, rep.Sets[0].Rules[0].DistinctKeys
		}
		share := func(n int) float64 {
			req, keys := replayed(n)
			if ofKeys {
				return float64(keys) / float64(tr.Keys())
			}
			return float64(req) / float64(tr.Requests())
		}
		name := fmt.Sprintf("round %d (%v, %v, window %v)", round, a, rate, window)
		if a == LeakyBucket {
			if got, want := row.NoRefusal == 1, share(1) == 0; got != want {
				t.Fatalf("%s: no-refusal capacity %d, capacity 1 refuses %v", name, row.NoRefusal, share(1))
			}
			big := 2 + rng.IntN(50)
			for _, c := range row.Cells {
				s := share(1)
				if c.Unmet {
					if s <= c.Target || share(big) <= c.Target {
						t.Fatalf("%s, target %v: unmet, but capacity 1 refuses %v, %d %v", name, c.Target, s, big, share(big))
					}
					continue
				}
				if c.At.Burst != 1 || s > c.Target {
					t.Fatalf("%s, target %v: capacity %d suggested, capacity 1 refuses %v", name, c.Target, c.At.Burst, s)
				}
			}
			continue
		}
		if s := share(row.NoRefusal); s != 0 {
			t.Fatalf("%s: limit %d said to refuse nothing refuses %v", name, row.NoRefusal, s)
		}
		if row.Rate.N != int64(row.NoRefusal) || row.Rate.Period != window {
			t.Fatalf("%s: row rate %v, want %d per %v", name, row.Rate, row.NoRefusal, window)
		}
		if s := share(row.NoRefusal - 1); s == 0 {
			t.Fatalf("%s: limit %d, one less than the no-refusal limit, refuses nothing", name, row.NoRefusal-1)
		}
		for _, c := range row.Cells {
			if c.Unmet {
				t.Fatalf("%s, target %v: unmet", name, c.Target)
			}
			if s := share(c.At.Burst); s > c.Target {
				t.Fatalf("%s, target %v: limit %d refuses %v", name, c.Target, c.At.Burst, s)
			}
			if req, keys := replayed(c.At.Burst); req != c.At.Refused || keys != c.At.KeysRefused {
				t.Fatalf("%s: suggest counts %d refused (%d keys) at limit %d, the replay %d (%d)", name, c.At.Refused, c.At.KeysRefused, c.At.Burst, req, keys)
			}
			if c.At.Burst > 1 {
				if s := share(c.At.Burst - 1); s <= c.Target {
					t.Fatalf("%s, target %v: limit %d suggested but %d refuses only %v", name, c.Target, c.At.Burst, c.At.Burst-1, s)
				}
				if c.Smaller == nil || c.Smaller.Burst != c.At.Burst-1 {
					t.Fatalf("%s: no outcome one step smaller: %+v", name, c)
				}
			}
		}
	}
}

func TestSuggestAlgorithmErrors(t *testing.T) {
	for _, s := range []string{"tokenbucket", "Leaky-Bucket", "fixed_window", "sliding log", "slidingcounter"} {
		if _, err := ParseAlgorithm(s); err != nil {
			t.Fatal(err)
		}
	}
	if a, _ := ParseAlgorithm("slidingcounter"); a != SlidingCounter || a.String() != "slidingcounter" {
		t.Fatalf("slidingcounter read as %v", a)
	}
	if _, err := ParseAlgorithm("gcra"); err == nil {
		t.Fatal("an unknown algorithm accepted")
	}
	tr, _ := NewTrace(ratelimit.Global, "", 0)
	tr.Add("t", 1, &accesslog.Entry{Time: 1, Method: []byte("GET"), Path: []byte("/")})
	if _, err := tr.SuggestAlgorithm(FixedWindow, nil, []time.Duration{0}, []float64{0.01}, false); err == nil {
		t.Fatal("a window of 0 accepted")
	}
	if _, err := tr.SuggestAlgorithm(SlidingLog, nil, []time.Duration{time.Second}, []float64{1}, false); err == nil {
		t.Fatal("a target of 1 accepted")
	}
	if _, err := tr.SuggestAlgorithm(LeakyBucket, []ratelimit.Rate{{N: 0, Period: time.Second}}, nil, []float64{0.01}, false); err == nil {
		t.Fatal("an invalid rate accepted")
	}
	if _, err := tr.SuggestAlgorithm(Algorithm(9), nil, nil, []float64{0.01}, false); err == nil {
		t.Fatal("an unknown algorithm accepted")
	}
}

// What the bisection relies on: for every algorithm, the requests refused
// and the keys refused do not grow with the limit (the burst, capacity or
// limit per window), and a key refused at a limit is refused at every
// smaller one. Random traces with several keys, rates and windows, limits
// 1 to 24 replayed one by one.
func TestSuggestMonotoneInLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 100 {
		a := Algorithm(round % 5)
		tr, err := NewTrace(ratelimit.PerIP, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		tm := int64(0)
		gap := 1 + rng.Int64N(int64(time.Second))
		for range 50 + rng.IntN(300) {
			tm += rng.Int64N(gap)
			e := accesslog.Entry{Time: tm, IP: []byte(fmt.Sprintf("192.0.2.%d", rng.IntN(1+rng.IntN(5)))), Method: []byte("GET"), Path: []byte("/")}
			tr.Add("t", 0, &e)
		}
		tr.sort()
		period := time.Duration(1+rng.Int64N(int64(10*time.Second))) * time.Nanosecond
		perPeriod := 1 + rng.Int64N(5)
		prev := tr.refuseAll()
		prevHit := make([]bool, tr.Keys())
		for i := range prevHit {
			prevHit[i] = true
		}
		for l := 1; l <= 24; l++ {
			rate := ratelimit.Rate{N: perPeriod, Period: period}
			if a.Windowed() {
				rate = ratelimit.Rate{N: int64(l), Period: period}
			}
			o, err := tr.ReplayAlgorithm(a, rate, l)
			if err != nil {
				t.Fatal(err)
			}
			// Which keys the limit refuses, replayed here through the same
			// limiter by way of ReplayAlgorithm on each key's own trace.
			hit := make([]bool, tr.Keys())
			for k := range tr.names {
				sub := &Trace{names: tr.names}
				for _, r := range tr.reqs {
					if int(r.key) == k {
						sub.reqs = append(sub.reqs, r)
					}
				}
				so, err := sub.ReplayAlgorithm(a, rate, l)
				if err != nil {
					t.Fatal(err)
				}
				hit[k] = so.Refused > 0
				if hit[k] && !prevHit[k] {
					t.Fatalf("round %d (%v, %v): key %d refused at limit %d, not at %d", round, a, rate, k, l, l-1)
				}
			}
			if o.Refused > prev.Refused || o.KeysRefused > prev.KeysRefused {
				t.Fatalf("round %d (%v, %v): limit %d refuses %d (%d keys), %d refuses %d (%d)", round, a, rate, l, o.Refused, o.KeysRefused, l-1, prev.Refused, prev.KeysRefused)
			}
			prev, prevHit = o, hit
		}
	}
}
