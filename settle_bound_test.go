package ratelimit

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The bound with settled costs.
//
// Count each booking at its settled cost (n if never settled, actual if
// settled; nothing if given back by Cancel) at its time to act. The bound
// each algorithm keeps is its bound without settlements, plus, for any
// interval (or run of windows) I, the excess of those bookings acting in I
// that were settled after the last booking acting in I was made:
//
//	cost(I) <= bound(I) + Σ { e_k : k acts in I, k settled after the last booking acting in I }
//
// An excess settled before that last booking was made is paid in full
// within I. So a debt can break the bound without settlements only over
// intervals that nothing booked after it reaches: the work the caller did
// without asking, which no limiter can undo. The excuse is tight: a Take of
// C tokens from a full bucket settled at C + e, with nothing booked after
// it, puts C + e events at one instant.
//
// Why it holds for the token bucket (the others follow the same lines; the
// tests below check every algorithm). Let S be the bookings acting in
// I = [t1, t2] with a positive settled cost, i the one that found the
// lowest TAT (at base_i) and j the last one made, which booked at L and
// left TAT at end_j <= act_j + τ <= t2 + τ (it conformed). Between base_i
// and end_j, TAT has moved on by every booking of S as held at L: Cancel
// and a surplus give TAT back only while the booking is the latest, so
// what S's members took before L is still taken then, except a tail
// surplus settled before L, which the booking then no longer holds (its
// cost is actual, and TAT holds actual); an excess settled before L was
// added to TAT, from where it stood, at least base_i (no member of S can be
// settled before i is booked: it was booked after i). So
// (end_j − base_i)·r >= Σ_{k∈S} held_k, where held_k = cost_k for every k
// not settled with an excess after L, and held_k = cost_k − e_k for those.
// If base_i >= t1, Σ held <= r·(t2 + τ − t1) = C + r·D. Otherwise i was
// booked ahead, base_i = act_i + τ − n_i/r >= t1 + τ − n_i/r, and
// Σ_{k≠i} held_k <= r·D + n_i − held_i; as held_i >= n_i unless i is
// settled after L with an excess (held_i = n_i) or with a tail surplus
// before L (cost_i = held_i), Σ held <= C + r·D again. The acting instants
// being rounded up to a whole nanosecond, the bound is checked as
// C + ⌈r·(D+1ns)⌉ − 1, as without settlements.

// costEvent is one booking that acted: its events at t, n of them (the
// settled cost), with the order it was booked in (seq), the order of its
// settlement with an excess of excess events (settled, 0 if none), and the
// generation of its key (its resets) when it was booked.
type costEvent struct {
	key     string
	t       int64
	n       int
	seq     int
	settled int
	excess  int
	gen     int
}

// window is a group of bookings checked together: their cost, less the
// excess of those settled after the last of them was booked.
type costGroup struct {
	cost, maxSeq int
	excess       []costEvent // members with an excess
}

func (g *costGroup) add(e costEvent) {
	g.cost += e.n
	g.maxSeq = max(g.maxSeq, e.seq)
	if e.excess > 0 {
		g.excess = append(g.excess, e)
	}
}

// adjusted is the group's cost less the excess the bound excuses.
func (g *costGroup) adjusted() int {
	c := g.cost
	for _, e := range g.excess {
		if e.settled > g.maxSeq {
			c -= e.excess
		}
	}
	return c
}

func sortByTime(evs []costEvent) []costEvent {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b costEvent) int { return cmp.Compare(a.t, b.t) })
	return evs
}

func suffixCost(evs []costEvent) []int {
	s := make([]int, len(evs)+1)
	for i := len(evs) - 1; i >= 0; i-- {
		s[i] = s[i+1] + evs[i].n
	}
	return s
}

// checkTokenCost is checkTokenBound with settled costs: the bookings
// acting in [t_a, t_b], for a and b instants of events.
func checkTokenCost(evs []costEvent, rate Rate, capacity int) error {
	evs = sortByTime(evs)
	rest := suffixCost(evs)
	for i := range evs {
		if i > 0 && evs[i-1].t == evs[i].t {
			continue
		}
		var g costGroup
		for j := i; j < len(evs); j++ {
			g.add(evs[j])
			if j+1 < len(evs) && evs[j+1].t == evs[j].t {
				continue
			}
			d := evs[j].t - evs[i].t
			allowed := int64(capacity) + (satMul(d+1, rate.N)-1)/int64(rate.Period)
			if int64(rest[i]) <= allowed {
				break // no later j can break it
			}
			if int64(g.adjusted()) > allowed {
				return fmt.Errorf("%d events act in [%d, %d] (%v), %d of them excused, the bound is %d",
					g.cost, evs[i].t, evs[j].t, time.Duration(d), g.cost-g.adjusted(), allowed)
			}
		}
	}
	return nil
}

// checkLeakyCost is checkLeakyBound with settled costs: the bookings
// acting in [a, b] but the largest (once excused) of those at b fit in
// slots of 1/r from a−1ns to b.
func checkLeakyCost(evs []costEvent, rate Rate) error {
	evs = sortByTime(evs)
	for i := range evs {
		if i > 0 && evs[i-1].t == evs[i].t {
			continue
		}
		var g costGroup
		for j := i; j < len(evs); j++ {
			g.add(evs[j])
			if j+1 < len(evs) && evs[j+1].t == evs[j].t {
				continue
			}
			adj := g.adjusted()
			largest := 0
			for k := j; k >= i && evs[k].t == evs[j].t; k-- {
				own := evs[k].n
				if evs[k].excess > 0 && evs[k].settled > g.maxSeq {
					own -= evs[k].excess
				}
				largest = max(largest, own)
			}
			if satMul(evs[j].t-evs[i].t+1, rate.N) <= int64(adj-largest)*int64(rate.Period) {
				return fmt.Errorf("%d events act in [%d, %d] (%v), %d excused: their slots of %v do not fit",
					g.cost, evs[i].t, evs[j].t, time.Duration(evs[j].t-evs[i].t), g.cost-adj, rate.Period/time.Duration(rate.N))
			}
			if evs[j].t-evs[i].t > 4*int64(rate.Period)+100 {
				break
			}
		}
	}
	return nil
}

// checkAlignedCost is checkAlignedBound with settled costs, over runs of
// consecutive windows: a debt carries into the windows after its own, so
// the bound is L for each window of the run.
func checkAlignedCost(evs []costEvent, w int64, limit int) error {
	evs = sortByTime(evs)
	rest := suffixCost(evs)
	for i := range evs {
		start := windowStart(evs[i].t, w)
		if i > 0 && windowStart(evs[i-1].t, w) == start {
			continue
		}
		var g costGroup
		for j := i; j < len(evs); j++ {
			g.add(evs[j])
			end := windowStart(evs[j].t, w)
			if j+1 < len(evs) && windowStart(evs[j+1].t, w) == end {
				continue
			}
			allowed := int64(limit) * ((end-start)/w + 1)
			if int64(rest[i]) <= allowed {
				break
			}
			if int64(g.adjusted()) > allowed {
				return fmt.Errorf("%d events act in the windows [%d, %d), %d excused, the limit is %d",
					g.cost, start, end+w, g.cost-g.adjusted(), allowed)
			}
		}
	}
	return nil
}

// checkSlidingCost is checkSlidingBound with settled costs: the bookings
// acting within any interval of length w.
func checkSlidingCost(evs []costEvent, w int64, limit int) error {
	evs = sortByTime(evs)
	for i := range evs {
		if i > 0 && evs[i-1].t == evs[i].t {
			continue
		}
		var g costGroup
		for j := i; j < len(evs) && evs[j].t-evs[i].t < w; j++ {
			g.add(evs[j])
			if j+1 < len(evs) && evs[j+1].t == evs[j].t {
				continue
			}
			if g.adjusted() > limit {
				return fmt.Errorf("%d events act in [%d, %d], within %v, %d excused, the limit is %d",
					g.cost, evs[i].t, evs[j].t, time.Duration(w), g.cost-g.adjusted(), limit)
			}
		}
	}
	return nil
}

// The costBound of each entry of the registry.

func tokenCostBound(rate Rate, c int) func([]costEvent) error {
	return func(evs []costEvent) error { return checkTokenCost(evs, rate, c) }
}

func leakyCostBound(rate Rate, _ int) func([]costEvent) error {
	return func(evs []costEvent) error { return checkLeakyCost(evs, rate) }
}

func fixedWindowCostBound(rate Rate, _ int) func([]costEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []costEvent) error { return checkAlignedCost(evs, w, limit) }
}

func slidingLogCostBound(rate Rate, _ int) func([]costEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []costEvent) error { return checkSlidingCost(evs, w, limit) }
}

func slidingCounterCostBound(rate Rate, _ int) func([]costEvent) error {
	limit, w := int(rate.N), int64(rate.Period)
	return func(evs []costEvent) error {
		if err := checkAlignedCost(evs, w, limit); err != nil {
			return err
		}
		return checkSlidingCost(evs, w, swcBound(limit, w))
	}
}

// checkCostBound checks each key's events, each generation of a key on
// its own: a Reset starts a key afresh.
func checkCostBound(check func([]costEvent) error, evs []costEvent) error {
	type kg struct {
		key string
		gen int
	}
	by := map[kg][]costEvent{}
	for _, e := range evs {
		if e.n > 0 && e.gen >= 0 {
			by[kg{e.key, e.gen}] = append(by[kg{e.key, e.gen}], e)
		}
	}
	for k, es := range by {
		if err := check(es); err != nil {
			return fmt.Errorf("key %q, generation %d: %w", k.key, k.gen, err)
		}
	}
	return nil
}

// TestCostChecksCatch: the checks with settled costs catch a trace over the
// bound, excuse an excess settled after the last booking and only that,
// and agree with the checks without settlements.
func TestCostChecksCatch(t *testing.T) {
	rate := Per(2, 10) // 5ns apart
	w := int64(10)
	type check struct {
		name string
		f    func([]costEvent) error
	}
	checks := []check{
		{"token", tokenCostBound(rate, 2)},
		{"leaky", leakyCostBound(rate, 2)},
		{"aligned", fixedWindowCostBound(rate, 0)},
		{"sliding", slidingLogCostBound(rate, 0)},
	}
	over := []costEvent{{t: 0, n: 2, seq: 1}, {t: 1, n: 2, seq: 2}}
	excused := []costEvent{{t: 0, n: 4, seq: 1, settled: 3, excess: 2}, {t: 20, n: 1, seq: 2}}
	unexcused := []costEvent{{t: 0, n: 4, seq: 1, settled: 2, excess: 2}, {t: 1, n: 1, seq: 3}}
	for _, c := range checks {
		if c.f(over) == nil {
			t.Errorf("%s: 4 events within 1ns passed", c.name)
		}
		if err := c.f(excused); err != nil {
			t.Errorf("%s: an excess settled after the last booking was not excused: %v", c.name, err)
		}
		if c.f(unexcused) == nil {
			t.Errorf("%s: an excess settled before the last booking was excused", c.name)
		}
	}
	// Without settlements the checks are the old ones.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		var evs []actEvent
		var ces []costEvent
		tm := int64(0)
		for i := range 12 {
			tm += rng.Int64N(8)
			n := 1 + rng.IntN(2)
			evs = append(evs, actEvent{"k", tm, n})
			ces = append(ces, costEvent{key: "k", t: tm, n: n, seq: i + 1})
		}
		pairs := []struct {
			old func() error
			new func() error
		}{
			{func() error { return checkTokenBound(evs, rate, 2) }, func() error { return checkTokenCost(ces, rate, 2) }},
			{func() error { return checkLeakyBound(evs, rate) }, func() error { return checkLeakyCost(ces, rate) }},
			{func() error { return checkAlignedBound(evs, w, 2) }, func() error { return checkAlignedCost(ces, w, 2) }},
			{func() error { return checkSlidingBound(evs, w, 2) }, func() error { return checkSlidingCost(ces, w, 2) }},
		}
		for i, p := range pairs {
			// The aligned check over runs is no weaker than per window:
			// a window over its limit fails both; a run can only fail if
			// one of its windows does, without settlements.
			if (p.old() == nil) != (p.new() == nil) {
				t.Fatalf("check %d disagrees on %v: old %v, new %v", i, evs, p.old(), p.new())
			}
		}
	}
}

// TestSettleKeepsBound extends TestCancelKeepsBound: random interleavings
// of Allow, AllowN, Reserve, Take, Cancel and Settle of any pending
// booking at a random actual cost (below, at and above the estimate),
// Reset of one of the two keys, Sweep and clock moves (forwards, and now
// and then backwards); the bookings, counted at their settled cost, keep
// each algorithm's bound with the excess it excuses.
func TestSettleKeepsBound(t *testing.T) {
	seeds, steps := 40, 400
	if testing.Short() {
		seeds = 10
	}
	for _, c := range boundCases() {
		t.Run(c.name, func(t *testing.T) {
			var st settleStats
			for seed := range uint64(seeds) {
				if err := playSettles(t, c, rand.New(rand.NewPCG(seed, 0x5e771e)), steps, &st); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			if st.surplus == 0 || st.excess == 0 || st.exact == 0 || st.far == 0 || st.resets == 0 || st.late == 0 || st.checked < seeds*steps/16 {
				t.Fatalf("too tame: %+v", st)
			}
		})
	}
}

// settleStats counts what the traces did, to check they are not tame.
type settleStats struct {
	surplus, excess, exact, far, resets, late int
	checked                                   int // events the bound was checked on
}

// playSettles plays one random interleaving and checks the bound.
func playSettles(t *testing.T, c boundCase, rng chooser, steps int, st *settleStats) error {
	clk := NewManualClock(suiteT0)
	lim, err := c.build(clk)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	taker := lim.(Taker)
	type pending struct {
		r   *Reservation
		key string
		n   int
		seq int
		gen int
	}
	var booked []pending
	var evs []costEvent
	seq := 0
	gens := map[string]int{}
	capped := map[string]bool{} // a far debt was booked: see Settle
	gen := func(key string) int {
		if capped[key] {
			return -1 // not checked
		}
		return gens[key]
	}
	keys := []string{"a", "b"}
	for range steps {
		now := clk.Now().UnixNano()
		key := keys[rng.IntN(len(keys))]
		if debugSettle {
			d, _ := lim.AllowN(bg, "a", 0)
			t.Logf("now %d seq %d a: %+v booked %d", now, seq, d, len(booked))
		}
		switch p := rng.IntN(100); {
		case p < 22: // move the clock
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
		case p < 32:
			seq++
			if lim.Allow(key) {
				evs = append(evs, costEvent{key: key, t: now, n: 1, seq: seq, gen: gen(key)})
			}
		case p < 40:
			n := rng.IntN(c.maxN + 1)
			seq++
			d, err := lim.AllowN(bg, key, n)
			if err != nil {
				return err
			}
			if d.Allowed && n > 0 {
				evs = append(evs, costEvent{key: key, t: now, n: n, seq: seq, gen: gen(key)})
			}
		case p < 55, p < 65:
			n := 1 + rng.IntN(c.maxN)
			seq++
			var r *Reservation
			if p < 55 {
				r, err = taker.Take(bg, key, n)
			} else {
				r, err = lim.Reserve(bg, key, n)
			}
			if err != nil {
				return err
			}
			if r.OK() {
				booked = append(booked, pending{r, key, n, seq, gen(key)})
			}
		case p < 72: // cancel any pending booking
			if len(booked) == 0 {
				continue
			}
			i := rng.IntN(len(booked))
			b := booked[i]
			booked = slices.Delete(booked, i, i+1)
			act := b.r.TimeToAct().UnixNano()
			b.r.Cancel()
			if debugSettle {
				t.Logf("cancel key %s seq %d n %d act %d", b.key, b.seq, b.n, act)
			}
			if now > act {
				evs = append(evs, costEvent{key: b.key, t: act, n: b.n, seq: b.seq, gen: b.gen})
			}
		case p < 92: // settle any pending booking
			if len(booked) == 0 {
				continue
			}
			i := rng.IntN(len(booked))
			b := booked[i]
			booked = slices.Delete(booked, i, i+1)
			var actual int
			switch q := rng.IntN(20); {
			case q < 6:
				actual = rng.IntN(b.n)
				st.surplus++
			case q < 12:
				actual = b.n
				st.exact++
			case q < 19 || b.key != "a": // far debts on the key that is reset only
				actual = b.n + 1 + rng.IntN(2*c.maxN)
				st.excess++
			default: // far beyond: a debt of years, capped at 2⁶⁰ ns ahead
				actual = b.n + 1<<40 + rng.IntN(1<<20)
				st.far++
			}
			if now > b.r.TimeToAct().UnixNano() {
				st.late++
			}
			seq++
			if debugSettle {
				t.Logf("settle key %s seq %d n %d actual %d act %d", b.key, b.seq, b.n, actual, b.r.TimeToAct().UnixNano())
			}
			d, err := b.r.Settle(actual)
			if err != nil {
				return fmt.Errorf("Settle(%d) of %d: %v", actual, b.n, err)
			}
			if !d.Allowed || d.Limit != lim.Limit() {
				return fmt.Errorf("Settle's Decision %+v: want Allowed and Limit %d", d, lim.Limit())
			}
			if _, err := b.r.Settle(actual); err != ErrSettled {
				return fmt.Errorf("second Settle: %v, want ErrSettled", err)
			}
			e := costEvent{key: b.key, t: b.r.TimeToAct().UnixNano(), n: actual, seq: b.seq, gen: b.gen}
			if actual > b.n {
				e.settled, e.excess = seq, actual-b.n
			}
			if actual-b.n >= 1<<40 {
				// A debt beyond 2⁶⁰ ns ahead is forgiven past that, and so
				// is every debt booked on the key after it, while its
				// state stays at the cap: the trace checks that the cap
				// neither overflows nor breaks what came before it, and
				// leaves out what the key books after it until a Reset.
				e.settled = 1 << 62
				capped[b.key] = true
			}
			evs = append(evs, e)
		case p < 95:
			lim.Reset("a") // of one key only
			gens["a"]++
			capped["a"] = false
			st.resets++
		default:
			lim.Sweep()
		}
	}
	for _, b := range booked {
		evs = append(evs, costEvent{key: b.key, t: b.r.TimeToAct().UnixNano(), n: b.n, seq: b.seq, gen: b.gen})
	}
	for _, e := range evs {
		if e.gen >= 0 && e.n > 0 {
			st.checked++
		}
	}
	if err := checkCostBound(c.costCheck, evs); err != nil {
		if debugSettle {
			for _, e := range sortByTime(evs) {
				t.Logf("%+v", e)
			}
		}
		return err
	}
	return nil
}

var debugSettle = false

// chooser is where a trace takes its choices: a seeded rand for the
// property tests, the fuzzer's bytes for FuzzSettle.
type chooser interface {
	IntN(n int) int
	Int64N(n int64) int64
}

// byteChooser reads choices from data, two bytes each; zeros once it is
// used up.
type byteChooser struct{ data []byte }

func (b *byteChooser) next() uint64 {
	var v uint64
	for range 2 {
		v <<= 8
		if len(b.data) > 0 {
			v |= uint64(b.data[0])
			b.data = b.data[1:]
		}
	}
	return v
}

func (b *byteChooser) IntN(n int) int       { return int(b.next() % uint64(n)) }
func (b *byteChooser) Int64N(n int64) int64 { return int64(b.next() % uint64(n)) }

// FuzzSettle plays a trace of Allow, AllowN, Reserve, Take, Cancel,
// Settle at any actual cost (up to 2⁴⁰ beyond the estimate), Reset, Sweep
// and clock moves, chosen by the fuzzer's bytes, on one of the bound
// cases, and asserts the bound with settled costs.
func FuzzSettle(f *testing.F) {
	cases := boundCases()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range cases {
		data := make([]byte, 600)
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		f.Add(uint8(i), data)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		if len(data) > 4000 {
			data = data[:4000]
		}
		c := cases[int(which)%len(cases)]
		var st settleStats
		if err := playSettles(t, c, &byteChooser{data}, len(data)/4, &st); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSettleRaces: eight goroutines on one key, at each instant of a
// frozen manual clock, race Allow, Take, Reserve, Cancel and Settle (below,
// at and above the estimate) of bookings any of them made; then the clock
// moves on. Under -race, the bookings keep the bound with settled costs. A
// booking's order is taken before it is made and a settlement's after it
// returns, so that an excess counts as settled before a booking only if it
// was.
func TestSettleRaces(t *testing.T) {
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
			var evs []costEvent
			var seq atomic.Int64
			type booking struct {
				r   *Reservation
				n   int
				seq int
			}
			var pool []booking // booked and neither cancelled nor settled
			var settled int
			for round := range rounds {
				now := clk.Now().UnixNano()
				var wg sync.WaitGroup
				for g := range 8 {
					rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
					wg.Go(func() {
						for range 12 {
							switch op := rng.IntN(5); op {
							case 0:
								s := int(seq.Add(1))
								if lim.Allow("k") {
									mu.Lock()
									evs = append(evs, costEvent{key: "k", t: now, n: 1, seq: s})
									mu.Unlock()
								}
							case 1, 2:
								n := 1 + rng.IntN(c.maxN)
								s := int(seq.Add(1))
								var r *Reservation
								var err error
								if op == 1 {
									r, err = lim.(Taker).Take(bg, "k", n)
								} else {
									r, err = lim.Reserve(bg, "k", n)
								}
								if err != nil {
									t.Error(err)
									return
								}
								if r.OK() {
									mu.Lock()
									pool = append(pool, booking{r, n, s})
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
								mu.Unlock()
								act := b.r.TimeToAct().UnixNano()
								if op == 3 { // Cancel, outside the lock: it races the others
									b.r.Cancel()
									if now > act {
										mu.Lock()
										evs = append(evs, costEvent{key: "k", t: act, n: b.n, seq: b.seq}) // due: it acted
										mu.Unlock()
									}
									continue
								}
								actual := rng.IntN(3 * b.n)
								if _, err := b.r.Settle(actual); err != nil {
									t.Errorf("Settle(%d): %v", actual, err)
									return
								}
								s := int(seq.Add(1))
								e := costEvent{key: "k", t: act, n: actual, seq: b.seq}
								if actual > b.n {
									e.settled, e.excess = s, actual-b.n
								}
								mu.Lock()
								evs = append(evs, e)
								settled++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				clk.Advance(time.Duration(rand.New(rand.NewPCG(uint64(round), 99)).Int64N(int64(3 * c.unit))))
			}
			for _, b := range pool {
				evs = append(evs, costEvent{key: "k", t: b.r.TimeToAct().UnixNano(), n: b.n, seq: b.seq})
			}
			if settled == 0 {
				t.Fatal("nothing settled")
			}
			if err := checkCostBound(c.costCheck, evs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSettleRacesLoseNoDebt: eight goroutines Take, settle above the
// estimate (in any order, several held at once) and Allow on one key at
// one instant. However they interleave, every debt is booked: the key ends
// as one Take settled at the total of what was allowed and owed, on a
// limiter of its own, leaves it.
func TestSettleRacesLoseNoDebt(t *testing.T) {
	const limit = 64
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for round := range 20 {
				lim, _ := newLimiterAt(t, alg, limit)
				var total, takes atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
					wg.Go(func() {
						var held []*Reservation
						var ns []int
						settle := func(i int) {
							actual := ns[i] + 1 + rng.IntN(2)
							if _, err := held[i].Settle(actual); err != nil {
								t.Error(err)
							}
							total.Add(int64(actual))
							held, ns = slices.Delete(held, i, i+1), slices.Delete(ns, i, i+1)
						}
						for range 10 {
							switch rng.IntN(4) {
							case 0:
								if lim.Allow("k") {
									total.Add(1)
								}
							case 1, 2:
								n := 1 + rng.IntN(3)
								r, err := lim.(Taker).Take(bg, "k", n)
								if err != nil {
									t.Error(err)
									return
								}
								if r.OK() {
									held, ns = append(held, r), append(ns, n)
									takes.Add(1)
								}
							default:
								if len(held) > 0 {
									settle(rng.IntN(len(held)))
								}
							}
						}
						for len(held) > 0 {
							settle(rng.IntN(len(held)))
						}
					})
				}
				wg.Wait()
				if takes.Load() < 2 && !alg.shaper { // a shaper's queue, busy after one booking, takes no more at one instant
					t.Fatalf("round %d: %d Takes allowed: too tame", round, takes.Load())
				}
				ref, _ := newLimiterAt(t, alg, limit)
				mustSettle(t, suiteTake(t, ref, "k", 1), int(total.Load()))
				if got, want := suitePeek(t, lim, "k"), suitePeek(t, ref, "k"); got != want {
					t.Fatalf("round %d, %d charged: %+v, want %+v", round, total.Load(), got, want)
				}
			}
		})
	}
}
