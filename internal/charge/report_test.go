package charge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// recorder is an observer that keeps every decision event.
type recorder struct {
	mu     sync.Mutex
	events []ratelimit.Event
}

func (r *recorder) Observe(e ratelimit.Event) {
	if e.Kind != ratelimit.EventDecision {
		return
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) take() []ratelimit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func observedBucket(t *testing.T, name string, capacity int, clock ratelimit.Clock, o ratelimit.Observer) *ratelimit.TokenBucket {
	t.Helper()
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerHour(1), capacity,
		ratelimit.WithClock(clock), ratelimit.WithName(name), ratelimit.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// The reproduction at the core: a per-ip limit of burst 3 and a
// global one of burst 100, six requests of cost 1. Each request reports
// one event per limit, as AllowAll does: the global limit allowed all six,
// the per-ip one three.
func TestTakeReportsOneEventPerLimit(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rec := &recorder{}
	ip := observedBucket(t, "per-ip", 3, clock, rec)
	global := observedBucket(t, "global", 100, clock, rec)
	limits := []Limit{{Taker: ip, Key: "10.0.0.1"}, {Taker: global}}
	for i := range 6 {
		ok, ds, _ := take(t, 1, limits...)
		if ok != (i < 3) {
			t.Fatalf("request %d: allowed %v", i, ok)
		}
		ev := rec.take()
		if len(ev) != 2 || ev[0].Limiter != "per-ip" || ev[1].Limiter != "global" {
			t.Fatalf("request %d: events %+v, want one per-ip then one global", i, ev)
		}
		for j, e := range ev {
			if e.N != 1 || e.Allowed != ds[j].Allowed || e.Remaining != ds[j].Remaining {
				t.Errorf("request %d: event %+v, decision %+v", i, e, ds[j])
			}
		}
		if ev[0].Allowed != (i < 3) || !ev[1].Allowed {
			t.Errorf("request %d: per-ip allowed %v, global allowed %v", i, ev[0].Allowed, ev[1].Allowed)
		}
	}
	if AllowAllParity := countAllowAll(t); AllowAllParity != [2]int{3, 6} {
		t.Errorf("AllowAll allowed per-ip, global: %v; want 3, 6", AllowAllParity)
	}
}

// countAllowAll runs the same six requests through AllowAll, the path
// without a cost, and counts the allowed events per limit.
func countAllowAll(t *testing.T) [2]int {
	clock := ratelimit.NewManualClock(t0)
	c := &ratelimit.Counter{}
	ip := observedBucket(t, "per-ip", 3, clock, c)
	global := observedBucket(t, "global", 100, clock, c)
	for range 6 {
		if _, err := ratelimit.AllowAll(context.Background(), 1, []ratelimit.LimiterKey{{Limiter: ip, Key: "10.0.0.1"}, {Limiter: global}}); err != nil {
			t.Fatal(err)
		}
	}
	return [2]int{int(c.Get("per-ip").Allowed), int(c.Get("global").Allowed)}
}

// A key whose room came back between the peek and the booking (its
// probing booking allowed, given back, and taken again) is reported once.
func TestTakeReportsRefillingKeyOnce(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	rec := &recorder{}
	a := observedBucket(t, "a", 10, clock, rec)
	tb := observedBucket(t, "b", 4, clock, rec)
	b := &between{TokenBucket: tb}
	other, _ := tb.Take(context.Background(), "k", 3)
	rec.take()
	b.after = func() { other.Cancel() } // b: 1 left at the peek, 4 after
	ok, ds, _ := take(t, 2, Limit{Taker: a, Key: "k"}, Limit{Taker: b, Key: "k"})
	if !ok {
		t.Fatal("denied")
	}
	ev := rec.take()
	if len(ev) != 2 || ev[0].Limiter != "a" || ev[1].Limiter != "b" {
		t.Fatalf("events %+v, want one of a then one of b", ev)
	}
	if !ev[1].Allowed || ev[1].N != 2 || ev[1].Remaining != ds[1].Remaining || ds[1].Remaining != 2 {
		t.Errorf("b's event %+v, decision %+v", ev[1], ds[1])
	}
}

// On random requests of random cost under random limits and advances of
// the clock, every Take reports exactly one event per limit, of n events,
// saying what that limit decided (ds[i]); and as many allowed events as
// AllowAll would report, run on twin limiters side by side.
func TestTakeReportsPropertyRandom(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clock := ratelimit.NewManualClock(t0)
			rec := &recorder{}
			twin := &ratelimit.Counter{}
			k := 1 + rng.IntN(3)
			var limits []Limit
			var pairs []ratelimit.LimiterKey
			for j := range k {
				name := fmt.Sprint("l", j)
				capacity := 3 + rng.IntN(4)
				limits = append(limits, Limit{Taker: observedBucket(t, name, capacity, clock, rec), Key: "k"})
				pairs = append(pairs, ratelimit.LimiterKey{Limiter: observedBucket(t, name, capacity, clock, twin), Key: "k"})
			}
			mine := map[string][2]int{}
			for step := range 60 {
				if rng.IntN(3) == 0 {
					clock.Advance(time.Duration(rng.IntN(3600)) * time.Second)
				}
				n := 1 + rng.IntN(3)
				ok, ds, res := take(t, n, limits...)
				if _, err := ratelimit.AllowAll(context.Background(), n, pairs); err != nil && ok {
					t.Fatal(err)
				}
				ev := rec.take()
				if len(ev) != k {
					t.Fatalf("step %d: %d events for %d limits: %+v", step, len(ev), k, ev)
				}
				for j, e := range ev {
					if e.Limiter != fmt.Sprint("l", j) || e.N != n || e.Allowed != ds[j].Allowed || (ok && !e.Allowed) {
						t.Fatalf("step %d: event %d %+v, decision %+v, request allowed %v", step, j, e, ds[j], ok)
					}
					c := mine[e.Limiter]
					if e.Allowed {
						c[0]++
					} else {
						c[1]++
					}
					mine[e.Limiter] = c
				}
				if ok && rng.IntN(2) == 0 {
					New(res, ds, nil).Settle(rng.IntN(2 * n))
				}
			}
			for j := range k {
				name := fmt.Sprint("l", j)
				got, want := mine[name], twin.Get(name)
				if int64(got[0]+got[1]) != want.Allowed+want.Denied {
					t.Errorf("%s: %v events, AllowAll %+v", name, got, want)
				}
			}
		})
	}
}
