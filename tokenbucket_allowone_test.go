package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Allow's step, allowOne, is admit for one token with no wait: the same
// answer and the same state after, for any state, instant and parameters,
// including a state written under the parameters before a change (which
// both re-express first) and states a nanosecond either side of the last
// token.
func TestAllowOneIsAdmit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 29))
	rates := []struct {
		rate     Rate
		capacity int
	}{
		{Per(4, time.Second), 4},
		{Per(3, time.Second), 5},           // thirds of a ns
		{Per(7, time.Second), 1},           // sevenths, a capacity of one
		{Per(1_000_003, time.Second), 50},  // a large denominator
		{Per(1<<52-3, 30*24*time.Hour), 9}, // an interval of about 0.58 ns
		{Per(1, time.Hour), 2},
	}
	for i, old := range rates {
		for j, cur := range rates {
			t.Run(fmt.Sprint(i, "to", j), func(t *testing.T) {
				p0, err := newTBParams(old.rate, old.capacity)
				if err != nil {
					t.Fatal(err)
				}
				p, err := newTBParams(cur.rate, cur.capacity)
				if err != nil {
					t.Fatal(err)
				}
				const t0 = int64(1_700_000_000_000_000_000)
				p.succeed(p0, t0)
				allowed, refused := 0, 0
				for range 2000 {
					under := p
					if rng.IntN(3) == 0 {
						under = p0 // written before the change: both adopt
					}
					now := t0 + rng.Int64N(int64(4*time.Hour)) - int64(time.Hour)
					tat := now + rng.Int64N(int64(2*time.Hour)) - int64(time.Hour)
					s := tbState{tat: ftime{Ns: tat, Fr: rng.Int64N(under.iv.Den)}, gen: under.gen, kgen: rng.Uint32()}
					if under == p && rng.IntN(2) == 0 {
						// Near the edge: one token left, give or take a
						// nanosecond.
						s.tat = p.iv.Sub(ftime{Ns: now + p.tau.Ns, Fr: p.tau.Fr}, 1)
						s.tat.Ns += rng.Int64N(3) - 1
					}
					a, b := s, s
					ok := p.allowOne(&a, now)
					_, want := p.admit(&b, now, 1, 0)
					if ok != want || a != b {
						t.Fatalf("state %+v at %d: allowOne %v, %+v; admit %v, %+v", s, now, ok, a, want, b)
					}
					if ok {
						allowed++
					} else {
						refused++
					}
				}
				if allowed == 0 || refused == 0 {
					t.Fatalf("%d allowed, %d refused: both answers must be tried", allowed, refused)
				}
			})
		}
	}
}
