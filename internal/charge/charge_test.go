package charge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

var t0 = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

func bucket(t *testing.T, capacity int, clock ratelimit.Clock) *ratelimit.TokenBucket {
	t.Helper()
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), capacity, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func left(t *testing.T, l ratelimit.Limiter, key string) int {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// between is a real limiter with another request's work run right after
// each peek: what a concurrent request does between Take's peek and its
// booking.
type between struct {
	*ratelimit.TokenBucket
	after func()
}

func (b *between) Take(ctx context.Context, key string, n int) (*ratelimit.Reservation, error) {
	r, err := b.TokenBucket.Take(ctx, key, n)
	if n == 0 && b.after != nil {
		f := b.after
		b.after = nil
		f()
	}
	return r, err
}

func take(t *testing.T, n int, limits ...Limit) (bool, []ratelimit.Decision, []*ratelimit.Reservation) {
	t.Helper()
	ds := make([]ratelimit.Decision, len(limits))
	res := make([]*ratelimit.Reservation, len(limits))
	ok, err := Take(context.Background(), n, limits, ds, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok, ds, res
}

// A limit short of room denies before the others book: nothing is booked
// anywhere, and every denier's RetryAfter is known.
func TestTakeDeniesBeforeBooking(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	a, b, c := bucket(t, 10, clock), bucket(t, 4, clock), bucket(t, 3, clock)
	b.AllowN(context.Background(), "k", 2) // b: 2 left
	c.AllowN(context.Background(), "k", 3) // c: 0 left
	ok, ds, res := take(t, 3, Limit{Taker: a, Key: "k"}, Limit{Taker: b, Key: "k"}, Limit{Taker: c, Key: "k"})
	if ok || res[0] != nil || res[1] != nil || res[2] != nil {
		t.Fatalf("allowed %v, bookings %v", ok, res)
	}
	if left(t, a, "k") != 10 || left(t, b, "k") != 2 || left(t, c, "k") != 0 {
		t.Errorf("left %d %d %d, want 10 2 0: a denial booked something", left(t, a, "k"), left(t, b, "k"), left(t, c, "k"))
	}
	if !ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter != time.Second || ds[2].Allowed || ds[2].RetryAfter != 3*time.Second {
		t.Errorf("decisions %+v", ds)
	}
	if d := Combine(ds); d.Allowed || d.RetryAfter != 3*time.Second || d.Remaining != 0 || d.Limit != 3 {
		t.Errorf("combined %+v", d)
	}
}

// A race lost between the peek and the booking: the bookings made before
// the denial are cancelled, latest first, and given back whole.
func TestTakeLostRaceGivesBack(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	a := bucket(t, 10, clock)
	b := &between{TokenBucket: bucket(t, 4, clock)}
	b.after = func() { b.TokenBucket.AllowN(context.Background(), "k", 3) } // someone takes 3 of b's 4
	ok, ds, res := take(t, 2, Limit{Taker: a, Key: "k"}, Limit{Taker: b, Key: "k"})
	if ok || res[0] != nil || res[1] != nil {
		t.Fatalf("allowed %v, bookings %v", ok, res)
	}
	if left(t, a, "k") != 10 || left(t, b, "k") != 1 {
		t.Errorf("left a %d, b %d; want 10 and 1", left(t, a, "k"), left(t, b, "k"))
	}
	if !ds[0].Allowed || ds[0].Remaining != 10 || ds[1].Allowed || ds[1].RetryAfter != time.Second {
		t.Errorf("decisions %+v", ds)
	}
}

// A peek that said too little (room came back since): the probing booking
// is cancelled at once, and the request is booked under every limit.
func TestTakeStalePeekStillAllows(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	a := bucket(t, 10, clock)
	b := &between{TokenBucket: bucket(t, 4, clock)}
	other, _ := b.TokenBucket.Take(context.Background(), "k", 3)
	b.after = func() { other.Cancel() } // b: 1 left at the peek, 4 after
	ok, ds, res := take(t, 2, Limit{Taker: a, Key: "k"}, Limit{Taker: b, Key: "k"})
	if !ok || res[0] == nil || res[1] == nil {
		t.Fatalf("allowed %v, bookings %v", ok, res)
	}
	if left(t, a, "k") != 8 || left(t, b, "k") != 2 || ds[1].Remaining != 2 {
		t.Errorf("left a %d, b %d, decision %+v; want 8 and 2", left(t, a, "k"), left(t, b, "k"), ds[1])
	}
}

// A shadow is charged last, with AllowN, and not settled; the enforced
// limits are, and show is called with their settled decisions until Done.
func TestChargeSettle(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	a, inner := bucket(t, 10, clock), bucket(t, 10, clock)
	sh, err := ratelimit.NewShadow(inner)
	if err != nil {
		t.Fatal(err)
	}
	limits := []Limit{{Shadow: sh, Key: "k"}, {Taker: a, Key: "k"}}
	ok, ds, res := take(t, 4, limits...)
	if !ok || res[0] != nil || res[1] == nil || left(t, inner, "k") != 6 || left(t, a, "k") != 6 {
		t.Fatalf("allowed %v, bookings %v; left shadow %d, a %d", ok, res, left(t, inner, "k"), left(t, a, "k"))
	}
	var shown []ratelimit.Decision
	ch := New(res, ds, func(ds []ratelimit.Decision) { shown = append([]ratelimit.Decision(nil), ds...) })
	if err := ch.Settle(-1); !errors.Is(err, ratelimit.ErrNegativeN) || shown != nil {
		t.Fatalf("Settle(-1): %v, shown %v", err, shown)
	}
	if err := ch.Settle(1); err != nil {
		t.Fatal(err)
	}
	if left(t, a, "k") != 9 || left(t, inner, "k") != 6 || len(shown) != 2 || shown[1].Remaining != 9 {
		t.Errorf("settled at 1: a %d, shadow %d (kept), shown %+v", left(t, a, "k"), left(t, inner, "k"), shown)
	}
	if err := ch.Settle(1); !errors.Is(err, ratelimit.ErrSettled) {
		t.Errorf("second Settle: %v", err)
	}

	// After Done, a settlement counts and shows nothing.
	_, ds, res = take(t, 2, Limit{Taker: a, Key: "k"})
	shown = nil
	ch = New(res, ds, func(ds []ratelimit.Decision) { shown = ds })
	ch.Done()
	if err := ch.Settle(5); err != nil || shown != nil || left(t, a, "k") != 4 {
		t.Errorf("after Done: %v, shown %v, a %d left (want 4)", err, shown, left(t, a, "k"))
	}
	if err := Unsettled("why").Settle(1); !errors.Is(err, ratelimit.ErrCannotSettle) || err.Error() != "why" {
		t.Errorf("Unsettled: %v", err)
	}
}

// ticking is a real limiter on a clock that moves on a little after each
// booking, as any real clock does between a booking and its give-back.
type ticking struct {
	*ratelimit.TokenBucket
	clock *ratelimit.ManualClock
}

func (l *ticking) Take(ctx context.Context, key string, n int) (*ratelimit.Reservation, error) {
	r, err := l.TokenBucket.Take(ctx, key, n)
	if n > 0 {
		l.clock.Advance(time.Microsecond)
	}
	return r, err
}

// A denial gives back what was booked before it even though the clock has
// moved past the bookings' time to act: nothing acted, so nothing stays
// taken. (Cancel gives nothing back once the time to act has passed.)
func TestTakeGivesBackAfterTimeToAct(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	a := &ticking{TokenBucket: bucket(t, 10, clock), clock: clock}
	b := &between{TokenBucket: bucket(t, 4, clock)}
	b.after = func() { b.TokenBucket.AllowN(context.Background(), "k", 3) } // someone takes 3 of b's 4
	ok, _, res := take(t, 2, Limit{Taker: a, Key: "k"}, Limit{Taker: b, Key: "k"})
	if ok || res[0] != nil || res[1] != nil {
		t.Fatalf("allowed %v, bookings %v", ok, res)
	}
	if got := left(t, a, "k"); got != 10 {
		t.Errorf("a has %d left after a denied request, want 10: the rolled-back booking stayed taken", got)
	}

	// The probing booking of a stale peek is given back too.
	clock2 := ratelimit.NewManualClock(t0)
	c := &ticking{TokenBucket: bucket(t, 10, clock2), clock: clock2}
	d := &between{TokenBucket: bucket(t, 4, clock2)}
	other, _ := d.TokenBucket.Take(context.Background(), "k", 3)
	d.after = func() { other.Settle(0) } // d: 1 left at the peek, 4 after
	ok, _, res = take(t, 2, Limit{Taker: c, Key: "k"}, Limit{Taker: &tickingBetween{d, clock2}, Key: "k"})
	if !ok || res[0] == nil || res[1] == nil {
		t.Fatalf("allowed %v, bookings %v", ok, res)
	}
	if got := left(t, d.TokenBucket, "k"); got != 2 {
		t.Errorf("d has %d left, want 2: the probing booking stayed taken", got)
	}
}

// tickingBetween is between on a clock that moves on after each booking.
type tickingBetween struct {
	*between
	clock *ratelimit.ManualClock
}

func (l *tickingBetween) Take(ctx context.Context, key string, n int) (*ratelimit.Reservation, error) {
	r, err := l.between.Take(ctx, key, n)
	if n > 0 {
		l.clock.Advance(time.Microsecond)
	}
	return r, err
}
