package redis

import (
	"math"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// tickClock is a manual clock that moves on a little at every reading, as
// a real clock does over a round trip to Redis.
type tickClock struct{ *ratelimit.ManualClock }

func (c tickClock) Now() time.Time {
	c.Advance(time.Microsecond)
	return c.ManualClock.Now()
}

// Just after a failure, FailLocal books on the local limiter as well; when
// Redis then refuses, or the call is abandoned, the local booking is given
// back whole, though the clock has passed its time to act during the round
// trip: the events never happened, so the fallback must not count them.
func TestFailLocalGivesBackRefusedBooking(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	clock := tickClock{ratelimit.NewManualClock(start)}
	prefix := testPrefix(t)
	other, err := NewTokenBucket(client, ratelimit.PerHour(1), 3, WithClock(clock), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := other.AllowN(bg, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("exhausting k on Redis: %+v %v", d, err)
	}
	lim, err := NewTokenBucket(client, ratelimit.PerHour(1), 3, WithClock(clock), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lim.recover.Store(math.MaxInt64) // as if a call had just failed
	for i := range 3 {
		if d, err := lim.AllowN(bg, "k", 1); err != nil || d.Allowed {
			t.Fatalf("AllowN %d: %+v %v, want refused by Redis", i, d, err)
		}
		r, err := lim.Take(bg, "k", 1)
		if err != nil || r.OK() {
			t.Fatalf("Take %d: %+v %v, want refused by Redis", i, r, err)
		}
	}
	d, err := lim.local.AllowN(bg, "k", 0)
	if err != nil || d.Remaining != 3 {
		t.Errorf("the local limiter has %d left after six requests Redis refused, want 3 (%v)", d.Remaining, err)
	}
}
