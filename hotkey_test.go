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

// One key hit by many goroutines at once (a global bucket), the case where
// callers on the key queue and park behind each other in the store. The
// clock is frozen while they run and advanced between phases, so the
// grants are known in closed form: a lost update shows as too many, a
// lost wake-up as a test that never ends. Each phase asks for more events
// than can be granted, so every phase ends with the allowance spent.
//
// Token bucket, capacity C, one token per millisecond: phase 0 grants C;
// a phase after an advance of d ms grants min(d, C). Fixed window, L per
// second: phase 0 grants L; a phase after an advance that reaches a new
// window grants L, one that stays in the same window 0. The advances are
// random (seeded) up to 1.5 s, so both cases come up.
func TestHotKeyExactCounts(t *testing.T) {
	const (
		goroutines = 8
		calls      = 1000 // per goroutine and phase: far more than any phase grants
		phases     = 12
		capacity   = 50
		limit      = 30
	)
	for _, procs := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("procs=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			rng := rand.New(rand.NewPCG(uint64(procs), 19))
			clock := NewManualClock(time.Unix(1_000_000, 0))
			tb, err := NewTokenBucket(Per(1, time.Millisecond), capacity, WithClock(clock), WithShards(1))
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			fw, err := NewFixedWindow(Per(limit, time.Second), WithClock(clock), WithShards(1))
			if err != nil {
				t.Fatal(err)
			}
			defer fw.Close()

			// run has every goroutine ask lim for calls events on key "",
			// by Allow and AllowN(1) in turn, and returns the grants.
			run := func(lim Limiter) int64 {
				var got atomic.Int64
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Go(func() {
						for i := range calls {
							ok := false
							if (g+i)%2 == 0 {
								ok = lim.Allow("")
							} else {
								d, err := lim.AllowN(bg, "", 1)
								if err != nil {
									t.Errorf("AllowN: %v", err)
									return
								}
								ok = d.Allowed
							}
							if ok {
								got.Add(1)
							}
						}
					})
				}
				wg.Wait()
				return got.Load()
			}

			// The fixed window is aligned to the clock's epoch and the
			// clock starts on a whole second: pos is how far into its
			// window the clock is, in ms.
			var pos, tbWant, tbGot, fwWant, fwGot int64
			for p := range phases {
				wantTB, wantFW := int64(capacity), int64(limit)
				var d int64 // ms advanced before this phase
				if p > 0 {
					d = 1 + rng.Int64N(1500)
					clock.Advance(time.Duration(d) * time.Millisecond)
					wantTB = min(d, capacity)
					if pos+d < 1000 {
						wantFW = 0 // the same window, spent
					}
					pos = (pos + d) % 1000
				}
				gotTB := run(tb)
				if gotTB != wantTB {
					t.Errorf("phase %d, token bucket after %d ms: granted %d, want exactly %d", p, d, gotTB, wantTB)
				}
				gotFW := run(fw)
				if gotFW != wantFW {
					t.Errorf("phase %d, fixed window after %d ms, %d ms into a window: granted %d, want exactly %d", p, d, pos, gotFW, wantFW)
				}
				tbWant, tbGot = tbWant+wantTB, tbGot+gotTB
				fwWant, fwGot = fwWant+wantFW, fwGot+gotFW
			}
			if tbGot != tbWant || fwGot != fwWant {
				t.Errorf("totals: token bucket %d (want %d), fixed window %d (want %d)", tbGot, tbWant, fwGot, fwWant)
			}
		})
	}
}
