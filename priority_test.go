package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var testClasses = []Class{{"critical", 3}, {"normal", 2}, {"sheddable", 0}}

// TestPriorityTimeline: a fixed window of 10 per second, classes critical
// (3 reserved), normal (2) and sheddable (0). Sheddable traffic fills the
// limit up to the reserves and no further; critical gets its 3 while the
// others saturate the limit.
func TestPriorityTimeline(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 10, WithClasses(testClasses...))
	rows := []struct {
		p       Priority
		tenant  string
		ask     int
		allowed int
	}{
		// A flood of sheddable traffic takes the 5 not reserved.
		{2, "batch", 20, 5},
		// Normal gets its 2 reserved, no more: the rest is critical's.
		{1, "web", 5, 2},
		// Critical gets its 3 though the others saturate the limit.
		{0, "pay", 3, 3},
		{0, "pay", 1, 0}, // the window is full
	}
	for i, r := range rows {
		got := 0
		for range r.ask {
			if f.AllowPriority(r.tenant, r.p) {
				got++
			}
		}
		if got != r.allowed {
			t.Errorf("row %d (class %d ×%d): allowed %d, want %d", i, r.p, r.ask, got, r.allowed)
		}
	}
	if used, left, err := f.ClassUsed(0); err != nil || used != 3 || left != 0 {
		t.Errorf("critical: used %d, left %d, %v", used, left, err)
	}
	// w1: past its reserve, critical is decided as without classes, and
	// pay is one tenant of three (s = 3): batch's and web's guarantees (3
	// each) are held, and normal's reserve of 2.
	clk.Set(fairT0.Add(time.Second))
	got := 0
	for range 10 {
		if f.AllowPriority("pay", 0) {
			got++
		}
	}
	if got != 3 {
		t.Errorf("w1: critical got %d of 10, want its 3", got)
	}
	// Allow and AllowN without a priority are the lowest class.
	if f.Allow("x") {
		t.Error("a request without a class took normal's reserve")
	}
	ctx := ContextWithPriority(context.Background(), 1)
	if d, err := f.AllowN(ctx, "web", 2); err != nil || !d.Allowed {
		t.Errorf("normal's reserve: %+v, %v", d, err)
	}
}

func TestPriorityBadInput(t *testing.T) {
	clk := NewManualClock(fairT0)
	fw, _ := NewFixedWindow(PerSecond(10), WithClock(clk))
	for _, c := range []struct {
		name    string
		classes []Class
	}{
		{"none", []Class{}},
		{"zero reserves", []Class{{"a", 0}, {"b", 0}}},
		{"negative", []Class{{"a", -1}, {"b", 2}}},
		{"more than the limit", []Class{{"a", 6}, {"b", 5}}},
	} {
		if _, err := NewFair(fw, PerSecond(10), WithClasses(c.classes...)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", c.name, err)
		}
	}
	// Reserves each within a huge limit whose sum would wrap an int64.
	huge := Rate{N: math.MaxInt64, Period: time.Hour}
	if _, err := NewFair(fw, huge, WithClasses(Class{"a", math.MaxInt64}, Class{"b", math.MaxInt64})); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("reserves adding up past the int64 range: %v, want ErrInvalidOption", err)
	}
	f := newFairFixed(t, clk, 10, WithClasses(testClasses...))
	for _, p := range []Priority{-1, 3} {
		if f.AllowPriority("a", p) {
			t.Errorf("class %d allowed", p)
		}
		if _, err := f.AllowN(ContextWithPriority(context.Background(), p), "a", 1); !errors.Is(err, ErrUnknownClass) {
			t.Errorf("AllowN class %d: %v", p, err)
		}
		if err := f.WaitN(ContextWithPriority(context.Background(), p), "a", 1); !errors.Is(err, ErrUnknownClass) {
			// With nothing queued WaitN first tries AllowN, which refuses the class.
			t.Errorf("WaitN class %d: %v", p, err)
		}
		if _, _, err := f.ClassUsed(p); !errors.Is(err, ErrUnknownClass) {
			t.Errorf("ClassUsed(%d): %v", p, err)
		}
	}
}

// TestPriorityProperty: random classes and reserves, random tenants sending
// random classes, some flooding, over a fixed window whose windows are
// Fair's. In every window no class is refused before it has been allowed
// its reserve, the window never passes N, and Fair allows nothing the
// shared limiter did not.
func TestPriorityProperty(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 28))
		n := int64(10 + rng.IntN(100))
		classes := make([]Class, 1+rng.IntN(4))
		left := n
		for i := range classes {
			r := rng.Int64N(left/2 + 1)
			classes[i] = Class{"c" + strconv.Itoa(i), r}
			left -= r
		}
		if left == n {
			classes[0].Reserved = 1
		}
		clk := NewManualClock(fairT0)
		fw, _ := NewFixedWindow(PerSecond(n), WithClock(clk))
		shared := &countingLimiter{Limiter: fw}
		f, err := NewFair(shared, PerSecond(n), WithFairClock(clk), WithClasses(classes...))
		if err != nil {
			t.Fatal(err)
		}
		type ask struct {
			at     int64
			tenant int
			p      Priority
		}
		var asks []ask
		const windows = 6
		for w := range windows {
			for i := range 1 + rng.IntN(6) {
				k := rng.IntN(int(n))
				if rng.IntN(3) == 0 {
					k = int(n) * 3
				}
				p := Priority(rng.IntN(len(classes)))
				for range k {
					asks = append(asks, ask{int64(w)*1e9 + rng.Int64N(1e9), i, p})
				}
			}
		}
		slices.SortStableFunc(asks, func(a, b ask) int { return int(a.at - b.at) })
		allowed := make([][]int64, windows)
		for w := range allowed {
			allowed[w] = make([]int64, len(classes))
		}
		total := 0
		for _, a := range asks {
			clk.Set(fairT0.Add(time.Duration(a.at)))
			w := a.at / 1e9
			ok := f.AllowPriority("t"+strconv.Itoa(a.tenant), a.p)
			if ok {
				allowed[w][a.p]++
				total++
			} else if allowed[w][a.p] < classes[a.p].Reserved {
				t.Fatalf("seed %d w%d: class %d refused after %d of its reserve %d", seed, w, a.p, allowed[w][a.p], classes[a.p].Reserved)
			}
		}
		for w := range allowed {
			var sum int64
			for _, c := range allowed[w] {
				sum += c
			}
			if sum > n {
				t.Errorf("seed %d w%d: %d allowed of %d", seed, w, sum, n)
			}
		}
		if total != shared.allowed {
			t.Fatalf("seed %d: Fair allowed %d, the shared limiter %d", seed, total, shared.allowed)
		}
	}
}

// Queued waits keep to the reserves too: sheddable waits take only what
// is not reserved for critical, and the rest wait for the next window.
func TestPriorityQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw, err := NewFixedWindow(PerSecond(10))
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFair(fw, PerSecond(10), WithClasses(Class{"critical", 5}, Class{"sheddable", 0}))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // a window's start
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := f.Wait(context.Background(), "batch"); err != nil {
					t.Error(err)
				}
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
			})
		}
		synctest.Wait()
		mu.Lock()
		if len(at) != 5 {
			t.Errorf("%d sheddable waits granted in the first window, want the 5 not reserved", len(at))
		}
		mu.Unlock()
		for i := range 5 {
			if !f.AllowPriority("pay", 0) {
				t.Errorf("critical call %d refused within its reserve", i)
			}
		}
		wg.Wait()
		for _, d := range at[5:] {
			if d < time.Second {
				t.Errorf("a sheddable wait granted at %v, before the next window", d)
			}
		}
	})
}

// Each class decision is reported with the class's name, never the tenant.
func TestPriorityObserver(t *testing.T) {
	clk := NewManualClock(fairT0)
	var c Counter
	var events []Event
	f := newFairFixed(t, clk, 10, WithClasses(testClasses...), WithFairName("api"),
		WithFairObserver(ObserverFunc(func(e Event) { events = append(events, e) })), WithFairObserver(&c))
	for range 8 {
		f.AllowPriority("batch", 2)
	}
	f.AllowPriority("pay", 0)
	if len(events) != 9 {
		t.Fatalf("%d events, want 9", len(events))
	}
	allowed := 0
	for _, e := range events[:8] {
		if e.Kind != EventFairClass || e.Limiter != "api" || e.Key != "sheddable" || e.N != 1 {
			t.Fatalf("event %+v", e)
		}
		if e.Allowed {
			allowed++
		}
	}
	if allowed != 5 || !events[8].Allowed || events[8].Key != "critical" {
		t.Errorf("sheddable allowed %d (want 5); critical event %+v", allowed, events[8])
	}
	if s := c.Get("api"); s.Allowed+s.Denied != 0 {
		t.Errorf("a Counter, which counts decisions only, counted %+v", s)
	}
}
