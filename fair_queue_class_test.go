package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestFairQueueClassOrder pins the class order of Fair's queue: critical
// waits queued after batch ones are granted first when capacity comes
// back, and the batch ones then take what is left, round-robin.
func TestFairQueueClassOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := NewManualClock(fairT0)
		f := newFairFixed(t, clk, 4, WithClasses(Class{"critical", 1}, Class{"batch", 0}))
		// Batch may take 3 of the window's 4: 1 is held for critical.
		if got := allowRun(f, "drain", 4); got != 3 {
			t.Fatalf("batch allowed %d of 4, want 3", got)
		}
		crit := ContextWithPriority(context.Background(), 0)
		var batch, critical []<-chan error
		for i := range 3 { // queued first, two tenants
			batch = append(batch, bhGo(func() error { return f.Wait(context.Background(), fmt.Sprint("x", i%2)) }))
			synctest.Wait()
		}
		// The critical reserve of this window is still free: a critical wait
		// takes it at once, not queued behind batch.
		if err := bhDone(t, bhGo(func() error { return f.Wait(crit, "z") }), "critical within its reserve"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			critical = append(critical, bhGo(func() error { return f.Wait(crit, "z") }))
			synctest.Wait()
		}
		if q := f.Queued(); q != 6 {
			t.Fatalf("%d queued, want 6", q)
		}
		clk.Advance(time.Second) // a new window: 4 more
		for i, ch := range critical {
			if err := bhDone(t, ch, fmt.Sprintf("critical %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bhDone(t, batch[0], "batch 0"); err != nil {
			t.Fatal(err)
		}
		bhPending(t, batch[1], "batch 1")
		bhPending(t, batch[2], "batch 2")
		clk.Advance(time.Second)
		for i := 1; i < 3; i++ {
			if err := bhDone(t, batch[i], fmt.Sprintf("batch %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if q := f.Queued(); q != 0 {
			t.Fatalf("%d queued, want 0", q)
		}
	})
}
