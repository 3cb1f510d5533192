package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// coreResetter and redisResetter are the Reset methods of the two sides.
type (
	coreResetter  interface{ Reset(key string) }
	redisResetter interface {
		Reset(ctx context.Context, key string) error
	}
)

// tagsOf returns the user keys (hash tags) of the Redis keys under prefix.
func tagsOf(keys []string) []string {
	var tags []string
	for _, k := range keys {
		tags = append(tags, hashTag(k))
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}

// TestResetAllAlgorithms: for every algorithm, Reset deletes every Redis
// key of the key it names (an exhausted key is full again, with no key
// left behind), leaves other keys as they were, writes nothing for an
// absent key, and decides as the in-memory Reset does.
func TestResetAllAlgorithms(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		mc := ratelimit.NewManualClock(start)
		prefix := testPrefix(t) + c.name + ":"
		core, err := c.core(mc)
		if err != nil {
			t.Fatal(err)
		}
		rds, err := c.redis(client, WithClock(mc), WithPrefix(prefix), withClockTime(60_000),
			WithTimeout(5*time.Second), WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
		if err != nil {
			t.Fatal(err)
		}
		same := func(what, key string, n int) ratelimit.Decision {
			t.Helper()
			dc, errc := core.AllowN(bg, key, n)
			dr, errr := rds.AllowN(bg, key, n)
			if errc != nil || errr != nil || dc != dr {
				t.Fatalf("%s: %s AllowN(%q, %d): core %+v %v, redis %+v %v", c.name, what, key, n, dc, errc, dr, errr)
			}
			return dc
		}
		// Exhaust "a" and "{x}" (a key that needs escapes), and book "b"
		// ahead, so that every algorithm has written all its Redis keys.
		for _, k := range []string{"a", "{x}", "b"} {
			for range 3 {
				same("exhaust", k, c.limit)
				mc.Advance(1)
			}
			if d, _ := core.AllowN(bg, k, 0); d.ResetAfter > 20*24*time.Hour {
				continue // past the Redis backend's booking horizon
			}
			rc, _ := core.Reserve(bg, k, c.limit)
			rr, _ := rds.Reserve(bg, k, c.limit)
			if rc.OK() != rr.OK() || rc.Decision() != rr.Decision() {
				t.Fatalf("%s: Reserve(%q): core %+v, redis %+v", c.name, k, rc.Decision(), rr.Decision())
			}
		}
		if d := same("before reset", "a", c.limit); d.Allowed {
			t.Fatalf("%s: key not exhausted: %+v", c.name, d)
		}
		before := keysWithPrefix(t, client, prefix)
		bPeek := same("peek b", "b", 0)
		for _, k := range []string{"a", "{x}"} {
			core.(coreResetter).Reset(k)
			if err := rds.(redisResetter).Reset(bg, k); err != nil {
				t.Fatalf("%s: Reset(%q): %v", c.name, k, err)
			}
		}
		if err := rds.(redisResetter).Reset(bg, "never"); err != nil {
			t.Fatalf("%s: Reset of an absent key: %v", c.name, err)
		}
		core.(coreResetter).Reset("never")
		after := keysWithPrefix(t, client, prefix)
		if got := tagsOf(after); !slices.Equal(got, []string{"b"}) {
			t.Errorf("%s: after Reset the Redis keys are of %q (all keys %q, before %q), want only b's",
				c.name, got, after, before)
		}
		if len(after) == 0 || len(before) <= len(after) {
			t.Errorf("%s: Redis keys before %q, after %q", c.name, before, after)
		}
		if d := same("peek b after", "b", 0); d != bPeek {
			t.Errorf("%s: b changed by another key's Reset: %+v, was %+v", c.name, d, bPeek)
		}
		for _, k := range []string{"a", "{x}"} {
			if d := same("peek after reset", k, 0); d.Remaining != c.limit || d.ResetAfter != 0 {
				t.Errorf("%s: %q after Reset is not full: %+v", c.name, k, d)
			}
			if d := same("after reset", k, c.limit); !d.Allowed {
				t.Errorf("%s: %q after Reset denies its full allowance: %+v", c.name, k, d)
			}
		}
		if d := same("peek never", "never", 0); d.Remaining != c.limit {
			t.Errorf("%s: absent key after Reset: %+v", c.name, d)
		}
		if got := tagsOf(keysWithPrefix(t, client, prefix)); slices.Contains(got, "never") {
			t.Errorf("%s: Reset of an absent key wrote a key", c.name)
		}
	}
}

// TestCancelAfterReset: a Cancel of a booking made before a Reset gives
// nothing back, whether this limiter or another instance made it, as in
// memory.
func TestCancelAfterReset(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		for _, other := range []bool{false, true} {
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t) + c.name + ":"
			core, err := c.core(mc)
			if err != nil {
				t.Fatal(err)
			}
			opts := []Option{WithClock(mc), WithPrefix(prefix), withClockTime(60_000), WithTimeout(5 * time.Second),
				WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) })}
			rds, err := c.redis(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			booker := rds // who books and cancels
			if other {
				if booker, err = c.redis(client, opts...); err != nil {
					t.Fatal(err)
				}
			}
			n := max(1, c.limit/2)
			// Two bookings, the second one ahead.
			var cores, rdss []*ratelimit.Reservation
			for range 2 {
				rc, _ := core.Reserve(bg, "k", n)
				rr, _ := booker.Reserve(bg, "k", n)
				cores, rdss = append(cores, rc), append(rdss, rr)
			}
			mc.Advance(1)
			core.(coreResetter).Reset("k")
			if err := rds.(redisResetter).Reset(bg, "k"); err != nil {
				t.Fatal(err)
			}
			mc.Advance(1)
			// A booking after the Reset, at a later instant.
			rc, _ := core.Reserve(bg, "k", 1)
			rr, _ := rds.Reserve(bg, "k", 1)
			if rc.Decision() != rr.Decision() {
				t.Fatalf("%s: Reserve after Reset: core %+v, redis %+v", c.name, rc.Decision(), rr.Decision())
			}
			want, _ := core.AllowN(bg, "k", 0)
			for i := range cores {
				cores[i].Cancel()
				rdss[i].Cancel()
				dc, _ := core.AllowN(bg, "k", 0)
				dr, err := rds.AllowN(bg, "k", 0)
				if err != nil || dc != dr || dc != want {
					t.Errorf("%s (other instance %v): after Cancel %d of a booking before the Reset: core %+v, redis %+v %v, want %+v",
						c.name, other, i, dc, dr, err, want)
				}
			}
			// The booking after the Reset is still given back.
			rc.Cancel()
			rr.Cancel()
			dc, _ := core.AllowN(bg, "k", 0)
			dr, _ := rds.AllowN(bg, "k", 0)
			if dc != dr {
				t.Errorf("%s: Cancel after the Reset: core %+v, redis %+v", c.name, dc, dr)
			}
		}
	}
}

// TestResetForgetsDenial: a denial in the deny cache does not outlive a
// Reset of its key.
func TestResetForgetsDenial(t *testing.T) {
	mc := ratelimit.NewManualClock(start)
	tb := newTB(t, newClient(t, redisAddr(t), true), ratelimit.PerHour(1), 2, WithClock(mc), withClockTime(60_000), WithDenyCache(10))
	if d, _ := tb.AllowN(bg, "k", 2); !d.Allowed {
		t.Fatal("burst denied")
	}
	if tb.Allow("k") { // denied by Redis and cached for an hour
		t.Fatal("third event allowed")
	}
	if err := tb.Reset(bg, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := tb.AllowN(bg, "k", 2); err != nil || !d.Allowed {
		t.Fatalf("after Reset: %+v %v, want the full allowance", d, err)
	}
}

// TestResetRedisDown: with Redis down, Reset fails with ErrUnavailable
// under every policy; under FailLocal the local limiter's key is reset
// all the same, and it is also reset when Redis answers.
func TestResetRedisDown(t *testing.T) {
	srv := ownServer(t)
	c := newClient(t, srv.addr, true)
	mc := ratelimit.NewManualClock(start)
	lims := map[FailurePolicy]*TokenBucket{}
	for _, p := range []FailurePolicy{FailOpen, FailClosed, FailLocal} {
		lims[p] = newTB(t, c, ratelimit.PerHour(1), 2, WithClock(mc), withClockTime(60_000),
			WithFailurePolicy(p), WithTimeout(200*time.Millisecond), WithOnError(func(string, error) {}))
	}
	local := lims[FailLocal]
	// Up: the events Redis allows are mirrored locally; Reset resets both.
	if d, _ := local.AllowN(bg, "up", 2); !d.Allowed {
		t.Fatal("burst denied")
	}
	if err := local.Reset(bg, "up"); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	if d, _ := local.AllowN(bg, "up", 2); !d.Allowed {
		t.Errorf("local limiter after Reset with Redis up, then down: %+v, want its full allowance", d)
	}
	for p, l := range lims {
		if err := l.Reset(bg, "k"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%v: Reset with Redis down = %v, want ErrUnavailable", p, err)
		}
	}
	// Down: the local limiter answers; Reset resets its key.
	if d, _ := local.AllowN(bg, "down", 2); !d.Allowed {
		t.Fatal("local burst denied")
	}
	if local.Allow("down") {
		t.Fatal("local limiter allowed past its capacity")
	}
	if err := local.Reset(bg, "down"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("FailLocal Reset with Redis down = %v, want ErrUnavailable", err)
	}
	if d, _ := local.AllowN(bg, "down", 2); !d.Allowed {
		t.Errorf("local limiter after Reset with Redis down: %+v, want its full allowance", d)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := local.Reset(ctx, "down"); !errors.Is(err, context.Canceled) {
		t.Errorf("Reset with a cancelled context = %v", err)
	}
}

// TestCancelAfterResetSameInstant: a booking made after a Reset at the
// same instant as one made before it leaves the same state on Redis; the
// Cancel of the earlier one must still give nothing back (this limiter
// knows it made a Reset of the key since), as in memory. A Cancel of a
// booking on another key made before the Reset gives back, as in memory,
// where a Reset voids the bookings of its own key only; but for a key
// that shares the Reset's counter (one in 1024, by a hash of the key),
// whose booking this limiter keeps taken (the safe side).
func TestCancelAfterResetSameInstant(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		old := [2]*ratelimit.Reservation{}
		old[0], _ = core.Reserve(bg, "k", c.limit)
		old[1], _ = rds.Reserve(bg, "k", c.limit)
		// A booking on another key, and on one sharing k's counter.
		oc, _ := core.Reserve(bg, "o", c.limit)
		or, _ := rds.Reserve(bg, "o", c.limit)
		l := rds.(interface{ base() *limiter }).base()
		if l.slot("o") == l.slot("k") {
			t.Fatal("o and k share a counter of Resets")
		}
		twin := ""
		for i := 0; twin == ""; i++ {
			if k := strconv.Itoa(i); l.slot(k) == l.slot("k") {
				twin = k
			}
		}
		tr, _ := rds.Reserve(bg, twin, c.limit)
		core.(coreResetter).Reset("k")
		if err := rds.(redisResetter).Reset(bg, "k"); err != nil {
			t.Fatal(err)
		}
		rc, _ := core.Reserve(bg, "k", c.limit)
		rr, _ := rds.Reserve(bg, "k", c.limit)
		if !rc.OK() || rc.Decision() != rr.Decision() {
			t.Fatalf("%s: Reserve after Reset: core %+v, redis %+v", c.name, rc.Decision(), rr.Decision())
		}
		old[0].Cancel()
		old[1].Cancel()
		dc, _ := core.AllowN(bg, "k", 0)
		dr, err := rds.AllowN(bg, "k", 0)
		if err != nil || dc != dr || dc.Remaining != 0 {
			t.Errorf("%s: Cancel of the booking before the Reset: core %+v, redis %+v %v, want nothing given back",
				c.name, dc, dr, err)
		}
		oc.Cancel()
		or.Cancel()
		dc, _ = core.AllowN(bg, "o", 0)
		dr, err = rds.AllowN(bg, "o", 0)
		if err != nil || dc != dr || dc.Remaining != c.limit {
			t.Errorf("%s: Cancel on another key after a Reset: core %+v, redis %+v %v, want given back",
				c.name, dc, dr, err)
		}
		tr.Cancel()
		if d, err := rds.AllowN(bg, twin, 0); err != nil || d.Remaining != 0 {
			t.Errorf("%s: Cancel on a key sharing the Reset's counter: %+v %v, want kept", c.name, d, err)
		}
	}
}
