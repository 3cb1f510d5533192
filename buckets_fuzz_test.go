package ratelimit

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// fuzzTokenBucket and fuzzLeakyBucket build the bucket's pure step from
// fuzzed parameters (the stepFuzz of their entry in algorithms_test.go) and
// state the bound an allowed event must never break: at most
// bound(elapsed) events allowed in total over elapsed nanoseconds from the
// first event (the clock may go backwards; elapsed is the furthest reached).
func fuzzTokenBucket(rate Rate, capacity int) (fuzzStepper, int, func(int64) int64, error) {
	a, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, 0, nil, err
	}
	bound := func(elapsed int64) int64 {
		return satAdd(int64(capacity), a.iv.Count(ftime{Ns: elapsed}))
	}
	return &stateStepper[tbState]{a: a, fresh: true}, capacity, bound, nil
}

func fuzzLeakyBucket(rate Rate, capacity int) (fuzzStepper, int, func(int64) int64, error) {
	a, err := newTBParams(rate, capacity)
	if err != nil {
		return nil, 0, nil, err
	}
	// The queue admits what a token bucket allows (see LeakyBucket); the
	// cancels here are of the last booking, the tail, which it gives back.
	bound := func(elapsed int64) int64 {
		return satAdd(int64(capacity), a.iv.Count(ftime{Ns: elapsed}))
	}
	return &stateStepper[lbState]{a: (*lbParams)(a), fresh: true}, capacity, bound, nil
}

// stepFuzzers returns the registry's algorithms that FuzzAlgorithmStep
// drives, in the registry's order (the corpus picks one by index).
func stepFuzzers() []algorithm {
	var fs []algorithm
	for _, alg := range algorithms {
		if alg.stepFuzz != nil {
			fs = append(fs, alg)
		}
	}
	return fs
}

type fuzzStepper interface {
	step(now, n, maxWait int64) (Decision, booked, bool)
	unstep(n int64, b booked, at int64)
}

// stateStepper drives one key's state through an algo's pure step.
type stateStepper[S any] struct {
	a     stepAlgo[S]
	s     S
	fresh bool
}

func (s *stateStepper[S]) step(now, n, maxWait int64) (Decision, booked, bool) {
	if s.fresh {
		s.a.init(&s.s, now)
		s.fresh = false
	}
	return s.a.step(&s.s, now, n, maxWait)
}

func (s *stateStepper[S]) unstep(n int64, b booked, at int64) { s.a.unstep(&s.s, n, b, at) }

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// FuzzAlgorithmStep: for arbitrary parameters (tiny and huge rates, n up
// to the limit, times near the ends of the clock's range, times moving
// backwards) no panic, no overflow, Remaining within [0, Limit], durations
// never negative, and the events allowed never exceed the algorithm's bound.
func FuzzAlgorithmStep(f *testing.F) {
	f.Add(uint8(0), int64(2), int64(time.Second), uint16(4), int64(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(0), int64(1), int64(24*time.Hour), uint16(1), int64(maxNanos), []byte{255, 255, 255, 255, 255, 255, 255, 255, 1})
	f.Add(uint8(0), int64(math.MaxInt64), int64(1), uint16(65535), int64(1), []byte{9, 8, 7, 6, 5, 4, 3, 2, 1})
	f.Add(uint8(0), int64(3), int64(time.Second), uint16(5), int64(math.MaxInt64), []byte{128, 0, 0, 0, 0, 0, 0, 0, 3, 3})
	f.Add(uint8(0), int64(10), int64(13*time.Second), uint16(3), int64(-1), []byte{1, 0, 0, 0, 0, 0, 0, 128, 2})
	f.Add(uint8(0), int64(1), int64(math.MaxInt64), uint16(1000), int64(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(uint8(1), int64(math.MaxInt64), int64(math.MaxInt64-1), uint16(3), int64(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, alg uint8, n, period int64, capacity uint16, start int64, ops []byte) {
		fuzzers := stepFuzzers()
		spec := fuzzers[int(alg)%len(fuzzers)]
		rate := Rate{N: n, Period: time.Duration(period)}
		stepper, limit, bound, err := spec.stepFuzz(rate, int(capacity))
		if err != nil {
			if !errors.Is(err, ErrInvalidRate) && !errors.Is(err, ErrInvalidCapacity) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		now := min(max(start, minNanos), maxNanos)
		first, furthest := int64(math.MinInt64), now // first: the instant of the first step
		var allowed int64
		type booking struct {
			n  int64
			bk booked
		}
		var bookings []booking
		for len(ops) >= 9 {
			dt := int64(binary.LittleEndian.Uint64(ops))
			k := int64(ops[8]) % int64(limit+1)
			ops = ops[9:]
			now = min(max(satAdd(now, dt>>8), minNanos), maxNanos) // steps both ways
			furthest = max(furthest, now)
			var maxWait int64
			switch {
			case dt&3 == 1:
				maxWait = noMaxWait
			case dt&3 == 2 && len(bookings) > 0:
				b := bookings[len(bookings)-1]
				bookings = bookings[:len(bookings)-1]
				stepper.unstep(b.n, b.bk, now)
				if now <= b.bk.act {
					allowed -= b.n
				}
				continue
			}
			if first == math.MinInt64 {
				first, furthest = now, now
			}
			d, bk, ok := stepper.step(now, k, maxWait)
			act := bk.act
			if d.Remaining < 0 || d.Remaining > limit || d.Limit != limit {
				t.Fatalf("remaining %d of limit %d (decision limit %d)", d.Remaining, limit, d.Limit)
			}
			if d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("negative duration: %+v", d)
			}
			if ok && act < now {
				t.Fatalf("booked in the past: act %d < now %d", act, now)
			}
			if d.Allowed && d.RetryAfter != 0 {
				t.Fatalf("allowed with RetryAfter %v", d.RetryAfter)
			}
			if ok && k > 0 {
				allowed += k
				bookings = append(bookings, booking{k, bk})
				if act > furthest {
					// A booking ahead is allowed at act: measure the bound there.
					furthest = act
				}
				if b := bound(furthest - first); allowed > b {
					t.Fatalf("%d events allowed within %dns of the first, bound %d", allowed, furthest-first, b)
				}
			}
		}
	})
}
