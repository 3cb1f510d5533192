package redis

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// TestOperatorEvents: the Redis limiters report the operator actions as
// the in-memory ones do, each once, after the change succeeded and with
// the limiter's mutex free (the observer tries it), and a removal of no
// override reports nothing.
func TestOperatorEvents(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	type got struct {
		e      ratelimit.Event
		locked bool
	}
	for _, alg := range []string{"TokenBucket", "FixedWindow"} {
		t.Run(alg, func(t *testing.T) {
			var events []got
			var l *limiter
			obs := ratelimit.ObserverFunc(func(e ratelimit.Event) {
				if e.Kind == ratelimit.EventBatch {
					return
				}
				free := l.mu.TryLock()
				if free {
					l.mu.Unlock()
				}
				events = append(events, got{e, !free})
			})
			opts := []Option{WithPrefix(testPrefix(t)), WithName("api"), WithObserver(obs), WithCoalescing(false)}
			var setOverride func(key string, n int) error
			var setRate func(n int) error
			if alg == "TokenBucket" {
				tb, err := NewTokenBucket(client, ratelimit.PerSecond(5), 6, opts...)
				if err != nil {
					t.Fatal(err)
				}
				l = &tb.limiter
				setOverride = func(key string, n int) error { return tb.SetOverride(key, ratelimit.PerSecond(int64(n)), n) }
				setRate = func(n int) error { return tb.SetRate(ratelimit.PerSecond(int64(n)), n) }
			} else {
				fw, err := NewFixedWindow(client, ratelimit.PerSecond(6), opts...)
				if err != nil {
					t.Fatal(err)
				}
				l = &fw.limiter
				setOverride = func(key string, n int) error { return fw.SetOverride(key, ratelimit.PerSecond(int64(n))) }
				setRate = func(n int) error { return fw.SetRate(ratelimit.PerSecond(int64(n))) }
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(setRate(8))
			must(setOverride("team-b", 50))
			l.RemoveOverride("team-b")
			l.RemoveOverride("team-b") // none left: nothing to report
			must(l.Reset(ctx, "k"))
			r, err := l.Take(ctx, "k", 3)
			must(err)
			d, err := r.Settle(5)
			must(err)
			if err := setRate(0); err == nil {
				t.Fatal("SetRate(0) accepted")
			}
			want := []ratelimit.Event{
				{Kind: ratelimit.EventSetRate, Limiter: "api", N: 8},
				{Kind: ratelimit.EventSetOverride, Limiter: "api", Key: "team-b", N: 50},
				{Kind: ratelimit.EventRemoveOverride, Limiter: "api", Key: "team-b"},
				{Kind: ratelimit.EventReset, Limiter: "api", Key: "k"},
				{Kind: ratelimit.EventSettle, Limiter: "api", Key: "k", N: 5, Allowed: true, Remaining: d.Remaining},
			}
			if len(events) != len(want) {
				t.Fatalf("%d events %+v, want %d", len(events), events, len(want))
			}
			for i, g := range events {
				if g.e != want[i] {
					t.Errorf("event %d: %+v, want %+v", i, g.e, want[i])
				}
				if g.locked {
					t.Errorf("event %d (%v) reported with the limiter's mutex held", i, g.e.Kind)
				}
			}
			if d.Remaining != 8-5 {
				t.Errorf("Remaining after settling 5 of 8: %d, want 3", d.Remaining)
			}
		})
	}
}
