package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The global key "" lives in a shard of its own, taken by one
// compare-and-swap (internal/keystore, rule 14), but it must decide
// exactly as any other key. For every algorithm, two limiters on one
// manual clock run the same random trace, one on "" and one on "g" (with
// "a" and "b" beside them in both): Allow, AllowN, Reserve and Cancel,
// Reset, per-key overrides set and removed, sweeps and Stats. Every
// answer and error, every peek and the keys held must agree. Between some steps the
// clock stands still while goroutines call Allow on "" in the first
// limiter, with sweeps, peeks and Stats under them, and the same number
// of calls on "g" in the second, one after the other: as many must be
// allowed (no update of "" lost or doubled by a racing call or sweep).
func TestGlobalKeyLikeAnyKey(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			var lims [2]Limiter
			for i := range lims {
				lim, err := alg.new(suiteLimit, suitePeriod, clk)
				if err != nil {
					t.Fatal(err)
				}
				defer lim.Close()
				lims[i] = lim
			}
			override := func(l Limiter, key string, rate Rate, capacity int) error {
				return alg.setOverride(l.(testLimiter), key, rate, capacity)
			}
			mirrorTrace(t, clk, lims, override, uint64(len(alg.name)))
		})
	}
}

// The same for the limiters built over an algorithm: the warming bucket,
// the penalty box over a token bucket, and Fair over a token bucket, the
// tenant being "" or "g" (Fair asks its bucket on "" in both).
func TestGlobalKeyLikeAnyKeyWrapped(t *testing.T) {
	builds := []struct {
		name  string
		build func(clk Clock) (Limiter, error)
	}{
		{"WarmingBucket", func(clk Clock) (Limiter, error) {
			return NewWarmingBucket(Per(suiteLimit, suitePeriod), suiteLimit, WarmUp{Period: 2 * suitePeriod}, WithClock(clk))
		}},
		{"PenaltyBox", func(clk Clock) (Limiter, error) {
			tb, err := NewTokenBucket(Per(suiteLimit, suitePeriod), suiteLimit, WithClock(clk))
			if err != nil {
				return nil, err
			}
			return NewPenaltyBox(tb, 3, suitePeriod, 2*suitePeriod, WithClock(clk))
		}},
		{"Fair", func(clk Clock) (Limiter, error) {
			tb, err := NewTokenBucket(Per(suiteLimit, suitePeriod), suiteLimit, WithClock(clk))
			if err != nil {
				return nil, err
			}
			return NewFair(tb, Per(suiteLimit, suitePeriod), WithFairClock(clk))
		}},
	}
	for i, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			var lims [2]Limiter
			for j := range lims {
				lim, err := b.build(clk)
				if err != nil {
					t.Fatal(err)
				}
				if c, ok := lim.(interface{ Close() error }); ok {
					defer c.Close()
				}
				lims[j] = lim
			}
			mirrorTrace(t, clk, lims, nil, uint64(100+i))
		})
	}
}

// mirrorTrace runs the random trace of TestGlobalKeyLikeAnyKey on lims,
// "" on the first and "g" on the second. Reset, RemoveOverride, Sweep and
// Stats are used where the limiter has them, overrides where override is
// not nil.
func mirrorTrace(t *testing.T, clk *ManualClock, lims [2]Limiter, override func(l Limiter, key string, rate Rate, capacity int) error, seed uint64) {
	t.Helper()
	type resetter interface{ Reset(key string) }
	type remover interface{ RemoveOverride(key string) }
	type sweeper interface{ Sweep() }
	type statser interface{ Stats() Stats }
	keys := [2][3]string{{"", "a", "b"}, {"g", "a", "b"}}
	rng := rand.New(rand.NewPCG(21, seed))
	var open [][2]*Reservation
	for step := range 1500 {
		j := rng.IntN(3)
		if rng.IntN(2) == 0 {
			j = 0
		}
		k := rng.IntN(suiteLimit + 1)
		where := func() string { return fmt.Sprintf("step %d, key %q/%q", step, keys[0][j], keys[1][j]) }
		switch op := rng.IntN(20); {
		case op < 3:
			clk.Advance(time.Duration(rng.Int64N(int64(suitePeriod / suiteLimit))))
		case op < 4:
			clk.Advance(time.Duration(rng.Int64N(int64(3 * suitePeriod))))
		case op < 7:
			if a, b := lims[0].Allow(keys[0][j]), lims[1].Allow(keys[1][j]); a != b {
				t.Fatalf("%s: Allow %v and %v", where(), a, b)
			}
		case op < 10:
			a, aerr := lims[0].AllowN(t.Context(), keys[0][j], k)
			b, berr := lims[1].AllowN(t.Context(), keys[1][j], k)
			if a != b || aerr != berr {
				t.Fatalf("%s: AllowN(%d) %+v, %v and %+v, %v", where(), k, a, aerr, b, berr)
			}
		case op < 12:
			a, aerr := lims[0].Reserve(t.Context(), keys[0][j], k)
			b, berr := lims[1].Reserve(t.Context(), keys[1][j], k)
			if aerr != berr {
				t.Fatalf("%s: Reserve(%d) %v and %v", where(), k, aerr, berr)
			}
			if aerr != nil {
				break
			}
			if a.OK() != b.OK() || a.Decision() != b.Decision() || !a.TimeToAct().Equal(b.TimeToAct()) {
				t.Fatalf("%s: Reserve(%d) %v %+v and %v %+v", where(), k, a.OK(), a.Decision(), b.OK(), b.Decision())
			}
			open = append(open, [2]*Reservation{a, b})
		case op < 13:
			if len(open) > 0 {
				i := rng.IntN(len(open))
				open[i][0].Cancel()
				open[i][1].Cancel()
				open = append(open[:i], open[i+1:]...)
			}
		case op < 14:
			if r, ok := lims[0].(resetter); ok {
				r.Reset(keys[0][j])
				lims[1].(resetter).Reset(keys[1][j])
			}
		case op < 15:
			if override != nil {
				rate, capacity := Per(int64(1+rng.IntN(2*suiteLimit)), suitePeriod), 1+rng.IntN(2*suiteLimit)
				for i := range lims {
					if err := override(lims[i], keys[i][j], rate, capacity); err != nil {
						t.Fatal(err)
					}
				}
			}
		case op < 16:
			if r, ok := lims[0].(remover); ok {
				r.RemoveOverride(keys[0][j])
				lims[1].(remover).RemoveOverride(keys[1][j])
			}
		case op < 18:
			if s, ok := lims[0].(sweeper); ok {
				s.Sweep()
				lims[1].(sweeper).Sweep()
			}
		default:
			a, b := globalBurst(t, lims[0], ""), 0
			for range a.calls {
				if lims[1].Allow("g") {
					b++
				}
			}
			if a.allowed != b {
				t.Fatalf("step %d: %d calls at one instant: %d allowed on \"\" from %d goroutines, %d on \"g\" in turn", step, a.calls, a.allowed, a.goroutines, b)
			}
			if s, ok := lims[0].(sweeper); ok { // the burst swept the first: sweep both
				s.Sweep()
				lims[1].(sweeper).Sweep()
			}
		}
		if len(open) > 16 {
			open = open[1:]
		}
		for j := range keys[0] {
			a, aerr := lims[0].AllowN(t.Context(), keys[0][j], 0)
			b, berr := lims[1].AllowN(t.Context(), keys[1][j], 0)
			if a != b || aerr != berr {
				t.Fatalf("step %d: peek %q/%q: %+v, %v and %+v, %v", step, keys[0][j], keys[1][j], a, aerr, b, berr)
			}
		}
		if s, ok := lims[0].(statser); ok {
			// The counts of drops differ by the burst's sweeps (a key may be
			// dropped at rest, and set up again, in one and not the other).
			if a, b := s.Stats(), lims[1].(statser).Stats(); a.Keys != b.Keys || a.EvictedLRU != 0 || b.EvictedLRU != 0 {
				t.Fatalf("step %d: Stats %+v and %+v", step, a, b)
			}
		}
	}
}

type burst struct{ goroutines, calls, allowed int }

// globalBurst calls lim.Allow(key) from several goroutines at once, the
// clock standing still, with sweeps, peeks and Stats under them, and
// returns how many calls it made and how many were allowed.
func globalBurst(t *testing.T, lim Limiter, key string) burst {
	t.Helper()
	g := max(2, runtime.GOMAXPROCS(0))
	const per = 8
	var allowed atomic.Int64
	var wg sync.WaitGroup
	var done atomic.Bool
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for !done.Load() {
			if s, ok := lim.(interface{ Sweep() }); ok {
				s.Sweep()
			}
			if _, err := lim.AllowN(t.Context(), key, 0); err != nil {
				t.Error(err)
			}
			if s, ok := lim.(interface{ Stats() Stats }); ok {
				s.Stats()
			}
			runtime.Gosched()
		}
	})
	for range g {
		wg.Go(func() {
			for range per {
				if lim.Allow(key) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	sweeper.Wait()
	return burst{goroutines: g, calls: g * per, allowed: int(allowed.Load())}
}
