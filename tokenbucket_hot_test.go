package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lent reports whether tb's global key has lent its TAT to the
// parameters in force (see TokenBucket.allowGlobal).
func lent(tb *TokenBucket) bool {
	h := tb.k.ps.p.Load().hot.Load()
	return h != nil && h.w.Load()&lentBit != 0
}

// A token bucket decides on "" exactly as on any other key, whether the
// key's TAT is lent (Allow steps it by one compare-and-swap) or not. Two
// buckets on one manual clock run the same random trace, one on "" and
// one on "g": mostly Allow, so that the TAT is lent most of the time,
// with every operation that must take it back between the calls:
// AllowN and peeks, Reserve and Cancel, Take and Settle, Reset, SetRate
// (to whole and fractional intervals), overrides set and removed, sweeps.
// Every answer, every peek and the keys held must agree, and the TAT must
// have been lent for a good share of the Allows.
func TestGlobalHotLikeAnyKey(t *testing.T) {
	rates := []struct {
		rate     Rate
		capacity int
	}{
		{Per(4, time.Second), 4},       // 250 ms: whole
		{Per(10, time.Second), 3},      // 100 ms: whole
		{Per(3, time.Second), 5},       // 333,333,333⅓ ns: thirds of a ns
		{Per(1000, time.Minute), 1000}, // 60 ms: whole
		{Per(7, time.Second), 2},       // sevenths
		// Units of about 10⁻⁷ ns: a word anchored afresh every minute
		// or so of the trace.
		{Per(10_000_019, time.Second), 50},
		// Units too fine for now to run a minute past an anchor: never
		// lent.
		{Per(1<<52-3, 30*24*time.Hour), 40},
	}
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			var tbs [2]*TokenBucket
			for i := range tbs {
				tb, err := NewTokenBucket(Per(4, time.Second), 4, WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				defer tb.Close()
				tbs[i] = tb
			}
			keys := [2]string{"", "g"}
			rng := rand.New(rand.NewPCG(seed, 29))
			var open [][2]*Reservation
			var taken [][2]*Reservation
			allows, lentAllows := 0, 0
			for step := range 4000 {
				where := func() string { return fmt.Sprintf("step %d", step) }
				switch op := rng.IntN(40); {
				case op < 6:
					clk.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
				case op < 7:
					if rng.IntN(8) == 0 { // backwards
						clk.Advance(-time.Duration(rng.Int64N(int64(2 * time.Second))))
					} else {
						clk.Advance(time.Duration(rng.Int64N(int64(5 * time.Second))))
					}
				case op < 22:
					if lent(tbs[0]) {
						lentAllows++
					}
					allows++
					if a, b := tbs[0].Allow(keys[0]), tbs[1].Allow(keys[1]); a != b {
						t.Fatalf("%s: Allow %v and %v", where(), a, b)
					}
				case op < 24:
					n := rng.IntN(4)
					a, aerr := tbs[0].AllowN(t.Context(), keys[0], n)
					b, berr := tbs[1].AllowN(t.Context(), keys[1], n)
					if a != b || aerr != berr {
						t.Fatalf("%s: AllowN(%d) %+v, %v and %+v, %v", where(), n, a, aerr, b, berr)
					}
				case op < 26:
					n := 1 + rng.IntN(3)
					a, aerr := tbs[0].Reserve(t.Context(), keys[0], n)
					b, berr := tbs[1].Reserve(t.Context(), keys[1], n)
					if aerr != berr {
						t.Fatalf("%s: Reserve(%d) %v and %v", where(), n, aerr, berr)
					}
					if aerr == nil {
						if a.OK() != b.OK() || a.Decision() != b.Decision() || !a.TimeToAct().Equal(b.TimeToAct()) {
							t.Fatalf("%s: Reserve(%d) %v %+v and %v %+v", where(), n, a.OK(), a.Decision(), b.OK(), b.Decision())
						}
						open = append(open, [2]*Reservation{a, b})
					}
				case op < 27:
					if len(open) > 0 {
						i := rng.IntN(len(open))
						open[i][0].Cancel()
						open[i][1].Cancel()
						open = append(open[:i], open[i+1:]...)
					}
				case op < 29:
					n := 1 + rng.IntN(3)
					a, aerr := tbs[0].Take(t.Context(), keys[0], n)
					b, berr := tbs[1].Take(t.Context(), keys[1], n)
					if aerr != berr || (aerr == nil && (a.OK() != b.OK() || a.Decision() != b.Decision())) {
						t.Fatalf("%s: Take(%d) differ", where(), n)
					}
					if aerr == nil {
						taken = append(taken, [2]*Reservation{a, b})
					}
				case op < 31:
					if len(taken) > 0 {
						i := rng.IntN(len(taken))
						actual := rng.IntN(5)
						a, aerr := taken[i][0].Settle(actual)
						b, berr := taken[i][1].Settle(actual)
						if a != b || aerr != berr {
							t.Fatalf("%s: Settle(%d) %+v, %v and %+v, %v", where(), actual, a, aerr, b, berr)
						}
						taken = append(taken[:i], taken[i+1:]...)
					}
				case op < 32:
					tbs[0].Reset(keys[0])
					tbs[1].Reset(keys[1])
				case op < 34:
					r := rates[rng.IntN(len(rates))]
					for _, tb := range tbs {
						if err := tb.SetRate(r.rate, r.capacity); err != nil {
							t.Fatal(err)
						}
					}
				case op < 35:
					r := rates[rng.IntN(len(rates))]
					for i, tb := range tbs {
						if err := tb.SetOverride(keys[i], r.rate, r.capacity); err != nil {
							t.Fatal(err)
						}
					}
				case op < 37:
					tbs[0].RemoveOverride(keys[0])
					tbs[1].RemoveOverride(keys[1])
				case op < 38:
					tbs[0].Sweep()
					tbs[1].Sweep()
				default:
					a, aerr := tbs[0].AllowN(t.Context(), keys[0], 0)
					b, berr := tbs[1].AllowN(t.Context(), keys[1], 0)
					if a != b || aerr != berr {
						t.Fatalf("%s: peek %+v, %v and %+v, %v", where(), a, aerr, b, berr)
					}
				}
				if len(open) > 16 {
					open = open[1:]
				}
				if len(taken) > 16 {
					taken = taken[1:]
				}
				if a, b := tbs[0].Stats(), tbs[1].Stats(); a.Keys != b.Keys {
					t.Fatalf("%s: keys held %d and %d", where(), a.Keys, b.Keys)
				}
			}
			if lentAllows < allows/8 {
				t.Fatalf("the TAT of \"\" was lent for %d of %d Allows: the trace does not test the lent path", lentAllows, allows)
			}
		})
	}
}

// Allow on "" lends the key's TAT where its step in units fits in a word
// (whole and fractional intervals alike), not under an override on "" or
// with an observer; a change of the parameters takes it back and retires
// the old parameters' word for good; a Reserve takes it back.
func TestGlobalHotLends(t *testing.T) {
	clk := NewManualClock(suiteT0)
	tb, err := NewTokenBucket(Per(1<<52-3, 30*24*time.Hour), 40, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tb.Allow("")
		if lent(tb) {
			t.Fatal("lent in units too fine to hold a minute")
		}
	}
	for _, r := range []Rate{Per(3, time.Second), Per(4, time.Second)} {
		old := tb.k.ps.p.Load()
		if err := tb.SetRate(r, 4); err != nil {
			t.Fatal(err)
		}
		if h := old.hot.Load(); h != retired {
			t.Fatalf("replaced parameters' word %p, want retired", h)
		}
		if lent(tb) {
			t.Fatal("lent to the new parameters before any Allow")
		}
		tb.Allow("") // anchors a word
		tb.Allow("") // lends
		if !lent(tb) {
			t.Fatalf("%v: not lent", r)
		}
	}
	if err := tb.SetOverride("", Per(4, time.Second), 4); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tb.Allow("")
		if lent(tb) {
			t.Fatal("lent with an override on \"\"")
		}
	}
	tb.RemoveOverride("")
	tb.Allow("")
	if !lent(tb) {
		t.Fatal("not lent after the override went")
	}
	r, err := tb.Reserve(t.Context(), "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if lent(tb) {
		t.Fatal("still lent after a Reserve on \"\"")
	}
	r.Cancel()
	if allocs := testing.AllocsPerRun(100, func() { tb.Allow("") }); allocs != 0 {
		t.Fatalf("Allow on \"\" allocates %v", allocs)
	}

	var events atomic.Int64
	obs, err := NewTokenBucket(Per(4, time.Second), 4, WithClock(clk), WithObserver(ObserverFunc(func(Event) { events.Add(1) })))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		obs.Allow("")
	}
	if lent(obs) || events.Load() != 3 {
		t.Fatalf("observed bucket: lent %v, %d events", lent(obs), events.Load())
	}
}

// Allow on "" from many goroutines, the clock standing still between
// bursts, with sweeps, peeks, Stats, SetRate and overrides to the same
// parameters, and Reserve-and-Cancel racing it: no update of the lent TAT
// is lost or doubled. With only operations that change nothing (sweeps,
// peeks, Stats) a burst allows exactly what "g" allows to the same calls
// in turn; with the others, never more than the bound: over the whole
// run, at most C + ⌊r·D⌋ events for D the time the clock moved.
func TestGlobalHotConcurrent(t *testing.T) {
	const capacity = 300
	for _, c := range []struct {
		rate    Rate
		neutral bool
	}{
		{Per(40, time.Second), true}, // 25 ms
		{Per(40, time.Second), false},
		{Per(37, time.Second), true}, // 27,027,027 1/37 ns
		{Per(37, time.Second), false},
	} {
		rate, neutral := c.rate, c.neutral
		t.Run(fmt.Sprintf("%v/neutral=%v", rate, neutral), func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			tb, err := NewTokenBucket(rate, capacity, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewTokenBucket(rate, capacity, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			total, elapsed := 0, time.Duration(0)
			for round := range 60 {
				var allowed atomic.Int64
				var done atomic.Bool
				var wg, side sync.WaitGroup
				side.Go(func() {
					for i := 0; !done.Load(); i++ {
						switch i % 6 {
						case 0:
							tb.Sweep()
						case 1:
							if _, err := tb.AllowN(t.Context(), "", 0); err != nil {
								t.Error(err)
							}
						case 2:
							tb.Stats()
						case 3:
							if !neutral {
								if err := tb.SetRate(rate, capacity); err != nil {
									t.Error(err)
								}
							}
						case 4:
							if !neutral {
								if err := tb.SetOverride("", rate, capacity); err != nil {
									t.Error(err)
								}
								tb.RemoveOverride("")
							}
						case 5:
							if !neutral {
								if r, err := tb.Reserve(t.Context(), "", 1); err == nil {
									r.Cancel()
								}
							}
						}
					}
				})
				const goroutines, per = 4, 150
				for range goroutines {
					wg.Go(func() {
						for range per {
							if tb.Allow("") {
								allowed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				done.Store(true)
				side.Wait()
				got := int(allowed.Load())
				total += got
				if neutral {
					want := 0
					for range goroutines * per {
						if ref.Allow("g") {
							want++
						}
					}
					if got != want {
						t.Fatalf("round %d: %d allowed on \"\" from %d goroutines, %d on \"g\" in turn", round, got, goroutines, want)
					}
				}
				if bound := capacity + int(int64(elapsed)*rate.N/int64(rate.Period)); total > bound {
					t.Fatalf("round %d: %d allowed in %v, over the bound %d", round, total, elapsed, bound)
				}
				d := time.Duration(rng.Int64N(int64(8 * time.Second)))
				clk.Advance(d)
				elapsed += d
			}
			if total == 0 {
				t.Fatal("nothing allowed")
			}
		})
	}
}
