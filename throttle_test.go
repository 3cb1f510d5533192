package ratelimit

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var throttleT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// throttleOracle recomputes the SRE formula from the whole trace: every
// request and accept with its instant, counted when its sub-window is the
// current one or one of the nine before it.
type throttleOracle struct {
	k        float64
	width    int64
	requests []int64
	accepts  []int64
}

func (o *throttleOracle) p(now int64) float64 {
	e := floorDiv(now, o.width)
	var req, acc int64
	for _, t := range o.requests {
		if x := floorDiv(t, o.width); x <= e && x > e-throttleBuckets {
			req++
		}
	}
	for _, t := range o.accepts {
		if x := floorDiv(t, o.width); x <= e && x > e-throttleBuckets {
			acc++
		}
	}
	return math.Max(0, (float64(req)-o.k*float64(acc))/(float64(req)+1))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// TestClientThrottleMatchesFormula is the property test of the throttle's
// rule: on random traces (random gaps, random backend outcomes, random K
// and window) every decision is the formula's, evaluated on the actual
// trace, with the same random draws.
func TestClientThrottleMatchesFormula(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		k := 1 + 2*r.Float64()
		window := time.Duration(10 * (1 + r.IntN(100)))
		clock := NewManualClock(throttleT0)
		draws := rand.New(rand.NewPCG(seed, 9))
		var last float64
		th, err := NewClientThrottle(k, window, WithThrottleClock(clock),
			WithThrottleRand(func() float64 { last = draws.Float64(); return last }))
		if err != nil {
			t.Fatal(err)
		}
		o := &throttleOracle{k: k, width: int64(window) / throttleBuckets}
		accept := r.Float64()
		for i := 0; i < 600; i++ {
			if r.IntN(50) == 0 {
				accept = r.Float64() // the backend changes
			}
			clock.Advance(time.Duration(r.IntN(int(window) / 4)))
			now := clock.Now().UnixNano()
			want := o.p(now)
			if got := th.RejectProbability(); got != want {
				t.Fatalf("seed %d step %d: RejectProbability %v, formula %v", seed, i, got, want)
			}
			last = -1
			ok := th.Allow()
			o.requests = append(o.requests, now)
			wantOK := want <= 0 || last >= want
			if want > 0 && last < 0 {
				t.Fatalf("seed %d step %d: p=%v but no random draw", seed, i, want)
			}
			if ok != wantOK {
				t.Fatalf("seed %d step %d: Allow %v, formula says %v (p=%v draw=%v)", seed, i, ok, wantOK, want, last)
			}
			if ok && r.Float64() < accept {
				if r.IntN(3) == 0 {
					clock.Advance(time.Duration(r.IntN(int(window) / 10)))
				}
				th.Record(true)
				o.accepts = append(o.accepts, clock.Now().UnixNano())
			} else if ok {
				th.Record(false)
			}
		}
	}
}

// runThrottle drives a throttle at one call every step against a backend
// that accepts each sent call with probability accept, and returns the
// number of calls sent, rejected locally, and the sum of the formula's
// probabilities over the calls (the expected number of local rejections).
func runThrottle(th *ClientThrottle, clock *ManualClock, backend *rand.Rand, accept float64, calls int, step time.Duration) (sent, rejected int, expected float64) {
	for range calls {
		clock.Advance(step)
		expected += th.RejectProbability()
		if !th.Allow() {
			rejected++
			continue
		}
		sent++
		th.Record(backend.Float64() < accept)
	}
	return sent, rejected, expected
}

func newTestThrottle(t *testing.T, k float64, window time.Duration, seed uint64) (*ClientThrottle, *ManualClock) {
	t.Helper()
	clock := NewManualClock(throttleT0)
	src := rand.New(rand.NewPCG(seed, 1))
	th, err := NewClientThrottle(k, window, WithThrottleClock(clock), WithThrottleRand(src.Float64))
	if err != nil {
		t.Fatal(err)
	}
	return th, clock
}

// With the backend failing 75% of calls, the share rejected locally is the
// formula's on the actual trace, within 10%.
func TestClientThrottleFailingBackend(t *testing.T) {
	th, clock := newTestThrottle(t, 2, time.Second, 3)
	backend := rand.New(rand.NewPCG(4, 4))
	_, rejected, expected := runThrottle(th, clock, backend, 0.25, 100_000, time.Millisecond)
	if expected < 1000 {
		t.Fatalf("expected rejections %v: the throttle hardly engaged", expected)
	}
	if d := math.Abs(float64(rejected)-expected) / expected; d > 0.10 {
		t.Fatalf("rejected %d, formula on the trace says %.0f (off by %.1f%%)", rejected, expected, 100*d)
	}
	// Ka < 1: the throttle sends little, but it never stops probing.
	if p := th.RejectProbability(); p < 0.5 || p >= 1 {
		t.Fatalf("probability %v after a long failure, want in [0.5, 1)", p)
	}
}

// At 50% failures K = 2 is the neutral point: the throttle never rejects
// more than the formula says (and the formula itself stays low when it
// starts from a healthy backend).
func TestClientThrottleNeutralPoint(t *testing.T) {
	th, clock := newTestThrottle(t, 2, time.Second, 5)
	backend := rand.New(rand.NewPCG(6, 6))
	runThrottle(th, clock, backend, 1, 2_000, time.Millisecond) // healthy start
	_, rejected, expected := runThrottle(th, clock, backend, 0.5, 50_000, time.Millisecond)
	// Poisson-like spread of the count: allow three standard deviations.
	if slack := 3*math.Sqrt(expected) + 10; float64(rejected) > expected+slack {
		t.Fatalf("rejected %d, formula on the trace says %.0f", rejected, expected)
	}
	if float64(rejected) > 0.25*50_000 {
		t.Fatalf("rejected %d of 50000 at the neutral point", rejected)
	}
}

// After the backend recovers the throttle lifts: within one window when it
// was still sending most calls, within a few windows after a total outage.
func TestClientThrottleLifts(t *testing.T) {
	const window = time.Second
	t.Run("from mostly sending", func(t *testing.T) {
		th, clock := newTestThrottle(t, 2, window, 7)
		backend := rand.New(rand.NewPCG(8, 8))
		runThrottle(th, clock, backend, 0.6, 20_000, time.Millisecond)
		if p := th.RejectProbability(); p > 0.5 {
			t.Fatalf("probability %v at 60%% accepts; want the throttle still sending most calls", p)
		}
		runThrottle(th, clock, backend, 1, 1000, time.Millisecond) // one window
		if p := th.RejectProbability(); p != 0 {
			t.Fatalf("probability %v one window after recovery, want 0", p)
		}
	})
	t.Run("from an outage", func(t *testing.T) {
		th, clock := newTestThrottle(t, 2, window, 9)
		backend := rand.New(rand.NewPCG(10, 10))
		runThrottle(th, clock, backend, 0, 20_000, time.Millisecond)
		if p := th.RejectProbability(); p < 0.99 {
			t.Fatalf("probability %v after an outage, want ≥ 0.99", p)
		}
		windows := 0
		for th.RejectProbability() > 0 {
			windows++
			if windows > 15 {
				t.Fatalf("still throttling %d windows after recovery (p=%v)", windows, th.RejectProbability())
			}
			runThrottle(th, clock, backend, 1, 1000, time.Millisecond)
		}
		t.Logf("lifted after %d windows", windows)
	})
}

func TestClientThrottleAllAcceptedNeverRejects(t *testing.T) {
	th, clock := newTestThrottle(t, 1, time.Second, 11)
	backend := rand.New(rand.NewPCG(1, 1))
	if _, rejected, _ := runThrottle(th, clock, backend, 1, 10_000, 100*time.Microsecond); rejected != 0 {
		t.Fatalf("rejected %d calls of a backend that accepts all", rejected)
	}
}

// Timeline: K = 2, window 1s (sub-windows of 100ms).
func TestClientThrottleTimeline(t *testing.T) {
	th, clock := newTestThrottle(t, 2, time.Second, 12)
	// t0: four calls, none accepted; p before each is n/(n+1) for the n
	// requests already counted: 0, 1/2, 2/3, 3/4.
	for i, want := range []float64{0, 1.0 / 2, 2.0 / 3, 3.0 / 4} {
		if got := th.RejectProbability(); got != want {
			t.Fatalf("call %d: p = %v, want %v", i, got, want)
		}
		th.Allow()
	}
	// t0+100ms: one accept: (4 − 2)/(4+1) = 0.4.
	clock.Advance(100 * time.Millisecond)
	th.Record(true)
	if got := th.RejectProbability(); got != 0.4 {
		t.Fatalf("p = %v after an accept, want 0.4", got)
	}
	// t0+999ms: still inside the window.
	clock.Advance(899 * time.Millisecond)
	if got := th.RejectProbability(); got != 0.4 {
		t.Fatalf("p = %v at t0+999ms, want 0.4", got)
	}
	// t0+1s: t0's sub-window has left the window: (0 − 2)/1 → 0.
	clock.Advance(time.Millisecond)
	if got := th.RejectProbability(); got != 0 {
		t.Fatalf("p = %v at t0+1s, want 0", got)
	}
	// A clock stepped backwards neither revives nor loses counts.
	clock.Set(throttleT0)
	if got := th.RejectProbability(); got != 0 {
		t.Fatalf("p = %v after the clock went back, want 0", got)
	}
}

func TestClientThrottleInvalid(t *testing.T) {
	for _, tc := range []struct {
		k      float64
		window time.Duration
		opts   []ThrottleOption
	}{
		{0.5, time.Second, nil},
		{math.NaN(), time.Second, nil},
		{math.Inf(1), time.Second, nil},
		{2, 0, nil},
		{2, -time.Second, nil},
		{2, 15, nil},
		{2, time.Second, []ThrottleOption{WithThrottleClock(nil)}},
		{2, time.Second, []ThrottleOption{WithThrottleRand(nil)}},
	} {
		if _, err := NewClientThrottle(tc.k, tc.window, tc.opts...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("NewClientThrottle(%v, %v): err %v, want ErrInvalidOption", tc.k, tc.window, err)
		}
	}
}

// A million calls: no allocation and no growth; the state is a fixed array.
func TestClientThrottleNoGrowth(t *testing.T) {
	th, clock := newTestThrottle(t, 2, time.Second, 13)
	n := 0
	allocs := testing.AllocsPerRun(1_000_000, func() {
		clock.Advance(time.Microsecond)
		if th.Allow() {
			n++
			th.Record(n%4 == 0)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a call", allocs)
	}
}
