package redis

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// Take and Settle on Redis beyond the random traces of
// conformance_test.go (the same Decisions as in memory for Take and for
// Settle below, at and above the estimate, after Resets and rate changes):
// the round trips they cost, the errors of the core's Settle, and the
// failure policies.

// TestSettleOneRoundTrip: for every algorithm, a Take is one call to
// Redis and so is a Settle, below, at or above the estimate.
func TestSettleOneRoundTrip(t *testing.T) {
	srv := ownServer(t)
	client := newClient(t, srv.addr, true)
	for _, a := range testAlgorithms {
		c := a.conformanceCase(a.conformance[0])
		mc := ratelimit.NewManualClock(start)
		_, rds := pairFor(t, c, mc, client)
		if _, err := rds.AllowN(bg, "warm", 1); err != nil { // loads the library
			t.Fatal(err)
		}
		taker := rds.(ratelimit.Taker)
		for _, actual := range []int{0, 1, 3} {
			before := commandCalls(t, client)["fcall"]
			r, err := taker.Take(bg, "k", 1)
			if err != nil || !r.OK() {
				t.Fatalf("%s: Take: %+v %v", c.name, r, err)
			}
			if got := commandCalls(t, client)["fcall"] - before; got != 1 {
				t.Errorf("%s: Take took %d calls", c.name, got)
			}
			before = commandCalls(t, client)["fcall"]
			if d, err := r.Settle(actual); err != nil || !d.Allowed || d.RetryAfter != 0 {
				t.Errorf("%s: Settle(%d) = %+v %v", c.name, actual, d, err)
			}
			if got := commandCalls(t, client)["fcall"] - before; got != 1 {
				t.Errorf("%s: Settle(%d) took %d calls", c.name, actual, got)
			}
			mc.Advance(time.Hour)
		}
	}
}

// TestSettleErrors: the core's rules hold for Redis reservations: a
// negative cost, a second Settle, a Settle after Cancel, of a refused
// Take or of a peek are refused; Cancel after Settle does nothing.
func TestSettleErrors(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	c := tokenBucketCase(ratelimit.PerSecond(3), 5)
	mc := ratelimit.NewManualClock(start)
	_, rds := pairFor(t, c, mc, client)
	taker := rds.(ratelimit.Taker)
	r, err := taker.Take(bg, "k", 2)
	if err != nil || !r.OK() {
		t.Fatalf("Take: %+v %v", r, err)
	}
	if _, err := r.Settle(-1); !errors.Is(err, ratelimit.ErrNegativeN) {
		t.Errorf("Settle(-1): %v", err)
	}
	d, err := r.Settle(1)
	if err != nil || d.Remaining != 4 {
		t.Fatalf("Settle(1) of 2: %+v %v, want 4 left", d, err)
	}
	if _, err := r.Settle(1); !errors.Is(err, ratelimit.ErrSettled) {
		t.Errorf("a second Settle: %v", err)
	}
	r.Cancel()
	if d, _ := rds.AllowN(bg, "k", 0); d.Remaining != 4 {
		t.Errorf("Cancel after Settle gave back: %+v", d)
	}
	r2, _ := taker.Take(bg, "k", 1)
	r2.Cancel()
	if _, err := r2.Settle(1); !errors.Is(err, ratelimit.ErrSettled) {
		t.Errorf("Settle after Cancel: %v", err)
	}
	if r3, _ := taker.Take(bg, "k", 5); r3.OK() {
		t.Fatalf("Take(5) of 4 left: %+v", r3)
	} else if _, err := r3.Settle(0); !errors.Is(err, ratelimit.ErrSettled) {
		t.Errorf("Settle of a refused Take: %v", err)
	}
	if r4, _ := taker.Take(bg, "k", 0); r4.OK() {
		t.Fatalf("Take(0) is a peek: %+v", r4)
	} else if !r4.Decision().Allowed || r4.Decision().Remaining != 4 {
		t.Errorf("Take(0): %+v, want the peek's Decision", r4.Decision())
	}
	// A Reserve of 0 books nothing: its Settle is ErrSettled, with or
	// without a Cancel first, and takes nothing.
	for _, cancel := range []bool{false, true} {
		r5, err := rds.Reserve(bg, "k", 0)
		if err != nil || !r5.OK() {
			t.Fatalf("Reserve(0): %+v %v", r5, err)
		}
		if cancel {
			r5.Cancel()
		}
		if _, err := r5.Settle(3); !errors.Is(err, ratelimit.ErrSettled) {
			t.Errorf("Settle(3) of a Reserve of 0 (cancelled first: %v): %v", cancel, err)
		}
		if d, _ := rds.AllowN(bg, "k", 0); d.Remaining != 4 {
			t.Errorf("Settle(3) of a Reserve of 0 (cancelled first: %v) took: %+v", cancel, d)
		}
	}
}

// TestSettleFailurePolicies: the FailLocal limiter's booking is settled
// with Redis's; when Redis fails at the Settle, FailLocal answers from it,
// FailOpen as for a key without history, and FailClosed with an error
// matching ErrUnavailable.
func TestSettleFailurePolicies(t *testing.T) {
	for _, p := range []FailurePolicy{FailLocal, FailOpen, FailClosed} {
		srv := ownServer(t)
		client := goredis.NewClient(&goredis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { client.Close() })
		mc := ratelimit.NewManualClock(start)
		tb, err := NewTokenBucket(client, ratelimit.PerHour(1), 10, WithClock(mc), WithPrefix(testPrefix(t)),
			withClockTime(60_000), WithFailurePolicy(p), WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r, err := tb.Take(bg, "k", 2)
		if err != nil || !r.OK() {
			t.Fatalf("%v: Take: %+v %v", p, r, err)
		}
		if p == FailLocal {
			// Settled on both: the local limiter holds the debt too.
			d, err := r.Settle(5)
			if err != nil || d.Remaining != 5 {
				t.Fatalf("%v: Settle(5) of 2: %+v %v", p, d, err)
			}
			if ld, _ := tb.local.AllowN(bg, "k", 0); ld.Remaining != 5 {
				t.Errorf("%v: the local limiter after the Settle: %+v, want 5 left", p, ld)
			}
			r, _ = tb.Take(bg, "k", 2)
		}
		srv.kill()
		d, err := r.Settle(4)
		switch p {
		case FailLocal:
			if err != nil || d.Remaining != 1 {
				t.Errorf("%v: Settle(4) of 2 with Redis down: %+v %v, want the local 1 left", p, d, err)
			}
		case FailOpen:
			if err != nil || !d.Allowed || d.Remaining != 10 {
				t.Errorf("%v: Settle with Redis down: %+v %v", p, d, err)
			}
		case FailClosed:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%v: Settle with Redis down: %+v %v, want ErrUnavailable", p, d, err)
			}
		}
	}
}

// TestSettleHugeDebt: a debt of the largest int is capped where the
// backend's exact arithmetic ends (35 days past the settlement; 30 for
// the sliding window counter; a sliding log closes the key for W), with no
// error (a window's ResetAfter then reaches up to two windows past its
// capped start), and the key decides on from there.
func TestSettleHugeDebt(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		for _, p := range a.conformance {
			c := a.conformanceCase(p)
			mc := ratelimit.NewManualClock(start)
			_, rds := pairFor(t, c, mc, client)
			r, err := rds.(ratelimit.Taker).Take(bg, "k", 1)
			if err != nil || !r.OK() {
				t.Fatalf("%s: Take: %+v %v", c.name, r, err)
			}
			d, err := r.Settle(math.MaxInt)
			if err != nil || !d.Allowed || d.Remaining != 0 || d.ResetAfter <= 0 || d.ResetAfter > 35*24*time.Hour+2*p.rate.Period+c.step {
				t.Errorf("%s: Settle(MaxInt) = %+v %v", c.name, d, err)
			}
			if d, err := rds.AllowN(bg, "k", 1); err != nil || d.Allowed {
				t.Errorf("%s: after a huge debt: %+v %v", c.name, d, err)
			}
		}
	}
}

// Bookings on a sliding log settled in the order they were made (the
// oldest first, as requests finish) and in the reverse order each give
// back exactly their instants: the give-back scans from whichever end of
// the log holds them.
func TestSlidingLogSettleEitherOrder(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	const L = 40 // more than the script reads from the log's start at once
	for _, oldestFirst := range []bool{true, false} {
		mc := ratelimit.NewManualClock(start)
		sl, err := NewSlidingLog(client, ratelimit.Per(L, time.Hour),
			WithPrefix(testPrefix(t)+fmt.Sprint(oldestFirst)), WithClock(mc), withClockTime(60_000))
		if err != nil {
			t.Fatal(err)
		}
		rs := make([]*ratelimit.Reservation, L)
		for i := range rs {
			if rs[i], err = sl.Take(bg, "k", 1); err != nil || !rs[i].OK() {
				t.Fatalf("Take %d: %v", i, err)
			}
			mc.Advance(time.Millisecond)
		}
		for i := range rs {
			j := i
			if !oldestFirst {
				j = L - 1 - i
			}
			d, err := rs[j].Settle(0)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != i+1 {
				t.Fatalf("oldest first %v: after %d settlements %d remain, want %d", oldestFirst, i+1, d.Remaining, i+1)
			}
		}
	}
}

// TestSettleDebtAtHugeRates: a bucket whose rate makes more than 2^63
// intervals in 60 days (the bound of a debt, see tbAlgo.debt) books a
// Settle's excess as in memory, not a debt the bound wrapped round.
func TestSettleDebtAtHugeRates(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		if !a.bucket {
			continue
		}
		for _, rate := range []ratelimit.Rate{ratelimit.Per(1<<52, time.Second), ratelimit.Per(1<<52, 2*time.Second), ratelimit.Per(1<<42, time.Second)} {
			c := a.conformanceCase(params{rate, 1 << 20})
			for _, actual := range []int{2, 3, 1 << 20} {
				mc := ratelimit.NewManualClock(start)
				core, rds := pairFor(t, c, mc, client)
				rc, err1 := core.(ratelimit.Taker).Take(bg, "k", 1)
				rr, err2 := rds.(ratelimit.Taker).Take(bg, "k", 1)
				if err1 != nil || err2 != nil || !rc.OK() || !rr.OK() {
					t.Fatalf("%s: Take: core %v %v, redis %v %v", c.name, rc.OK(), err1, rr.OK(), err2)
				}
				dc, err1 := rc.Settle(actual)
				dr, err2 := rr.Settle(actual)
				if dc != dr || err1 != nil || err2 != nil {
					t.Errorf("%s: Settle(%d): core %+v %v, redis %+v %v", c.name, actual, dc, err1, dr, err2)
				}
				dc, _ = core.AllowN(bg, "k", 0)
				dr, _ = rds.AllowN(bg, "k", 0)
				if dc != dr {
					t.Errorf("%s: peek after Settle(%d): core %+v, redis %+v", c.name, actual, dc, dr)
				}
			}
		}
	}
}
