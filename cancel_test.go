package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The tests of this file hold every algorithm to its documented bound on
// the events that act, whatever the order of Allow, AllowN, Reserve, Cancel
// and Wait: random interleavings (seeded), with Cancel of any earlier
// booking, on a manual clock, in a synctest bubble with waiters whose
// contexts end, and on eight goroutines racing on one key.
//
// An event acts at the instant Allow or AllowN allowed it, or at the
// TimeToAct of its reservation unless Cancel was called on the limiter's
// clock at or before that instant (Cancel then gives it back; later, it
// gives nothing back and the events count).

// actEvent is n events of key acting at t (Unix nanoseconds).
type actEvent struct {
	key string
	t   int64
	n   int
}

// boundCase is an algorithm under test: how to build it and its bound.
type boundCase struct {
	name string
	// build returns the limiter on clk.
	build func(clk Clock) (testLimiter, error)
	// maxN is the largest n the limiter accepts.
	maxN int
	// unit is the typical spacing of events (the period over the count),
	// the scale of the random clock moves.
	unit time.Duration
	// check returns an error if the events of one key break the bound;
	// costCheck, if they break it with settled costs.
	check     func(evs []actEvent) error
	costCheck func(evs []costEvent) error
}

// boundCases lists every algorithm of the registry (algorithms_test.go),
// the buckets with rates whose spacing is a whole number of nanoseconds and
// rates whose spacing has a fraction, the windows with three rates.
func boundCases() []boundCase {
	var cs []boundCase
	for _, alg := range algorithms {
		if alg.window != nil {
			continue
		}
		for _, p := range []struct {
			rate     Rate
			capacity int
		}{
			{PerSecond(10), 1}, // the capacity 1 of the out-of-order Cancel report
			{Per(3, 10*time.Millisecond), 3},
			{Per(7, 13*time.Millisecond), 5}, // 1.857142... ms apart
			{Per(3, 10), 4},                  // 3⅓ ns apart: rounding to the nanosecond
			{Per(10, 3), 5},                  // 0.3 ns apart: several events to a nanosecond
		} {
			rate, c := p.rate, p.capacity
			cs = append(cs, boundCase{
				name:  fmt.Sprintf("%s/%v/C%d", alg.name, rate, c),
				build: func(clk Clock) (testLimiter, error) { return alg.build(rate, c, WithClock(clk)) },
				maxN:  c, unit: max(rate.Period/time.Duration(rate.N), 1),
				check: alg.actBound(rate, c), costCheck: alg.costBound(rate, c),
			})
		}
	}
	for _, alg := range windowAlgorithms() {
		for _, rate := range []Rate{Per(1, 10*time.Millisecond), Per(3, 10*time.Millisecond), Per(5, 13*time.Millisecond)} {
			cs = append(cs, boundCase{
				name:  fmt.Sprintf("%s/%v", alg.name, rate),
				build: func(clk Clock) (testLimiter, error) { return alg.build(rate, 0, WithClock(clk)) },
				maxN:  int(rate.N), unit: rate.Period / time.Duration(rate.N),
				check: alg.actBound(rate, 0), costCheck: alg.costBound(rate, 0),
			})
		}
	}
	return cs
}

// The bounds on the events that act, the actBound of each entry of the
// registry: the buckets' take the capacity, the windows' ignore it.

func tokenActBound(rate Rate, c int) func([]actEvent) error {
	return func(evs []actEvent) error { return checkTokenBound(evs, rate, c) }
}

func leakyActBound(rate Rate, _ int) func([]actEvent) error {
	return func(evs []actEvent) error { return checkLeakyBound(evs, rate) }
}

func fixedWindowActBound(rate Rate, _ int) func([]actEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []actEvent) error { return checkAlignedBound(evs, w, limit) }
}

func slidingLogActBound(rate Rate, _ int) func([]actEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []actEvent) error { return checkSlidingBound(evs, w, limit) }
}

func slidingCounterActBound(rate Rate, _ int) func([]actEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []actEvent) error {
		if err := checkAlignedBound(evs, w, limit); err != nil {
			return err
		}
		return checkSlidingBound(evs, w, swcBound(limit, w))
	}
}

// instants returns the acting instants of evs, one per event, in order.
func instants(evs []actEvent) []int64 {
	var ts []int64
	for _, e := range evs {
		for range e.n {
			ts = append(ts, e.t)
		}
	}
	slices.Sort(ts)
	return ts
}

// checkTokenBound: at most C + ⌊r·D⌋ events conform in any closed
// interval of length D, and each acts at the instant it conforms rounded up
// to the nanosecond. So the events acting in [t, t+D] conformed in
// (t−1ns, t+D], and there are at most C + ⌈r·(D+1ns)⌉ − 1 of them: exactly
// C + ⌊r·D⌋ when 1/r is a whole number of nanoseconds, one more at some D
// otherwise. The tightest intervals start and end at events.
func checkTokenBound(evs []actEvent, rate Rate, capacity int) error {
	ts := instants(evs)
	for i := range ts {
		for j := i; j < len(ts); j++ {
			d := ts[j] - ts[i]
			allowed := int64(capacity) + ((d+1)*rate.N-1)/int64(rate.Period)
			if int64(len(ts)-i) <= allowed {
				break // no later j can break it
			}
			if int64(j-i+1) > allowed {
				return fmt.Errorf("%d events act in [%d, %d] (%v), the bound is %d", j-i+1, ts[i], ts[j], time.Duration(d), allowed)
			}
		}
	}
	return nil
}

// checkLeakyBound: the output never bursts. Bookings take consecutive
// slots of 1/r and act at the start of their first slot, rounded up to the
// nanosecond. So the bookings acting in [a, b] started in (a−1ns, b], and
// the slots of all but the last to start fit in there:
// (b − a + 1ns)·r > their events. Which one started last among those
// acting at b is not known; the check leaves out the largest.
func checkLeakyBound(evs []actEvent, rate Rate) error {
	evs = slices.Clone(evs)
	slices.SortFunc(evs, func(a, b actEvent) int { return cmp.Compare(a.t, b.t) })
	for i := range evs {
		if i > 0 && evs[i-1].t == evs[i].t {
			continue // the same a as the booking before
		}
		total, largest := int64(0), int64(0)
		for j := i; j < len(evs); j++ {
			if j > i && evs[j].t != evs[j-1].t {
				largest = 0
			}
			total += int64(evs[j].n)
			largest = max(largest, int64(evs[j].n))
			if j+1 < len(evs) && evs[j+1].t == evs[j].t {
				continue // b's group goes on
			}
			if (evs[j].t-evs[i].t+1)*rate.N <= (total-largest)*int64(rate.Period) {
				return fmt.Errorf("%d events act in [%d, %d] (%v): their slots of %v do not fit",
					total, evs[i].t, evs[j].t, time.Duration(evs[j].t-evs[i].t), rate.Period/time.Duration(rate.N))
			}
			if evs[j].t-evs[i].t > 4*int64(rate.Period)+100 {
				break
			}
		}
	}
	return nil
}

// checkAlignedBound: at most limit events act in each window [k·w, (k+1)·w).
func checkAlignedBound(evs []actEvent, w int64, limit int) error {
	per := map[int64]int{}
	for _, e := range evs {
		k := windowStart(e.t, w)
		if per[k] += e.n; per[k] > limit {
			return fmt.Errorf("%d events act in the window [%d, %d), the limit is %d", per[k], k, k+w, limit)
		}
	}
	return nil
}

// checkSlidingBound: at most limit events act in any interval of length w
// (two events at most w−1 apart share one).
func checkSlidingBound(evs []actEvent, w int64, limit int) error {
	ts := instants(evs)
	i := 0
	for j := range ts {
		for ts[j]-ts[i] >= w {
			i++
		}
		if j-i+1 > limit {
			return fmt.Errorf("%d events act in [%d, %d], within %v, the limit is %d", j-i+1, ts[i], ts[j], time.Duration(w), limit)
		}
	}
	return nil
}

// checkBound checks each key's events.
func checkBound(c boundCase, evs []actEvent) error {
	byKey := map[string][]actEvent{}
	for _, e := range evs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	for k, es := range byKey {
		if err := c.check(es); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	return nil
}

// TestCancelOutOfOrderKeepsCapacity: capacity 1, 10 per second. r1, r2, r3
// are booked at t0 (acting at t0, +100ms, +200ms); r2 is cancelled. Its
// token cannot be given back: r3 already holds the slot after it, so r4
// acts at +300ms, not with r3 at +200ms.
func TestCancelOutOfOrderKeepsCapacity(t *testing.T) {
	tb, _ := newTB(t, PerSecond(10), 1)
	var rs [5]*Reservation
	for i := 1; i <= 3; i++ {
		rs[i], _ = tb.Reserve(bg, "k", 1)
	}
	rs[2].Cancel()
	rs[4], _ = tb.Reserve(bg, "k", 1)
	for i, want := range []time.Duration{0, 0, 100, 200, 300} {
		if i == 0 || i == 2 {
			continue
		}
		if got := rs[i].Delay(); got != want*time.Millisecond {
			t.Errorf("r%d: delay %v, want %v", i, got, want*time.Millisecond)
		}
	}
	// Cancelling the latest gives it back exactly: r4, then r3, each then
	// the latest. r2's slot stays booked, and empty: the bucket cannot tell
	// it from a slot still held, so r1 (cancelled at its time to act, which
	// has not passed) gives nothing back either.
	rs[4].Cancel()
	if d := tbPeek(t, tb); d.ResetAfter != 300*time.Millisecond {
		t.Fatalf("after cancelling r4: %+v, want ResetAfter 300ms (as before r4)", d)
	}
	rs[3].Cancel()
	if d := tbPeek(t, tb); d.ResetAfter != 200*time.Millisecond {
		t.Fatalf("after cancelling r3: %+v, want ResetAfter 200ms (as before r3)", d)
	}
	rs[1].Cancel()
	if d := tbPeek(t, tb); d.ResetAfter != 200*time.Millisecond {
		t.Fatalf("after cancelling r1: %+v, want ResetAfter 200ms: r2's slot after it is held", d)
	}
}

func tbPeek(t *testing.T, tb *TokenBucket) Decision {
	t.Helper()
	d, err := tb.AllowN(bg, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCancelKeepsBound: random interleavings of Allow, AllowN, Reserve,
// Cancel of any pending booking, Sweep and clock moves (forwards, and now
// and then backwards) on two keys; the events that act keep the bound.
func TestCancelKeepsBound(t *testing.T) {
	seeds, steps := 60, 400
	if testing.Short() {
		seeds = 15
	}
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				if err := playCancels(t, c, seed, steps); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
}

// playCancels plays one random interleaving and checks the bound.
func playCancels(t *testing.T, c boundCase, seed uint64, steps int) error {
	rng := rand.New(rand.NewPCG(seed, 0xca9ce1))
	clk := NewManualClock(suiteT0)
	lim, err := c.build(clk)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	type pending struct {
		r   *Reservation
		key string
		n   int
	}
	var booked []pending
	var evs []actEvent
	var cancelled, given int
	keys := []string{"a", "b"}
	for range steps {
		now := clk.Now().UnixNano()
		key := keys[rng.IntN(len(keys))]
		switch p := rng.IntN(100); {
		case p < 25: // move the clock
			var d time.Duration
			switch q := rng.IntN(20); {
			case q == 0:
				d = -time.Duration(rng.Int64N(int64(3 * c.unit))) // backwards
			case q < 4:
				d = 0
			default:
				d = time.Duration(rng.Int64N(int64(2 * c.unit)))
			}
			clk.Advance(d)
		case p < 40:
			if lim.Allow(key) {
				evs = append(evs, actEvent{key, now, 1})
			}
		case p < 55:
			n := rng.IntN(c.maxN + 1)
			d, err := lim.AllowN(bg, key, n)
			if err != nil {
				return err
			}
			if d.Allowed && n > 0 {
				evs = append(evs, actEvent{key, now, n})
			}
		case p < 82:
			n := 1 + rng.IntN(c.maxN)
			r, err := lim.Reserve(bg, key, n)
			if err != nil {
				return err
			}
			if r.OK() {
				booked = append(booked, pending{r, key, n})
			}
		case p < 98: // cancel any pending booking, not only the latest
			if len(booked) == 0 {
				continue
			}
			i := rng.IntN(len(booked))
			b := booked[i]
			booked = slices.Delete(booked, i, i+1)
			act := b.r.TimeToAct().UnixNano()
			b.r.Cancel()
			if now <= act {
				given++
			} else {
				evs = append(evs, actEvent{b.key, act, b.n})
			}
			cancelled++
		default:
			lim.Sweep() // drops keys at rest: lossless
		}
	}
	for _, b := range booked {
		evs = append(evs, actEvent{b.key, b.r.TimeToAct().UnixNano(), b.n})
	}
	if given == 0 || len(evs) < steps/20 {
		t.Fatalf("seed %d: trace too tame: %d events, %d cancels, %d given back", seed, len(evs), cancelled, given)
	}
	return checkBound(c, evs)
}

// TestWaitCancelKeepsBound: in a synctest bubble (fake time, the default
// clock), waiters on one key whose contexts end (deadlines, some too short
// for their place in the queue, and cancels while they wait) alongside
// callers of Allow: the events that act keep the bound. A waiter acts when
// WaitN returns nil, at that instant of fake time.
func TestWaitCancelKeepsBound(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			// Which waits end early depends on how the bubble's goroutines
			// are scheduled, so the check that the trace is not too tame
			// is over all seeds, not each one.
			var acted, ended int
			for seed := range uint64(seeds) {
				synctest.Test(t, func(t *testing.T) {
					a, e := playWaits(t, c, seed)
					acted += a
					ended += e
				})
			}
			if ended == 0 || acted < 12*seeds {
				t.Fatalf("too tame: %d events act, %d waits ended early over %d seeds", acted, ended, seeds)
			}
		})
	}
}

// playWaits plays one seed and returns how many events acted and how many
// waits ended early.
func playWaits(t *testing.T, c boundCase, seed uint64) (acted, ended int) {
	lim, err := c.build(SystemClock())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	var mu sync.Mutex
	var evs []actEvent
	record := func(n int) {
		mu.Lock()
		evs = append(evs, actEvent{"k", time.Now().UnixNano(), n})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	const waiters, rounds = 12, 15
	for g := range uint64(waiters) {
		rng := rand.New(rand.NewPCG(seed, g))
		wg.Go(func() {
			for range rounds {
				time.Sleep(time.Duration(rng.Int64N(int64(2 * c.unit))))
				if g == 0 { // one caller of Allow, one of AllowN
					if lim.Allow("k") {
						record(1)
					}
					continue
				}
				if g == 1 {
					n := 1 + rng.IntN(c.maxN)
					if d, err := lim.AllowN(bg, "k", n); err == nil && d.Allowed {
						record(n)
					}
					continue
				}
				n := 1 + rng.IntN(c.maxN)
				ctx, cancel := context.WithCancel(bg)
				switch rng.IntN(3) {
				case 0: // a deadline, often too short
					ctx, cancel = context.WithTimeout(bg, time.Duration(rng.Int64N(int64(6*c.unit))))
				case 1: // cancelled while it waits
					stop := time.AfterFunc(time.Duration(rng.Int64N(int64(6*c.unit))), cancel)
					defer stop.Stop()
				}
				err := lim.WaitN(ctx, "k", n)
				cancel()
				switch {
				case err == nil:
					record(n)
				case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrLimited):
					mu.Lock()
					ended++
					mu.Unlock()
				default:
					t.Errorf("WaitN: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if err := checkBound(c, evs); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return len(evs), ended
}

// TestCancelRacesAllow: eight goroutines on one key, at each instant of a
// frozen manual clock, race Allow, Reserve and Cancel of bookings any of
// them made; then the clock moves on. Under -race, and the events that act
// keep the bound.
func TestCancelRacesAllow(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			clk := NewManualClock(suiteT0)
			lim, err := c.build(clk)
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			var mu sync.Mutex
			var evs []actEvent
			type booking struct {
				r *Reservation
				n int
			}
			var pool []booking // booked and not yet cancelled
			for round := range rounds {
				now := clk.Now().UnixNano()
				var wg sync.WaitGroup
				for g := range 8 {
					rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
					wg.Go(func() {
						for range 12 {
							switch rng.IntN(3) {
							case 0:
								if lim.Allow("k") {
									mu.Lock()
									evs = append(evs, actEvent{"k", now, 1})
									mu.Unlock()
								}
							case 1:
								n := 1 + rng.IntN(c.maxN)
								r, err := lim.Reserve(bg, "k", n)
								if err != nil {
									t.Error(err)
									return
								}
								if r.OK() {
									mu.Lock()
									pool = append(pool, booking{r, n})
									mu.Unlock()
								}
							default:
								mu.Lock()
								if len(pool) == 0 {
									mu.Unlock()
									continue
								}
								i := rng.IntN(len(pool))
								b := pool[i]
								pool = slices.Delete(pool, i, i+1)
								if act := b.r.TimeToAct().UnixNano(); now > act {
									evs = append(evs, actEvent{"k", act, b.n}) // due: it acted
								}
								mu.Unlock()
								b.r.Cancel() // outside the lock: it races the others
							}
						}
					})
				}
				wg.Wait()
				clk.Advance(time.Duration(rand.New(rand.NewPCG(uint64(round), 99)).Int64N(int64(3 * c.unit))))
			}
			for _, b := range pool {
				evs = append(evs, actEvent{"k", b.r.TimeToAct().UnixNano(), b.n})
			}
			if err := checkBound(c, evs); err != nil {
				t.Fatal(err)
			}
		})
	}
}
