package ratelimit

import (
	"context"
	"testing"
)

// The group function is called outside Fair's lock by every way in that
// reports a decision (Allow, AllowN, AllowPriority, Reserve, Wait, WaitN),
// with classes and without, and once per decision. The function checks
// the lock itself with TryLock (a deadlock would hang the test instead of
// failing it): nothing else holds the lock here, as no wait is queued.
func TestFairGroupsOutsideLockEveryPath(t *testing.T) {
	for _, classes := range []bool{false, true} {
		clk := NewManualClock(t0)
		tb, err := NewTokenBucket(PerSecond(100), 100, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var f *Fair
		calls, locked := 0, 0
		group := func(string) int {
			calls++
			if !f.mu.TryLock() {
				locked++
			} else {
				f.mu.Unlock()
			}
			return 0
		}
		opts := []FairOption{WithFairClock(clk), WithTenantGroups([]string{"a"}, group), WithFairObserver(ObserverFunc(func(Event) {}))}
		if classes {
			opts = append(opts, WithClasses(Class{Name: "hi", Reserved: 10}, Class{Name: "lo"}))
		}
		if f, err = NewFair(tb, PerSecond(100), opts...); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		paths := []struct {
			name string
			call func() error
		}{
			{"Allow", func() error { f.Allow("t"); return nil }},
			{"AllowN", func() error { _, err := f.AllowN(ctx, "t", 2); return err }},
			{"Reserve", func() error { _, err := f.Reserve(ctx, "t", 1); return err }},
			{"Wait", func() error { return f.Wait(ctx, "t") }},
			{"WaitN", func() error { return f.WaitN(ctx, "t", 2) }},
		}
		if classes {
			paths = append(paths,
				struct {
					name string
					call func() error
				}{"AllowPriority", func() error { f.AllowPriority("t", 0); return nil }},
				struct {
					name string
					call func() error
				}{"AllowN high", func() error { _, err := f.AllowN(ContextWithPriority(ctx, 0), "t", 1); return err }},
			)
		}
		for _, p := range paths {
			calls, locked = 0, 0
			if err := p.call(); err != nil {
				t.Fatalf("classes %v, %s: %v", classes, p.name, err)
			}
			if calls != 1 || locked != 0 {
				t.Errorf("classes %v, %s: the group function called %d times, %d of them under Fair's lock; want once, never under it", classes, p.name, calls, locked)
			}
		}
	}
}
