package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestPenaltyMatchesCore checks, decision for decision on random traces
// on the test clock, that a Redis limiter WithPenalty answers as the
// core's PenaltyBox around the in-memory limiter of the same algorithm.
func TestPenaltyMatchesCore(t *testing.T) {
	c := newClient(t, redisAddr(t), false)
	rate := ratelimit.Rate{N: 3, Period: time.Second}
	type mk struct {
		name  string
		redis func(opts ...Option) (ratelimit.Limiter, error)
		mem   func(opts ...ratelimit.Option) (ratelimit.Limiter, error)
	}
	algs := []mk{
		{"tb", func(o ...Option) (ratelimit.Limiter, error) { return NewTokenBucket(c, rate, 3, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) { return ratelimit.NewTokenBucket(rate, 3, o...) }},
		{"fw", func(o ...Option) (ratelimit.Limiter, error) { return NewFixedWindow(c, rate, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) { return ratelimit.NewFixedWindow(rate, o...) }},
		{"sl", func(o ...Option) (ratelimit.Limiter, error) { return NewSlidingLog(c, rate, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) { return ratelimit.NewSlidingLog(rate, o...) }},
		{"swc", func(o ...Option) (ratelimit.Limiter, error) { return NewSlidingWindowCounter(c, rate, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
				return ratelimit.NewSlidingWindowCounter(rate, o...)
			}},
		{"lb", func(o ...Option) (ratelimit.Limiter, error) { return NewLeakyBucket(c, rate, 3, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) { return ratelimit.NewLeakyBucket(rate, 3, o...) }},
		{"lm", func(o ...Option) (ratelimit.Limiter, error) { return NewLeakyMeter(c, rate, 3, o...) },
			func(o ...ratelimit.Option) (ratelimit.Limiter, error) { return ratelimit.NewLeakyMeter(rate, 3, o...) }},
	}
	for _, a := range algs {
		for _, batch := range []bool{false, true} {
			t.Run(a.name, func(t *testing.T) {
				mc := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
				opts := []Option{WithClock(mc), withClockTime(600_000), WithPrefix(testPrefix(t)),
					WithPenalty(3, 2*time.Second, 5*time.Second)}
				if batch {
					opts = append(opts, withBatchAlways())
				}
				rl, err := a.redis(opts...)
				if err != nil {
					t.Fatal(err)
				}
				ml, err := a.mem(ratelimit.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				box, err := ratelimit.NewPenaltyBox(ml, 3, 2*time.Second, 5*time.Second, ratelimit.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				ctx := context.Background()
				for i := range 400 {
					mc.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
					key := []string{"a", "b"}[rng.IntN(2)]
					n := rng.IntN(3)
					got, err1 := rl.AllowN(ctx, key, n)
					want, err2 := box.AllowN(ctx, key, n)
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: errors %v, %v", i, err1, err2)
					}
					if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter {
						t.Fatalf("step %d key %s n %d: redis %+v, core %+v", i, key, n, got, want)
					}
				}
			})
		}
	}
}

// TestPenaltySharedAndGuesser: two instances share a block, and a
// guesser at 1,000 attempts a second against 5/m with a 15-minute block
// after 5 refusals gets at most 5 + 5 per 15 minutes through in a day.
func TestPenaltySharedAndGuesser(t *testing.T) {
	c := newClient(t, redisAddr(t), false)
	mc := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	prefix := testPrefix(t)
	rate := ratelimit.Rate{N: 5, Period: time.Minute}
	mk := func() *TokenBucket {
		l, err := NewTokenBucket(c, rate, 5, WithClock(mc), withClockTime(3_600_000), WithPrefix(prefix),
			WithPenalty(5, time.Minute, 15*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := mk(), mk()
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 10; i++ {
		if a.Allow("k") {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("allowed %d of 10, want 5", allowed)
	}
	d, err := b.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter != 15*time.Minute {
		t.Fatalf("other instance: %+v %v, want blocked for 15m", d, err)
	}
	var le *ratelimit.LimitError
	if err := b.Wait(ctx, "k"); !errors.As(err, &le) || le.Deadline || le.RetryAfter != 15*time.Minute {
		t.Fatalf("Wait while blocked: %v", err)
	}
	if err := b.WaitN(ctx, "k", 0); !errors.As(err, &le) || le.Deadline || le.RetryAfter != 15*time.Minute {
		t.Fatalf("WaitN of nothing while blocked: %v, want a refusal by the block", err)
	}
	if err := b.WaitN(ctx, "other", 0); err != nil {
		t.Fatalf("WaitN of nothing on a key not blocked: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := b.Wait(dctx, "k"); !errors.As(err, &le) || le.Deadline {
		t.Fatalf("Wait with a deadline while blocked: %v, want a refusal by the block", err)
	}
	if err := a.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if !b.Allow("k") {
		t.Fatal("Reset did not clear the block")
	}
	// The guesser, on a fresh key, for a simulated day at 1 ms steps
	// (1,000 attempts a second), skipping ahead while blocked.
	through := 0
	end := mc.Now().Add(24 * time.Hour)
	for mc.Now().Before(end) {
		d, err := a.AllowN(ctx, "g", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			through++
		}
		if !d.Allowed && d.RetryAfter > time.Minute {
			mc.Advance(d.RetryAfter)
			continue
		}
		mc.Advance(time.Millisecond)
	}
	if limit := 10 * 96; through > limit {
		t.Fatalf("%d through in a day, want at most %d", through, limit)
	}
	t.Logf("%d through in a day", through)
}

// TestPenaltyEvents: the observer sees a block begin (EventBlocked with
// the rule's count and block length) and end (EventUnblocked, at the first
// decision after it), for the blocked key only, with and without batches.
func TestPenaltyEvents(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			c := newClient(t, redisAddr(t), false)
			mc := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
			var mu sync.Mutex
			var evs []ratelimit.Event
			obs := ratelimit.ObserverFunc(func(e ratelimit.Event) {
				if e.Kind == ratelimit.EventBlocked || e.Kind == ratelimit.EventUnblocked {
					mu.Lock()
					evs = append(evs, e)
					mu.Unlock()
				}
			})
			opts := []Option{WithClock(mc), withClockTime(3_600_000), WithPrefix(testPrefix(t)),
				WithPenalty(2, time.Minute, 10*time.Minute), WithObserver(obs), WithName("api")}
			if batch {
				opts = append(opts, withBatchAlways())
			}
			l, err := NewTokenBucket(c, ratelimit.Rate{N: 1, Period: time.Minute}, 1, opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := func() []ratelimit.Event {
				mu.Lock()
				defer mu.Unlock()
				return append([]ratelimit.Event(nil), evs...)
			}
			l.Allow("k")
			l.Allow("j")
			l.Allow("j") // one refusal of j: no block
			l.Allow("k")
			if e := got(); len(e) != 0 {
				t.Fatalf("events before a block: %+v", e)
			}
			l.Allow("k") // k's second refusal within a minute: blocked
			want := ratelimit.Event{Kind: ratelimit.EventBlocked, Limiter: "api", Key: "k", N: 2, RetryAfter: 10 * time.Minute}
			if e := got(); len(e) != 1 || e[0] != want {
				t.Fatalf("events at the block: %+v, want %+v", e, want)
			}
			mc.Advance(11 * time.Minute)
			l.Allow("j")
			l.Allow("k")
			want2 := ratelimit.Event{Kind: ratelimit.EventUnblocked, Limiter: "api", Key: "k"}
			if e := got(); len(e) != 2 || e[1] != want2 {
				t.Fatalf("events after the block: %+v, want %+v last", e, want2)
			}
		})
	}
}

// TestPenaltyRealTime blocks on the server's TIME and waits for the end.
func TestPenaltyRealTime(t *testing.T) {
	c := newClient(t, redisAddr(t), false)
	l, err := NewFixedWindow(c, ratelimit.Rate{N: 1, Period: time.Hour}, WithPrefix(testPrefix(t)),
		WithPenalty(2, time.Hour, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l.Allow("k")
	l.Allow("k")
	l.Allow("k") // the second refusal: blocked
	d, _ := l.AllowN(context.Background(), "k", 1)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 300*time.Millisecond {
		t.Fatalf("blocked decision %+v", d)
	}
	time.Sleep(350 * time.Millisecond)
	d, _ = l.AllowN(context.Background(), "k", 1)
	if d.Allowed || d.RetryAfter <= 300*time.Millisecond {
		t.Fatalf("after the block, want the window's refusal, got %+v", d)
	}
}

func TestPenaltyBadInput(t *testing.T) {
	c := newClient(t, redisAddr(t), false)
	for _, o := range []Option{WithPenalty(0, time.Second, time.Second), WithPenalty(5, 0, time.Second),
		WithPenalty(5, time.Second, -1), WithPenalty(5, time.Second, 40*24*time.Hour)} {
		if _, err := NewTokenBucket(c, ratelimit.Rate{N: 1, Period: time.Second}, 1, o); !errors.Is(err, ratelimit.ErrInvalidOption) {
			t.Fatalf("got %v, want ErrInvalidOption", err)
		}
	}
}

// TestPenaltyCoalesced: concurrent decisions of one key, coalesced into
// batches (the default), count each refusal: 3/h with a block after 4
// refusals lets 3 through of 40, and the key ends blocked.
func TestPenaltyCoalesced(t *testing.T) {
	c := newClient(t, redisAddr(t), false)
	l, err := NewFixedWindow(c, ratelimit.Rate{N: 3, Period: time.Hour}, WithPrefix(testPrefix(t)),
		WithPenalty(4, time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.Allow("k") {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	d, err := l.AllowN(context.Background(), "k", 0)
	if err != nil || ok.Load() != 3 || d.RetryAfter <= 59*time.Minute {
		t.Fatalf("allowed %d (want 3), peek %+v %v (want blocked)", ok.Load(), d, err)
	}
}

// TestPenaltyBlockedRestates: a peek at a blocked key of a bucket whose
// state was written before a rate change re-expresses the state first
// (the script asks, the limiter answers), as an unblocked one does, and
// reports the bucket's ResetAfter, not the block's alone.
func TestPenaltyBlockedRestates(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		if a.vectors != "tokenbucket" && a.vectors != "leakymeter" {
			continue
		}
		for _, batch := range []bool{false, true} {
			mc := ratelimit.NewManualClock(start)
			opts := []Option{WithClock(mc), withClockTime(600_000), WithPrefix(testPrefix(t)),
				WithPenalty(2, 2*time.Second, 500*time.Millisecond)}
			if batch {
				opts = append(opts, withBatchAlways())
			}
			rl, err := a.redis(client, ratelimit.PerSecond(3), 3, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ml, err := a.core(ratelimit.PerSecond(3), 3, ratelimit.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			box, err := ratelimit.NewPenaltyBox(ml, 2, 2*time.Second, 500*time.Millisecond, ratelimit.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			for range 4 { // empties the bucket, then two refusals: blocked
				rl.AllowN(bg, "k", 3)
				box.AllowN(bg, "k", 3)
			}
			slow := ratelimit.Per(1, 10*time.Second)
			if err := setRate(rl, true, params{slow, 3}); err != nil {
				t.Fatal(err)
			}
			if err := setRate(ml, true, params{slow, 3}); err != nil {
				t.Fatal(err)
			}
			got, err1 := rl.AllowN(bg, "k", 0)
			want, err2 := box.AllowN(bg, "k", 0)
			if got != want || err1 != nil || err2 != nil {
				t.Errorf("%s batch=%v: blocked peek after SetRate: redis %+v %v, core %+v %v", a.name, batch, got, err1, want, err2)
			}
		}
	}
}
