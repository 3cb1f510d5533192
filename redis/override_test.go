package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Per-key overrides on Redis: the timelines of the in-memory semantics
// (a key keeps its tokens at the change, capped; a later SetRate leaves it
// alone; RemoveOverride re-expresses it in the limiter's parameters; its
// own Limit and n), and, where the core has overrides, the random traces
// compared with memory (conformance_test.go).

func TestOverrideTokenBucketTimeline(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	mc := ratelimit.NewManualClock(start)
	tb, err := NewTokenBucket(client, ratelimit.PerSecond(1), 4, WithClock(mc), WithPrefix(testPrefix(t)), withClockTime(60_000),
		WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
	if err != nil {
		t.Fatal(err)
	}
	allow := func(key string, n int) ratelimit.Decision {
		t.Helper()
		d, err := tb.AllowN(bg, key, n)
		if err != nil {
			t.Fatalf("AllowN(%q, %d): %v", key, n, err)
		}
		return d
	}
	if d := allow("k", 3); !d.Allowed || d.Remaining != 1 { // t0: 1 token left
		t.Fatalf("t0: %+v", d)
	}
	must(t, tb.SetOverride("k", ratelimit.PerSecond(10), 40))
	must(t, tb.SetOverride("fresh", ratelimit.PerSecond(10), 40))
	if r, c, ok := tb.Override("k"); !ok || r != ratelimit.PerSecond(10) || c != 40 {
		t.Fatalf("Override(k) = %v %d %v", r, c, ok)
	}
	if _, _, ok := tb.Override("other"); ok {
		t.Fatal("Override of a key without one")
	}
	if d := allow("k", 0); d.Remaining != 1 || d.Limit != 40 { // keeps its token
		t.Fatalf("k after the override: %+v", d)
	}
	if d := allow("fresh", 40); !d.Allowed || d.Limit != 40 { // n up to its own capacity
		t.Fatalf("a fresh key under its override: %+v", d)
	}
	if _, err := tb.AllowN(bg, "other", 5); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("AllowN(5) on a key without override: %v", err)
	}
	if tb.Limit() != 4 {
		t.Fatalf("Limit() = %d, want the limiter's", tb.Limit())
	}
	mc.Advance(100 * time.Millisecond) // one token more at the override's rate
	if d := allow("k", 0); d.Remaining != 2 {
		t.Fatalf("k at +100ms: %+v", d)
	}
	// A SetRate leaves the override alone.
	must(t, tb.SetRate(ratelimit.PerSecond(2), 8))
	if d := allow("k", 0); d.Remaining != 2 || d.Limit != 40 {
		t.Fatalf("k after SetRate: %+v", d)
	}
	mc.Advance(3 * time.Second) // 32 tokens
	if d := allow("k", 0); d.Remaining != 32 {
		t.Fatalf("k at +3.1s: %+v", d)
	}
	// Removed: back to the limiter's parameters as they stand (2/s, 8),
	// its 32 tokens capped at 8.
	tb.RemoveOverride("k")
	if d := allow("k", 0); d.Remaining != 8 || d.Limit != 8 {
		t.Fatalf("k after RemoveOverride: %+v", d)
	}
	if d := allow("k", 8); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("k drained: %+v", d)
	}
	mc.Advance(500 * time.Millisecond)
	if d := allow("k", 0); d.Remaining != 1 {
		t.Fatalf("k refilling at the limiter's 2/s: %+v", d)
	}
	// Removed while idle, then the limiter's rate changes: the key is
	// re-expressed at the removal, then through the change.
	must(t, tb.SetOverride("idle", ratelimit.PerSecond(10), 40))
	if d := allow("idle", 30); !d.Allowed { // 10 left
		t.Fatalf("idle: %+v", d)
	}
	tb.RemoveOverride("idle") // 10 tokens, capped at 8
	must(t, tb.SetRate(ratelimit.PerSecond(1), 3))
	if d := allow("idle", 0); d.Remaining != 3 || d.Limit != 3 {
		t.Fatalf("idle through a removal and a change: %+v", d)
	}
}

// TestOverrideCancelGivesNothing: a booking made before a change of its
// key's override is not given back by its Cancel, as in memory; one made
// before a change of another key's override is.
func TestOverrideCancelGivesNothing(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, other := range []bool{false, true} {
		for _, a := range testAlgorithms {
			c := a.conformanceCase(a.conformance[0])
			if c.limit < 3 {
				continue
			}
			mc := ratelimit.NewManualClock(start)
			_, rds := pairFor(t, c, mc, client)
			if _, err := rds.AllowN(bg, "k", c.limit-3); err != nil {
				t.Fatal(err)
			}
			r, err := rds.Reserve(bg, "k", 1)
			if err != nil || !r.OK() {
				t.Fatalf("%s: Reserve: %+v %v", c.name, r, err)
			}
			key := "k"
			if other {
				key = "other" // not in k's counter of Resets
			}
			if a.bucket {
				must(t, rds.(interface {
					SetOverride(string, ratelimit.Rate, int) error
				}).SetOverride(key, c.params.rate, c.params.capacity))
			} else {
				must(t, rds.(interface {
					SetOverride(string, ratelimit.Rate) error
				}).SetOverride(key, c.params.rate))
			}
			before, _ := rds.AllowN(bg, "k", 0)
			r.Cancel()
			after, _ := rds.AllowN(bg, "k", 0)
			if want := before.Remaining + btoi(other); after.Remaining != want {
				t.Errorf("%s: a Cancel after an override of %q: Remaining %d, then %d (want %d)", c.name, key, before.Remaining, after.Remaining, want)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestOverrideWindows: a window algorithm's key under its own limit.
func TestOverrideWindows(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		if a.bucket {
			continue
		}
		mc := ratelimit.NewManualClock(start)
		l, err := a.redis(client, ratelimit.Per(3, time.Minute), 0, WithClock(mc), WithPrefix(testPrefix(t)), withClockTime(60_000))
		if err != nil {
			t.Fatal(err)
		}
		o := l.(interface {
			SetOverride(string, ratelimit.Rate) error
			Override(string) (ratelimit.Rate, bool)
			RemoveOverride(string)
		})
		must(t, o.SetOverride("paid", ratelimit.Per(30, time.Minute)))
		if r, ok := o.Override("paid"); !ok || r != ratelimit.Per(30, time.Minute) {
			t.Fatalf("%s: Override = %v %v", a.name, r, ok)
		}
		if d, err := l.AllowN(bg, "paid", 30); err != nil || !d.Allowed || d.Limit != 30 {
			t.Fatalf("%s: paid: %+v %v", a.name, d, err)
		}
		if _, err := l.AllowN(bg, "free", 4); !errors.Is(err, ratelimit.ErrExceedsLimit) {
			t.Fatalf("%s: free, 4 of 3: %v", a.name, err)
		}
		o.RemoveOverride("paid") // 30 counted against 3: nothing more
		if d, err := l.AllowN(bg, "paid", 1); err != nil || d.Allowed || d.Limit != 3 {
			t.Fatalf("%s: paid after RemoveOverride: %+v %v", a.name, d, err)
		}
	}
}
