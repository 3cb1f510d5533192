package ratelimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestManualClockTimersFireInOrder(t *testing.T) {
	clk := NewManualClock(epoch)
	t3 := clk.NewTimer(3 * time.Second)
	t1 := clk.NewTimer(time.Second)
	t2 := clk.NewTimer(2 * time.Second)
	if n := clk.Timers(); n != 3 {
		t.Fatalf("Timers = %d, want 3", n)
	}
	clk.Advance(1500 * time.Millisecond)
	select {
	case got := <-t1.C():
		if !got.Equal(epoch.Add(1500 * time.Millisecond)) {
			t.Fatalf("t1 fired with %v", got)
		}
	default:
		t.Fatal("t1 did not fire at 1.5s")
	}
	select {
	case <-t2.C():
		t.Fatal("t2 fired early")
	default:
	}
	if !t2.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if t2.Stop() {
		t.Fatal("second Stop returned true")
	}
	clk.Set(epoch.Add(10 * time.Second))
	select {
	case <-t3.C():
	default:
		t.Fatal("t3 did not fire at 10s")
	}
	select {
	case <-t2.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if t3.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	if n := clk.Timers(); n != 0 {
		t.Fatalf("Timers = %d, want 0", n)
	}
}

func TestManualClockBackwardsAndZeroTimer(t *testing.T) {
	clk := NewManualClock(epoch)
	tm := clk.NewTimer(time.Second)
	clk.Advance(-time.Hour)
	clk.Advance(time.Hour) // back at epoch: not yet due
	select {
	case <-tm.C():
		t.Fatal("fired before its deadline")
	default:
	}
	clk.Advance(time.Second)
	<-tm.C()
	z := clk.NewTimer(0)
	select {
	case <-z.C():
	default:
		t.Fatal("zero-duration timer did not fire at once")
	}
	if !clk.Now().Equal(epoch.Add(time.Second)) {
		t.Fatalf("Now = %v", clk.Now())
	}
}

func TestNanoClockSystemIsMonotonicUnixNanos(t *testing.T) {
	nc := newNanoClock(SystemClock())
	a := nc.now()
	wall := time.Now().UnixNano()
	b := nc.now()
	if b < a {
		t.Fatalf("went backwards: %d then %d", a, b)
	}
	if diff := wall - a; diff < -int64(time.Second) || diff > int64(time.Second) {
		t.Fatalf("system nanos %d far from wall %d", a, wall)
	}
	if got := nc.timeOf(a); got.UnixNano() != a {
		t.Fatalf("timeOf(%d) = %v", a, got)
	}
	m := newNanoClock(NewManualClock(epoch))
	if m.now() != epoch.UnixNano() {
		t.Fatalf("manual nanos = %d", m.now())
	}
}

// The default clock follows the fake time of a synctest bubble, so blocking
// code can be tested with the system clock too.
func TestSystemClockUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb, err := NewTokenBucket(PerSecond(1), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !tb.Allow("k") || tb.Allow("k") {
			t.Fatal("want one allowed, then denied")
		}
		start := time.Now()
		if err := tb.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("waited %v in the bubble, want exactly 1s", waited)
		}
	})
}
