package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A debt settled on a sliding log that holds more instants than a limit
// lowered since: the later instants alone fill the log, so the debt's
// instants, older than all of them, drop out at once and change nothing
// (they used to drive the count of instants to insert below zero, and
// panic). The log then decides as if the booking had been settled at its
// estimate.
func TestSlidingLogDebtAfterLowering(t *testing.T) {
	ctx := context.Background()
	run := func(actual int) []bool {
		clk := NewManualClock(time.Unix(1000, 0))
		sl, err := NewSlidingLog(PerSecond(4), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		b, err := sl.Reserve(ctx, "k", 1)
		if err != nil || !b.OK() {
			t.Fatal(err)
		}
		clk.Advance(1)
		if d, err := sl.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		clk.Advance(1)
		if r, err := sl.Reserve(ctx, "k", 1); err != nil || !r.OK() {
			t.Fatal(err)
		}
		if err := sl.SetRate(PerSecond(2)); err != nil {
			t.Fatal(err)
		}
		d, err := b.Settle(actual)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 0 {
			t.Errorf("settled at %d: %+v, want nothing remaining", actual, d)
		}
		var got []bool
		for range 40 {
			clk.Advance(100 * time.Millisecond)
			got = append(got, sl.Allow("k"))
		}
		return got
	}
	debt, none := run(3), run(1)
	for i := range debt {
		if debt[i] != none[i] {
			t.Fatalf("step %d: with the debt %v, without %v", i, debt[i], none[i])
		}
	}
}

// remove takes m of the instants equal to act out of the log, whichever
// side it closes the gap from, and keeps the rest in order: checked
// against a sorted slice on random logs, wrapped round the ring at random.
func TestSlidingLogRemoveModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 0))
	for range 2000 {
		size := 1 + rng.IntN(12)
		s := slState{ring: make([]int64, size), head: int32(rng.IntN(size))}
		var model []int64
		for range rng.IntN(size + 1) {
			t := int64(0)
			if len(model) > 0 {
				t = model[len(model)-1] + int64(rng.IntN(2))
			}
			s.push(t, 1)
			model = append(model, t)
		}
		act, n := int64(rng.IntN(len(model)+1)), int64(rng.IntN(4))
		s.remove(act, n)
		i, j := sort2(model, act)
		model = slices.Delete(model, i, i+int(min(n, int64(j-i))))
		got := make([]int64, s.n)
		for k := range s.n {
			got[k] = s.at(k)
		}
		if !slices.Equal(got, model) {
			t.Fatalf("remove(%d, %d): log %v, want %v", act, n, got, model)
		}
	}
}

// sort2 returns the bounds [i, j) of the instants equal to t in sorted xs.
func sort2(xs []int64, t int64) (int, int) {
	i, _ := slices.BinarySearch(xs, t)
	j, _ := slices.BinarySearch(xs, t+1)
	return i, j
}

// Settling the bookings of a full log oldest first (requests finishing in
// the order they came) costs about what settling them newest first does:
// each moves the few instants before it, not the many after. Timed in one
// run, best of three each, as a ratio; before, oldest first was some
// hundred times slower, quadratic in the limit.
func TestSlidingLogSettleOldestFirstIsCheap(t *testing.T) {
	const L = 8192
	run := func(oldestFirst bool) time.Duration {
		best := time.Duration(1<<63 - 1)
		for range 3 {
			clock := NewManualClock(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
			sl, err := NewSlidingLog(Per(L, time.Hour), WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			rs := make([]*Reservation, L)
			for i := range rs {
				if rs[i], err = sl.Take(context.Background(), "k", 1); err != nil || !rs[i].OK() {
					t.Fatalf("Take %d: %v", i, err)
				}
				clock.Advance(time.Microsecond)
			}
			start := time.Now()
			for i := range rs {
				j := i
				if !oldestFirst {
					j = L - 1 - i
				}
				if _, err := rs[j].Settle(0); err != nil {
					t.Fatal(err)
				}
			}
			best = min(best, time.Since(start))
			if d, _ := sl.AllowN(context.Background(), "k", 0); d.Remaining != L {
				t.Fatalf("after settling every booking at 0: %d left, want %d", d.Remaining, L)
			}
		}
		return best
	}
	oldest, newest := run(true), run(false)
	if oldest > 10*newest+time.Millisecond {
		t.Errorf("settling oldest first took %v, newest first %v: more than 10 times as long", oldest, newest)
	}
}

// insert logs e copies of t among the instants, keeping the newest L and
// raising the floor past those dropped: checked against a sorted slice on random logs, wrapped round the ring at
// random.
func TestSlidingLogInsertModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 0))
	const W = 100
	for range 4000 {
		L := 1 + rng.IntN(10)
		p := &slParams{limit: int64(L), window: W}
		s := slState{ring: make([]int64, L), head: int32(rng.IntN(L)), floor: int64(rng.IntN(3))}
		var model []int64
		for range rng.IntN(L + 1) {
			t := int64(0)
			if len(model) > 0 {
				t = model[len(model)-1] + int64(rng.IntN(3))
			}
			s.push(t, 1)
			model = append(model, t)
		}
		floor := s.floor
		at, e := int64(rng.IntN(len(model)*2+1)), int64(1+rng.IntN(2*L))
		p.insert(&s, at, e)
		if e > int64(L) {
			floor = max(floor, at+W)
		}
		_, j := sort2(model, at)
		model = slices.Insert(model, j, slices.Repeat([]int64{at}, int(min(e, int64(L))))...)
		if over := len(model) - L; over > 0 {
			floor = max(floor, model[over-1]+W)
			model = model[over:]
		}
		got := make([]int64, s.n)
		for k := range s.n {
			got[k] = s.at(k)
		}
		if !slices.Equal(got, model) || s.floor != floor {
			t.Fatalf("insert(%d, %d): log %v floor %d, want %v floor %d", at, e, got, s.floor, model, floor)
		}
	}
}
