package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Classes over a FixedWindow of the Fair's rate (windows aligned with
// Fair's), on random traces of tenants, sizes, priorities and ways in
// (Allow, AllowN, AllowPriority, Reserve), with and without tenant groups:
// no window allows more than the shared limit N; a request of class c
// whose n is within what c has left of its reserve in the window is never
// refused, whatever the other classes and tenants did before it; and
// ClassUsed agrees with what was allowed. The reserves are random, up to
// all of N between the classes.
func TestFairClassesReserveProperty(t *testing.T) {
	const n = 20
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 77))
		clk := NewManualClock(t0)
		fw, err := NewFixedWindow(PerSecond(n), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		r0 := 1 + rng.Int64N(n/2)
		r1 := rng.Int64N(n - r0 + 1)
		reserves := []int64{r0, r1, 0}
		opts := []FairOption{WithFairClock(clk), WithClasses(Class{Name: "hi", Reserved: r0}, Class{Name: "mid", Reserved: r1}, Class{Name: "lo"})}
		if seed%2 == 1 {
			opts = append(opts, WithTenantGroups([]string{"x"}, func(string) int { return 0 }), WithFairObserver(ObserverFunc(func(Event) {})))
		}
		f, err := NewFair(fw, PerSecond(n), opts...)
		if err != nil {
			t.Fatal(err)
		}
		win := int64(-1)
		var used [3]int64
		total := int64(0)
		for step := range 3000 {
			if w := clk.Now().UnixNano() / int64(time.Second); w != win {
				win, used, total = w, [3]int64{}, 0
			}
			tenant := fmt.Sprint("t", rng.IntN(5))
			p := Priority(rng.IntN(3))
			k := 1 + rng.IntN(3)
			ctx := ContextWithPriority(context.Background(), p)
			var ok bool
			switch rng.IntN(4) {
			case 0:
				k = 1
				ok = f.AllowPriority(tenant, p)
			case 1:
				k, p = 1, 2 // Allow is of the lowest class
				ok = f.Allow(tenant)
			case 2:
				d, err := f.AllowN(ctx, tenant, k)
				if err != nil {
					t.Fatal(err)
				}
				ok = d.Allowed
			default:
				r, err := f.Reserve(ctx, tenant, k)
				if err != nil {
					t.Fatal(err)
				}
				ok = r.OK()
			}
			within := int64(k) <= reserves[p]-used[p]
			if within && !ok {
				t.Fatalf("seed %d step %d: class %d (reserve %d, used %d) refused %d within its reserve; reserves %v, %d of %d used in the window", seed, step, p, reserves[p], used[p], k, reserves, total, n)
			}
			if ok {
				used[p] += int64(k)
				total += int64(k)
			}
			if total > n {
				t.Fatalf("seed %d step %d: %d allowed in one window, past the shared limit %d", seed, step, total, n)
			}
			if step%50 == 0 {
				for c := range 3 {
					u, left, err := f.ClassUsed(Priority(c))
					if err != nil || u != used[c] || left != max(0, reserves[c]-used[c]) {
						t.Fatalf("seed %d step %d: ClassUsed(%d) = %d, %d, %v; want %d, %d", seed, step, c, u, left, err, used[c], max(0, reserves[c]-used[c]))
					}
				}
			}
			clk.Advance(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
		}
	}
}
