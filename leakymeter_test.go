package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLeakyMeter is the meter's stepFuzz: its step is the token bucket's
// (a LeakyMeter is built on tbParams), so its bound is the token bucket's.
func fuzzLeakyMeter(rate Rate, capacity int) (fuzzStepper, int, func(int64) int64, error) {
	return fuzzTokenBucket(rate, capacity)
}

// meterTwin is a LeakyMeter and a TokenBucket of the same parameters on
// one manual clock, each call made on both and its results compared.
type meterTwin struct {
	t   *testing.T
	clk *ManualClock
	lm  *LeakyMeter
	tb  *TokenBucket
	// held are the reservations still held, in pairs (meter, token bucket).
	held [][2]*Reservation
	log  []string // the calls so far, for the failure message
}

func newMeterTwin(t *testing.T, rate Rate, capacity int) *meterTwin {
	t.Helper()
	clk := NewManualClock(suiteT0)
	lm, err := NewLeakyMeter(rate, capacity, WithClock(clk))
	if err != nil {
		t.Fatalf("NewLeakyMeter(%v, %d): %v", rate, capacity, err)
	}
	tb, err := NewTokenBucket(rate, capacity, WithClock(clk))
	if err != nil {
		t.Fatalf("NewTokenBucket(%v, %d): %v", rate, capacity, err)
	}
	return &meterTwin{t: t, clk: clk, lm: lm, tb: tb}
}

func (w *meterTwin) check(what string, m, b any) {
	w.t.Helper()
	w.log = append(w.log, what)
	if fmt.Sprint(m) != fmt.Sprint(b) {
		tail := w.log
		if len(tail) > 12 {
			tail = tail[len(tail)-12:]
		}
		w.t.Fatalf("%s: meter %v, token bucket %v; last calls:\n%v", what, m, b, tail)
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func resText(r *Reservation, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("ok=%v %+v act=%v", r.OK(), r.Decision(), r.TimeToAct().Sub(suiteT0))
}

// TestLeakyMeterMatchesTokenBucket: on random traces of every call of the
// contract (Allow, AllowN and its peek, Reserve, Take, Cancel, Settle,
// WaitN, SetRate, SetOverride, RemoveOverride, Reset, Sweep, a clock that
// moves forwards, stands still or goes back), a LeakyMeter gives exactly
// the answers of a TokenBucket of the same rate and capacity: the relation
// its doc states (level = C − tokens held).
func TestLeakyMeterMatchesTokenBucket(t *testing.T) {
	ctx := context.Background()
	rates := []Rate{PerSecond(2), Per(10, 13*time.Second), PerSecond(1000), Per(3, 7)}
	keys := []string{"a", "b", "c"}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 25))
		rate, capacity := rates[rng.IntN(len(rates))], 1+rng.IntN(6)
		w := newMeterTwin(t, rate, capacity)
		slot := int64(rate.Period) / rate.N
		// Half the traces move the clock back, the other half Sweep: a key
		// set up after the clock went back starts no earlier than its
		// shard's last drop (internal/keystore, rule 7), and each limiter
		// picks its shards by a hash of its own seed, so the two would
		// differ with both, as two TokenBuckets do.
		back := seed%2 == 1
		for step := range 400 {
			key := keys[rng.IntN(len(keys))]
			n := rng.IntN(capacity + 2) // up to one more than the capacity: an error
			what := fmt.Sprintf("seed %d step %d", seed, step)
			switch op := rng.IntN(16); op {
			case 0, 1, 2:
				w.check(what+" Allow "+key, w.lm.Allow(key), w.tb.Allow(key))
			case 3, 4:
				dm, em := w.lm.AllowN(ctx, key, n)
				db, eb := w.tb.AllowN(ctx, key, n)
				w.check(fmt.Sprintf("%s AllowN %s %d", what, key, n), fmt.Sprint(dm, errText(em)), fmt.Sprint(db, errText(eb)))
			case 5, 6:
				rm, em := w.lm.Reserve(ctx, key, n)
				rb, eb := w.tb.Reserve(ctx, key, n)
				w.check(fmt.Sprintf("%s Reserve %s %d", what, key, n), resText(rm, em), resText(rb, eb))
				if em == nil && eb == nil {
					w.held = append(w.held, [2]*Reservation{rm, rb})
				}
			case 7:
				rm, em := w.lm.Take(ctx, key, n)
				rb, eb := w.tb.Take(ctx, key, n)
				w.check(fmt.Sprintf("%s Take %s %d", what, key, n), resText(rm, em), resText(rb, eb))
				if em == nil && eb == nil {
					w.held = append(w.held, [2]*Reservation{rm, rb})
				}
			case 8:
				if len(w.held) > 0 {
					i := rng.IntN(len(w.held))
					if rng.IntN(2) == 0 {
						i = len(w.held) - 1 // the latest: given back whole
					}
					w.held[i][0].Cancel()
					w.held[i][1].Cancel()
					w.held = append(w.held[:i], w.held[i+1:]...)
					w.check(what+" Cancel", "", "")
				}
			case 9:
				if len(w.held) > 0 {
					i := rng.IntN(len(w.held))
					actual := rng.IntN(2*capacity + 1)
					dm, em := w.held[i][0].Settle(actual)
					db, eb := w.held[i][1].Settle(actual)
					w.check(fmt.Sprintf("%s Settle %d", what, actual), fmt.Sprint(dm, errText(em)), fmt.Sprint(db, errText(eb)))
				}
			case 10:
				// WaitN only when n fits now (a peek says so), so that
				// neither blocks on the manual clock.
				dm, _ := w.lm.AllowN(ctx, key, 0)
				db, _ := w.tb.AllowN(ctx, key, 0)
				w.check(what+" peek "+key, dm, db)
				if n <= dm.Remaining {
					w.check(fmt.Sprintf("%s WaitN %s %d", what, key, n), errText(w.lm.WaitN(ctx, key, n)), errText(w.tb.WaitN(ctx, key, n)))
				}
			case 11:
				r, c := rates[rng.IntN(len(rates))], 1+rng.IntN(6)
				if rng.IntN(8) == 0 {
					c = 0 // invalid: both refuse and keep their parameters
				}
				w.check(fmt.Sprintf("%s SetRate %v %d", what, r, c), errText(w.lm.SetRate(r, c)), errText(w.tb.SetRate(r, c)))
				if c > 0 {
					capacity = max(capacity, c)
				}
			case 12:
				if rng.IntN(3) == 0 {
					w.lm.RemoveOverride(key)
					w.tb.RemoveOverride(key)
					w.check(what+" RemoveOverride "+key, "", "")
				} else {
					r, c := rates[rng.IntN(len(rates))], 1+rng.IntN(6)
					w.check(fmt.Sprintf("%s SetOverride %s %v %d", what, key, r, c), errText(w.lm.SetOverride(key, r, c)), errText(w.tb.SetOverride(key, r, c)))
					rm, cm, okm := w.lm.Override(key)
					rb, cb, okb := w.tb.Override(key)
					w.check(what+" Override "+key, fmt.Sprint(rm, cm, okm), fmt.Sprint(rb, cb, okb))
					capacity = max(capacity, c)
				}
			case 13:
				w.lm.Reset(key)
				w.tb.Reset(key)
				w.check(what+" Reset "+key, "", "")
			case 14:
				if back {
					break
				}
				w.lm.Sweep()
				w.tb.Sweep()
				w.check(what+" Sweep", w.lm.Stats().Keys, w.tb.Stats().Keys)
			case 15:
				switch rng.IntN(8) {
				case 0:
					if !back {
						break
					}
					w.clk.Set(w.clk.Now().Add(-time.Duration(rng.Int64N(3 * slot))))
				case 1:
					w.clk.Advance(time.Duration(rng.Int64N(int64(rate.Period) * 4)))
				default:
					w.clk.Advance(time.Duration(rng.Int64N(2 * slot)))
				}
				w.check(what+" clock", "", "")
			}
			if rng.IntN(4) == 0 { // one more Advance between calls, often
				w.clk.Advance(time.Duration(rng.Int64N(slot + 1)))
			}
		}
		for _, k := range keys {
			dm, _ := w.lm.AllowN(ctx, k, 0)
			db, _ := w.tb.AllowN(ctx, k, 0)
			w.check("final peek "+k, dm, db)
		}
		w.check("Window", w.lm.Window(), w.tb.Window())
		w.check("Limit", w.lm.Limit(), w.tb.Limit())
	}
}

// TestLeakyMeterTimeline pins the meter's reading on a manual clock: the
// level rises by each admitted event and leaks at the rate; n events pass
// iff level + n <= C.
func TestLeakyMeterTimeline(t *testing.T) {
	ctx := context.Background()
	clk := NewManualClock(suiteT0)
	lm, err := NewLeakyMeter(PerSecond(2), 4, WithClock(clk)) // leaks one per 500ms
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		at        time.Duration // since t0
		n         int
		allowed   bool
		remaining int           // C − level after the call
		retry     time.Duration // until n fit
		reset     time.Duration // until the bucket is empty
	}
	for _, r := range []row{
		{0, 3, true, 1, 0, 1500 * time.Millisecond},                       // t0: level 0 → 3: a burst, which LeakyBucket.Allow would refuse
		{0, 2, false, 1, 500 * time.Millisecond, 1500 * time.Millisecond}, // 3 + 2 > 4: refused, nothing queued
		{0, 1, true, 0, 0, 2 * time.Second},                               // level 4: full
		{250 * time.Millisecond, 1, false, 0, 250 * time.Millisecond, 1750 * time.Millisecond},
		{500 * time.Millisecond, 1, true, 0, 0, 2 * time.Second},            // one leaked out: level 3, then 4
		{3 * time.Second, 4, true, 0, 0, 2 * time.Second},                   // empty by t0+2.5s: a full burst again
		{3 * time.Second, 0, true, 0, 0, 2 * time.Second},                   // a peek
		{4 * time.Second, 3, false, 2, 500 * time.Millisecond, time.Second}, // level 2: 2 + 3 > 4
	} {
		clk.Set(suiteT0.Add(r.at))
		d, err := lm.AllowN(ctx, "k", r.n)
		if err != nil {
			t.Fatalf("t0+%v AllowN(%d): %v", r.at, r.n, err)
		}
		want := Decision{Allowed: r.allowed, Limit: 4, Remaining: r.remaining, RetryAfter: r.retry, ResetAfter: r.reset}
		if d != want {
			t.Errorf("t0+%v AllowN(%d) = %+v, want %+v", r.at, r.n, d, want)
		}
	}
	if _, err := lm.AllowN(ctx, "k", 5); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("AllowN(5) with C = 4: %v, want ErrExceedsLimit", err)
	}
	if _, err := NewLeakyMeter(PerSecond(1), 0); !errors.Is(err, ErrInvalidCapacity) {
		t.Errorf("NewLeakyMeter(1/s, 0): %v, want ErrInvalidCapacity", err)
	}
	if _, err := NewLeakyMeter(Rate{}, 1); !errors.Is(err, ErrInvalidRate) {
		t.Errorf("NewLeakyMeter(zero rate, 1): %v, want ErrInvalidRate", err)
	}
}

// TestLeakyMeterAllowAllocs: Allow on an existing key allocates nothing,
// allowed or refused.
func TestLeakyMeterAllowAllocs(t *testing.T) {
	clk := NewManualClock(suiteT0)
	lm, err := NewLeakyMeter(PerSecond(1000), 2, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lm.Allow("k")
	allocs := testing.AllocsPerRun(1000, func() {
		clk.Advance(400 * time.Microsecond)
		lm.Allow("k")
	})
	if allocs != 0 {
		t.Errorf("Allow on an existing key: %v allocations per call", allocs)
	}
}

// TestLeakyMeterVectorsCross: the meter replays the token bucket's vector
// files, and the token bucket the meter's: the same decisions, step by
// step, on traces recorded from the other.
func TestLeakyMeterVectorsCross(t *testing.T) {
	for from, to := range map[string]string{"tokenbucket": "leakymeter", "leakymeter": "tokenbucket"} {
		files, err := filepath.Glob(filepath.Join("testdata", "vectors", from+"_*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s vector files: %v", from, err)
		}
		for _, f := range files {
			if err := replayVectors(readVectorFile(t, f), vectorAlgorithms[to]); err != nil {
				t.Errorf("%s replayed by %s: %v", filepath.Base(f), to, err)
			}
		}
	}
}
