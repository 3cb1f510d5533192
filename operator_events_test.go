package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// opRecorder records the events other than decisions, and peeks at the
// key from inside Observe: an event reported under one of the limiter's
// locks would deadlock here.
type opRecorder struct {
	mu  sync.Mutex
	l   testLimiter
	got []Event
}

func (o *opRecorder) Observe(e Event) {
	if e.Kind == EventDecision {
		return
	}
	if o.l != nil {
		o.l.AllowN(context.Background(), e.Key, 0)
	}
	o.mu.Lock()
	o.got = append(o.got, e)
	o.mu.Unlock()
}

// TestOperatorEvents: SetRate, SetOverride, RemoveOverride (of a key that
// has one; none for one that has not), Reset and Settle each report one
// event of their kind, with the fields their docs give, on every
// algorithm; a refused SetRate reports nothing.
func TestOperatorEvents(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			rec := &opRecorder{}
			clk := NewManualClock(time.Unix(1000, 0))
			l, err := alg.new(6, time.Second, clk, WithName("api"), WithObserver(rec))
			must(t, err)
			defer l.Close()
			rec.l = l
			must(t, alg.setRate(l, Per(8, time.Second), 8))
			if alg.setRate(l, Rate{}, 0) == nil {
				t.Fatal("SetRate of a zero rate accepted")
			}
			must(t, alg.setOverride(l, "team-a", Per(20, time.Second), 20))
			l.RemoveOverride("team-a")
			l.RemoveOverride("team-b") // had none: no event
			l.Reset("k")
			r, err := l.(Taker).Take(ctx, "k", 2)
			must(t, err)
			d, err := r.Settle(3)
			must(t, err)
			want := []Event{
				{Limiter: "api", N: 8, Kind: EventSetRate},
				{Limiter: "api", Key: "team-a", N: 20, Kind: EventSetOverride},
				{Limiter: "api", Key: "team-a", Kind: EventRemoveOverride},
				{Limiter: "api", Key: "k", Kind: EventReset},
				{Limiter: "api", Key: "k", N: 3, Allowed: true, Remaining: d.Remaining, Kind: EventSettle},
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.got) != len(want) {
				t.Fatalf("events %+v, want %+v", rec.got, want)
			}
			for i := range want {
				if rec.got[i] != want[i] {
					t.Errorf("event %d: %+v, want %+v", i, rec.got[i], want[i])
				}
			}
		})
	}
}

// TestOperatorEventsNotCounted: the decision counters skip operator
// events.
func TestOperatorEventsNotCounted(t *testing.T) {
	c := &Counter{}
	tb, err := NewTokenBucket(PerSecond(5), 6, WithName("api"), WithObserver(c))
	must(t, err)
	must(t, tb.SetRate(PerSecond(6), 6))
	tb.Reset("k")
	if got := c.Get("api"); got != (Counts{}) {
		t.Errorf("operator events counted as decisions: %+v", got)
	}
}
