package ratelimit

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// winStepper drives one key's state of a window algorithm through its pure
// step, and can copy itself to try a step without consequence.
type winStepper interface {
	step(now, n, maxWait int64) (Decision, booked, bool)
	unstep(n int64, b booked, at int64)
	atRest(now int64) bool
	fresh(now int64) winStepper // a new key's state at now
	clone() winStepper
	equal(o winStepper) bool
}

type fwStepper struct {
	a *fwParams
	s fwState
}

func (w *fwStepper) step(now, n, mw int64) (Decision, booked, bool) {
	return w.a.step(&w.s, now, n, mw)
}
func (w *fwStepper) unstep(n int64, b booked, at int64) { w.a.unstep(&w.s, n, b, at) }
func (w *fwStepper) atRest(now int64) bool              { return w.a.atRest(&w.s, now) }
func (w *fwStepper) clone() winStepper                  { c := *w; return &c }
func (w *fwStepper) equal(o winStepper) bool            { return w.s == o.(*fwStepper).s }
func (w *fwStepper) fresh(now int64) winStepper {
	c := &fwStepper{a: w.a}
	c.a.init(&c.s, now)
	return c
}

type swcStepper struct {
	a *swcParams
	s swcState
}

func (w *swcStepper) step(now, n, mw int64) (Decision, booked, bool) {
	return w.a.step(&w.s, now, n, mw)
}
func (w *swcStepper) unstep(n int64, b booked, at int64) { w.a.unstep(&w.s, n, b, at) }
func (w *swcStepper) atRest(now int64) bool              { return w.a.atRest(&w.s, now) }
func (w *swcStepper) clone() winStepper                  { c := *w; return &c }
func (w *swcStepper) equal(o winStepper) bool            { return w.s == o.(*swcStepper).s }
func (w *swcStepper) fresh(now int64) winStepper {
	c := &swcStepper{a: w.a}
	c.a.init(&c.s, now)
	return c
}

type slStepper struct {
	a *slParams
	s slState
}

func (w *slStepper) step(now, n, mw int64) (Decision, booked, bool) {
	return w.a.step(&w.s, now, n, mw)
}
func (w *slStepper) unstep(n int64, b booked, at int64) { w.a.unstep(&w.s, n, b, at) }
func (w *slStepper) atRest(now int64) bool              { return w.a.atRest(&w.s, now) }
func (w *slStepper) clone() winStepper {
	c := *w
	c.s.ring = slices.Clone(w.s.ring)
	return &c
}
func (w *slStepper) fresh(now int64) winStepper {
	c := &slStepper{a: w.a}
	c.a.init(&c.s, now)
	return c
}

// equal compares the logs as sequences, whatever their place in the ring.
func (w *slStepper) equal(o winStepper) bool {
	v := o.(*slStepper)
	if w.s.n != v.s.n || w.s.floor != v.s.floor {
		return false
	}
	for i := range w.s.n {
		if w.s.at(i) != v.s.at(i) {
			return false
		}
	}
	return true
}

// newWinStepper builds the window algorithm picked by alg (by index, in
// the registry's order, as the corpus expects) from a fuzzed rate.
func newWinStepper(alg uint8, rate Rate) (winStepper, error) {
	ws := windowAlgorithms()
	return ws[int(alg)%len(ws)].windowFuzz(rate)
}

// fuzzFixedWindow, fuzzSlidingLog and fuzzSlidingCounter build the window
// algorithm's stepper (the windowFuzz of their entry in algorithms_test.go)
// through its constructor, so that invalid rates meet the constructor's
// checks.
func fuzzFixedWindow(rate Rate) (winStepper, error) {
	l, err := NewFixedWindow(rate)
	if err != nil {
		return nil, err
	}
	return &fwStepper{a: l.k.ps.p.Load()}, nil
}

func fuzzSlidingLog(rate Rate) (winStepper, error) {
	// Keep the log small: the fuzzer would otherwise spend its time
	// allocating rings of a million instants.
	if rate.N > 1024 {
		rate.N = 1 + rate.N%1024
	}
	l, err := NewSlidingLog(rate)
	if err != nil {
		return nil, err
	}
	return &slStepper{a: l.k.ps.p.Load()}, nil
}

func fuzzSlidingCounter(rate Rate) (winStepper, error) {
	l, err := NewSlidingWindowCounter(rate)
	if err != nil {
		return nil, err
	}
	return &swcStepper{a: l.k.ps.p.Load()}, nil
}

// FuzzWindowStep drives a window algorithm's step with fuzzed rates (tiny
// and huge), n up to the limit, instants across the clock's whole range,
// moving both ways, bookings and cancels, and checks on every step: the
// decision's fields are in range; a refusal or a peek changes nothing;
// Remaining is exact (that many fit now, one more does not); a denial's
// RetryAfter is exact (1ns earlier is denied, then allowed); a state at rest
// decides like a new key's. At the end the events that happened (allowed,
// or booked and not cancelled in time) keep the algorithm's promise: per
// window for the fixed window, per interval of length W for the sliding log
// (L) and the sliding counter (2L − ⌈2L/W⌉).
func FuzzWindowStep(f *testing.F) {
	t0 := winT0.UnixNano()
	f.Add(uint8(0), int64(3), int64(time.Second), t0, []byte{0, 1, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Add(uint8(1), int64(4), int64(1000), t0, []byte{5, 0, 0, 0, 0, 0, 0, 0, 4, 1, 1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(2), int64(10), int64(time.Second), t0, []byte{0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0x40, 0, 0, 0, 0, 0, 5, 1, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add(uint8(2), int64(math.MaxInt64), maxSpan, int64(maxNanos), []byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 1, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Add(uint8(0), int64(math.MaxInt64), int64(1), int64(0), []byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3})
	f.Add(uint8(1), int64(2), int64(3), int64(-5), []byte{0, 0, 0, 0, 0, 0, 0, 128, 2, 1, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, alg uint8, n, period, start int64, ops []byte) {
		st, err := newWinStepper(alg, Rate{N: n, Period: time.Duration(period)})
		if err != nil {
			if !errors.Is(err, ErrInvalidRate) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		var limit, w int64
		switch a := st.(type) {
		case *fwStepper:
			limit, w = a.a.limit, a.a.window
		case *slStepper:
			limit, w = a.a.limit, a.a.window
		case *swcStepper:
			limit, w = a.a.limit, a.a.window
		}
		now := min(max(start, minNanos), maxNanos)
		st = st.fresh(now)
		type event struct{ t, n int64 }
		var happened []event
		type booking struct {
			n  int64
			bk booked
		}
		var bookings []booking
		for len(ops) >= 9 {
			dt := int64(binary.LittleEndian.Uint64(ops))
			k := int64(ops[8]) % (limit + 1)
			if ops[8] == 255 {
				k = limit
			}
			ops = ops[9:]
			now = min(max(satAdd(now, dt>>8), minNanos), maxNanos) // steps both ways
			var maxWait int64                                      // AllowN
			switch dt & 3 {
			case 1: // Reserve
				maxWait = noMaxWait
			case 2: // Cancel the newest booking
				if len(bookings) > 0 {
					b := bookings[len(bookings)-1]
					bookings = bookings[:len(bookings)-1]
					st.unstep(b.n, b.bk, now)
					if now > b.bk.act {
						happened = append(happened, event{b.bk.act, b.n})
					}
				}
				continue
			case 3: // WaitN with a deadline
				maxWait = (dt >> 2) & (1<<40 - 1)
			}

			before := st.clone()
			d, bk, ok := st.step(now, k, maxWait)
			act := bk.act
			switch {
			case d.Limit != int(limit) || d.Remaining < 0 || int64(d.Remaining) > limit:
				t.Fatalf("limit %d: %+v", limit, d)
			case d.RetryAfter < 0 || d.ResetAfter < 0:
				t.Fatalf("negative duration: %+v", d)
			case d.Allowed && (!ok || act != now || d.RetryAfter != 0):
				t.Fatalf("allowed, but ok %v, act %d at now %d: %+v", ok, act, now, d)
			case ok && (act < now || act-now > maxSpan || (maxWait >= 0 && act-now > maxWait)):
				t.Fatalf("booked at %d from %d with maxWait %d", act, now, maxWait)
			case k == 0 && !d.Allowed:
				t.Fatalf("peek not allowed: %+v", d)
			case (!ok || k == 0) && !st.equal(before):
				t.Fatalf("a refusal or a peek changed the state: %+v", d)
			}
			if ok && k > 0 {
				bookings = append(bookings, booking{k, bk})
			}
			if !ok && maxWait == 0 && k > 0 && d.RetryAfter <= time.Duration(maxSpan) {
				retry := now + int64(d.RetryAfter)
				if d1, _, _ := before.clone().step(retry-1, k, 0); d1.Allowed {
					t.Fatalf("denied with RetryAfter %v, yet allowed 1ns earlier", d.RetryAfter)
				}
				if d2, _, _ := before.clone().step(retry, k, 0); !d2.Allowed {
					t.Fatalf("denied with RetryAfter %v, and denied then: %+v", d.RetryAfter, d2)
				}
			}

			// Remaining is exact.
			peek, _, _ := st.clone().step(now, 0, 0)
			if r := int64(peek.Remaining); r > 0 {
				if d1, _, _ := st.clone().step(now, r, 0); !d1.Allowed {
					t.Fatalf("Remaining %d, yet %d denied: %+v", r, r, d1)
				}
			}
			if r := int64(peek.Remaining); r < limit {
				if d1, _, _ := st.clone().step(now, r+1, 0); d1.Allowed {
					t.Fatalf("Remaining %d, yet %d allowed", r, r+1)
				}
			}
			// A state at rest decides like a new key's, now and later.
			if st.atRest(now) {
				for _, later := range []int64{now, now + w/2, now + w, now + 2*w + 1} {
					for _, m := range []int64{0, 1, limit} {
						got, _, _ := st.clone().step(later, m, 0)
						want, _, _ := st.fresh(now).step(later, m, 0)
						if got != want {
							t.Fatalf("at rest at %d, but at %d (n=%d) decides %+v, a new key %+v", now, later, m, got, want)
						}
					}
				}
			}
		}
		for _, b := range bookings {
			happened = append(happened, event{b.bk.act, b.n})
		}

		// What happened keeps the promise.
		slices.SortFunc(happened, func(a, b event) int { return cmp.Compare(a.t, b.t) })
		var bound uint64
		switch st.(type) {
		case *fwStepper:
			bound = uint64(limit)
			for i := 0; i < len(happened); {
				ws := windowStart(happened[i].t, w)
				var sum uint64
				for ; i < len(happened) && windowStart(happened[i].t, w) == ws; i++ {
					sum += uint64(happened[i].n)
				}
				if sum > bound {
					t.Fatalf("%d events in window [%d, %d), limit %d", sum, ws, ws+w, limit)
				}
			}
			return
		case *slStepper:
			bound = uint64(limit)
		case *swcStepper:
			bound = uint64(limit)
			if w >= 2 {
				bound = 2*uint64(limit) - (2*uint64(limit)+uint64(w)-1)/uint64(w)
			}
		}
		var in uint64
		lo := 0
		for hi := range happened {
			in += uint64(happened[hi].n)
			for happened[lo].t <= happened[hi].t-w {
				in -= uint64(happened[lo].n)
				lo++
			}
			if hi+1 < len(happened) && happened[hi+1].t == happened[hi].t {
				continue // count every event at this instant first
			}
			if in > bound {
				t.Fatalf("%d events in (%d, %d], bound %d", in, happened[hi].t-w, happened[hi].t, bound)
			}
		}
	})
}
