package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// scripted is a Limiter whose answers the test sets: it allows while ok.
type scripted struct {
	ok    bool
	calls int // deciding calls (peeks not counted)
	clock Clock
}

func (s *scripted) Allow(string) bool { s.calls++; return s.ok }
func (s *scripted) AllowN(_ context.Context, _ string, n int) (Decision, error) {
	if n == 0 {
		return Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: time.Second}, nil
	}
	if n > 10 {
		return Decision{}, ErrExceedsLimit
	}
	s.calls++
	d := Decision{Allowed: s.ok, Limit: 10}
	if !s.ok {
		d.RetryAfter = time.Millisecond
	}
	return d, nil
}
func (s *scripted) Reserve(_ context.Context, _ string, n int) (*Reservation, error) {
	s.calls++
	return NewReservation(s.clock, s.ok, Decision{Allowed: s.ok, Limit: 10}, s.clock.Now(), nil), nil
}
func (s *scripted) Wait(ctx context.Context, key string) error { return s.WaitN(ctx, key, 1) }
func (s *scripted) WaitN(context.Context, string, int) error {
	s.calls++
	if s.ok {
		return nil
	}
	return &LimitError{RetryAfter: time.Millisecond}
}

func TestPenaltyBoxTimeline(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	var events []Event
	tb, err := NewTokenBucket(PerMinute(5), 5, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	box, err := NewPenaltyBox(tb, 5, time.Minute, 15*time.Minute, WithClock(clk), WithName("login"),
		WithObserver(ObserverFunc(func(e Event) { events = append(events, e) })))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if !box.Allow("ip") {
			t.Fatalf("attempt %d refused", i)
		}
	}
	for i := 0; i < 4; i++ {
		clk.Advance(time.Second)
		if box.Allow("ip") {
			t.Fatalf("refusal %d allowed", i)
		}
		if box.Blocked("ip") != 0 {
			t.Fatalf("blocked after %d refusals", i+1)
		}
	}
	clk.Advance(time.Second)
	if box.Allow("ip") {
		t.Fatal("fifth refusal allowed")
	}
	if got := box.Blocked("ip"); got != 15*time.Minute {
		t.Fatalf("Blocked = %v, want 15m", got)
	}
	if len(events) != 1 || events[0].Kind != EventBlocked || events[0].Key != "ip" || events[0].RetryAfter != 15*time.Minute || events[0].Limiter != "login" {
		t.Fatalf("events = %+v", events)
	}
	// A minute later the bucket is full again, but the key is blocked.
	clk.Advance(time.Minute)
	left := 14 * time.Minute
	if box.Allow("ip") {
		t.Fatal("blocked key allowed")
	}
	d, err := box.AllowN(ctx, "ip", 1)
	if err != nil || d.Allowed || d.RetryAfter != left || d.Remaining != 0 || d.Limit != 5 || d.ResetAfter < left {
		t.Fatalf("AllowN while blocked = %+v, %v", d, err)
	}
	if d, err := box.AllowN(ctx, "ip", 0); err != nil || !d.Allowed || d.RetryAfter != left || d.Remaining != 0 {
		t.Fatalf("peek while blocked = %+v, %v", d, err)
	}
	if _, err := box.AllowN(ctx, "ip", 6); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(6) while blocked: %v", err)
	}
	r, err := box.Reserve(ctx, "ip", 1)
	if err != nil || r.OK() || r.Decision().RetryAfter != left || r.Delay() != left || !r.TimeToAct().Equal(clk.Now().Add(left)) {
		t.Fatalf("Reserve while blocked: %+v, %v", r, err)
	}
	err = box.Wait(ctx, "ip")
	var le *LimitError
	if !errors.As(err, &le) || le.RetryAfter != left || le.Deadline || !errors.Is(err, ErrLimited) {
		t.Fatalf("Wait while blocked: %v", err)
	}
	if !box.Allow("other") {
		t.Fatal("another key refused")
	}
	// One nanosecond before the end, still blocked; at the end, free.
	clk.Advance(left - 1)
	if box.Allow("ip") {
		t.Fatal("allowed 1ns before the block ends")
	}
	clk.Advance(1)
	if box.Blocked("ip") != 0 || !box.Allow("ip") {
		t.Fatal("refused at the block's end")
	}
	if last := events[len(events)-1]; last.Kind != EventUnblocked || last.Key != "ip" || last.RetryAfter != 0 {
		t.Fatalf("last event %+v", last)
	}
	// Counting starts afresh: four more refusals do not block.
	for i := 0; i < 4; i++ {
		box.Allow("ip")
	}
	for i := 0; i < 4; i++ {
		if box.Allow("ip") {
			t.Fatal("allowed past the bucket")
		}
	}
	if box.Blocked("ip") != 0 {
		t.Fatal("blocked by refusals from before the block")
	}
	// Refusals spread wider than the window never block.
	clk.Advance(time.Hour)
	box2, _ := NewPenaltyBox(&scripted{clock: clk}, 3, time.Second, time.Minute, WithClock(clk))
	for i := 0; i < 10; i++ {
		box2.Allow("k")
		clk.Advance(500 * time.Millisecond)
	}
	if box2.Blocked("k") != 0 {
		t.Fatal("refusals at 0.5s apart blocked a 3-in-1s box") // 3 refusals span 1s: t−W excluded
	}
}

// TestPenaltyBoxGuesser: a guesser at 1,000 attempts a second against
// 5/m block 15m after 5 gets at most 5 + 5 per 15 minutes through over a
// simulated day.
func TestPenaltyBoxGuesser(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	tb, _ := NewTokenBucket(PerMinute(5), 5, WithClock(clk))
	box, err := NewPenaltyBox(tb, 5, time.Minute, 15*time.Minute, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	var through []time.Duration
	const step = time.Millisecond
	for at := time.Duration(0); at < 24*time.Hour; at += step {
		if box.Allow("guesser") {
			through = append(through, at)
		}
		// While blocked, every attempt is refused without asking the
		// limiter (TestPenaltyBoxOracle checks that on every call): the
		// attempts of the block but its first and last are skipped.
		if left := box.Blocked("guesser"); left > 2*step {
			skip := (left - step) / step * step
			clk.Advance(skip)
			at += skip
		}
		clk.Advance(step)
	}
	_ = start
	// In any 15 minutes at most 10 got through, and over the day at most
	// 5 + 5 per 15 minutes.
	for i := range through {
		j := i
		for j < len(through) && through[j]-through[i] < 15*time.Minute {
			j++
		}
		if j-i > 10 {
			t.Fatalf("%d through within 15m from %v", j-i, through[i])
		}
	}
	if max := 5 + 5*96; len(through) > max {
		t.Fatalf("%d through in a day, want at most %d", len(through), max)
	}
	if len(through) < 96*5-5 {
		t.Fatalf("only %d through: the block lasts longer than said", len(through))
	}
	t.Logf("%d attempts through in a day (without the box: %d)", len(through), 5+24*60*5)
}

// TestPenaltyBoxOracle compares the box on random refusals and random
// time steps with the rule computed directly: blocked exactly when after
// refusals at instants in (t−W, t] since the last block began, until +D.
func TestPenaltyBoxOracle(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		clk := NewManualClock(time.Unix(1_000_000, 0))
		lim := &scripted{clock: clk}
		after := 1 + rng.IntN(5)
		within := time.Duration(1 + rng.IntN(100))
		block := time.Duration(1 + rng.IntN(200))
		box, err := NewPenaltyBox(lim, after, within, block, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		type state struct {
			times []int64
			until int64
		}
		oracle := map[string]*state{}
		now := int64(0)
		ctx := context.Background()
		for step := 0; step < 3000; step++ {
			dt := int64(rng.IntN(int(within)/2 + 3))
			clk.Advance(time.Duration(dt))
			now += dt
			key := string(rune('a' + rng.IntN(3)))
			if rng.IntN(8) == 0 {
				key = strings.Repeat(key, 100) // kept by its digest
			}
			st := oracle[key]
			if st == nil {
				st = &state{until: -1}
				oracle[key] = st
			}
			lim.ok = rng.IntN(3) == 0
			blocked := now < st.until
			if got, want := box.Blocked(key), time.Duration(max(0, st.until-now)); got != want {
				t.Fatalf("seed %d step %d: Blocked = %v, want %v", seed, step, got, want)
			}
			calls := lim.calls
			var allowed bool
			switch rng.IntN(4) {
			case 0:
				allowed = box.Allow(key)
			case 1:
				d, err := box.AllowN(ctx, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				allowed = d.Allowed
				if blocked && d.RetryAfter != time.Duration(st.until-now) {
					t.Fatalf("seed %d step %d: RetryAfter %v, want %v", seed, step, d.RetryAfter, st.until-now)
				}
			case 2:
				r, err := box.Reserve(ctx, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				allowed = r.OK()
			case 3:
				err := box.Wait(ctx, key)
				allowed = err == nil
				var le *LimitError
				if blocked && (!errors.As(err, &le) || le.RetryAfter != time.Duration(st.until-now)) {
					t.Fatalf("seed %d step %d: Wait while blocked: %v", seed, step, err)
				}
			}
			asked := lim.calls != calls
			if blocked {
				if allowed || asked {
					t.Fatalf("seed %d step %d: blocked key allowed=%v asked=%v", seed, step, allowed, asked)
				}
				continue
			}
			if !asked || allowed != lim.ok {
				t.Fatalf("seed %d step %d: free key: asked=%v allowed=%v, limiter says %v", seed, step, asked, allowed, lim.ok)
			}
			if !allowed {
				kept := st.times[:0]
				for _, x := range st.times {
					if x > now-int64(within) {
						kept = append(kept, x)
					}
				}
				st.times = append(kept, now)
				if len(st.times) >= after {
					st.times, st.until = nil, now+int64(block)
				}
			}
		}
	}
}

// TestPenaltyBoxBounded: under a flood of blocked keys the table stays at
// its cap, histories go before blocks, and blocks go soonest-ending first.
func TestPenaltyBoxBounded(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	lim := &scripted{clock: clk}
	var unblocked []Event
	box, err := NewPenaltyBox(lim, 2, time.Hour, time.Hour, WithClock(clk), WithMaxKeys(4),
		WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventUnblocked {
				unblocked = append(unblocked, e)
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 10_000)
	for i, k := range []string{"a", "b", "c", long} { // blocked at 0, 1, 2, 3s
		box.Allow(k)
		box.Allow(k)
		if box.Blocked(k) != time.Hour {
			t.Fatalf("key %d not blocked", i)
		}
		clk.Advance(time.Second)
	}
	for k := range box.keys {
		if len(k) > 78 {
			t.Fatalf("kept key of %d bytes", len(k))
		}
	}
	// A new history drops the block ending soonest ("a"), no other.
	box.Allow("new")
	if box.Len() != 4 || box.Blocked("a") != 0 || box.Blocked("b") == 0 || box.Blocked(long) == 0 {
		t.Fatalf("len %d, a %v b %v", box.Len(), box.Blocked("a"), box.Blocked("b"))
	}
	if len(unblocked) != 1 || unblocked[0].Key != "a" || unblocked[0].RetryAfter != time.Hour-4*time.Second {
		t.Fatalf("unblocked %+v", unblocked)
	}
	// Another new key drops the history of "new", not a block.
	box.Allow("newer")
	if box.Len() != 4 || box.Blocked("b") == 0 || len(unblocked) != 1 {
		t.Fatalf("len %d, unblocked %+v", box.Len(), unblocked)
	}
	// A flood of distinct keys keeps the table at its cap.
	for i := 0; i < 1000; i++ {
		box.Allow(strings.Repeat("k", i+1))
		box.Allow(strings.Repeat("k", i+1))
		if box.Len() > 4 {
			t.Fatalf("table at %d", box.Len())
		}
	}
	// Blocks that ran out are cleared before anything is dropped.
	clk.Advance(2 * time.Hour)
	unblocked = nil
	box.Allow("late")
	if box.Len() != 1 || len(unblocked) != 4 {
		t.Fatalf("len %d, unblocked %d", box.Len(), len(unblocked))
	}
	for _, e := range unblocked {
		if e.RetryAfter != 0 {
			t.Fatalf("a block that ran out reported %v left", e.RetryAfter)
		}
	}
}

func TestPenaltyBoxInvalid(t *testing.T) {
	tb, _ := NewTokenBucket(PerSecond(1), 1)
	for _, c := range []struct {
		l             Limiter
		after         int
		within, block time.Duration
	}{
		{nil, 1, 1, 1}, {tb, 0, 1, 1}, {tb, MaxPenaltyAfter + 1, 1, 1}, {tb, 1, 0, 1}, {tb, 1, 1, 0}, {tb, 1, -1, 1}, {tb, 1, 1, 1 << 62},
	} {
		if _, err := NewPenaltyBox(c.l, c.after, c.within, c.block); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := NewPenaltyBox(tb, 1, 1, 1, WithMaxKeys(-1)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("negative cap: %v", err)
	}
	box, _ := NewPenaltyBox(tb, 1, 1, 1)
	if _, err := box.AllowN(context.Background(), "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("AllowN(-1): %v", err)
	}
}

func TestPenaltyBoxAllowAllocs(t *testing.T) {
	tb, _ := NewTokenBucket(PerSecond(1e9), 1e9)
	box, _ := NewPenaltyBox(tb, 5, time.Minute, time.Minute)
	box.Allow("k")
	if a := testing.AllocsPerRun(1000, func() { box.Allow("k") }); a != 0 {
		t.Fatalf("Allow allocates %v", a)
	}
}
