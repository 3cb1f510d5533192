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

// Settling (or cancelling) bookings in the order they were made, as a
// server's requests finish, moves no other instant: the gap of each
// removal is closed from its shorter side, so L removals cost O(L), not
// O(L²) under the key's lock. Counted, not timed.
func TestSlidingLogSettleOldestFirstIsCheap(t *testing.T) {
	const L = 4096
	for _, oldestFirst := range []bool{true, false} {
		s := slState{ring: make([]int64, L), n: L, head: L / 3} // wrapped round the ring
		for i := range s.ring {
			s.ring[(int(s.head)+i)%L] = 1000 + int64(i)
		}
		var moved int64
		for i := range int64(L) {
			at := 1000 + i
			if !oldestFirst {
				at = 1000 + L - 1 - i
			}
			moved += int64(s.remove(at, 1))
		}
		if s.n != 0 || moved != 0 {
			t.Errorf("oldest first %v: %d instants left, %d moved; want none left and none moved", oldestFirst, s.n, moved)
		}
	}
	// A removal in the middle moves the shorter side only.
	s := slState{ring: make([]int64, 10), n: 10}
	for i := range s.ring {
		s.ring[i] = int64(i)
	}
	if moved := s.remove(3, 1); moved != 3 {
		t.Errorf("removing the 4th of 10 moved %d, want the 3 before it", moved)
	}
	if moved := s.remove(7, 1); moved != 2 {
		t.Errorf("removing the 7th of 9 moved %d, want the 2 after it", moved)
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

// TestSlidingLogForgetsDebtWithWindow pins what docs/algorithms.md says of
// the sliding log over intervals longer than W: a debt settled once its
// booking's window has passed holds nothing back; one settled within it
// closes the key until that window ends, and not after.
func TestSlidingLogForgetsDebtWithWindow(t *testing.T) {
	ctx := context.Background()
	for _, late := range []bool{false, true} {
		clk := NewManualClock(time.Unix(1000, 0))
		sl, err := NewSlidingLog(Per(1, time.Second), WithClock(clk))
		must(t, err)
		r, err := sl.Take(ctx, "k", 1)
		must(t, err)
		if late {
			clk.Advance(2 * time.Second)
		} else {
			clk.Advance(500 * time.Millisecond)
		}
		if _, err := r.Settle(5); err != nil {
			t.Fatal(err)
		}
		if !late {
			if sl.Allow("k") {
				t.Fatal("allowed within the window of a debt of 4")
			}
			clk.Advance(500*time.Millisecond - 1)
			if sl.Allow("k") {
				t.Fatal("allowed 1ns before the window of the debt ends")
			}
			clk.Advance(1)
		}
		if !sl.Allow("k") {
			t.Errorf("late %v: refused once the booking's window has passed", late)
		}
	}
}
