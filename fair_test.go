package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// fairT0 is an instant on a whole second, so that the activity windows of a
// per-second rate start on whole seconds after it.
var fairT0 = time.Unix(1_700_000_000, 0)

func newFairFixed(t *testing.T, clk Clock, n int64, opts ...FairOption) *Fair {
	t.Helper()
	fw, err := NewFixedWindow(PerSecond(n), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFair(fw, PerSecond(n), append([]FairOption{WithFairClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// allowRun asks Allow k times for tenant and returns how many were allowed.
func allowRun(f *Fair, tenant string, k int) int {
	got := 0
	for range k {
		if f.Allow(tenant) {
			got++
		}
	}
	return got
}

// TestFairTimeline shows what "active" means: a tenant counts from the
// window after the one it first asked in, and stops counting (its share no
// longer held for it, its entry dropped) one full window after its last
// request. Shared limit: a fixed window of 10 per second; windows w0, w1, …
// are whole seconds.
func TestFairTimeline(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 10)
	type row struct {
		at      int // window
		tenant  string
		ask     int
		allowed int
		share   int64 // the window's share after the row
		active  int   // tenants counted active after the row
	}
	rows := []row{
		// w0: nobody asked in the window before: s = 10 for whoever comes.
		{0, "a", 10, 10, 10, 1},
		// b is new in w0: active at once, but guaranteed nothing before
		// w1; it may only borrow, and the shared window is full.
		{0, "b", 5, 0, 10, 2},
		// w1: a and b asked in w0, so s = 10/2 = 5, and each is guaranteed
		// min(s, what it asked in w0) = 5. a gets its 5; its 6th would
		// borrow b's unused 5, which are held for b.
		{1, "a", 8, 5, 5, 2},
		{1, "b", 5, 5, 5, 2},
		{1, "a", 1, 0, 5, 2}, // the shared window is full now anyway
		// w2: b is idle but asked in w1, so it is still active: its 5 are
		// held for it all through w2 and a cannot borrow them.
		{2, "a", 10, 5, 5, 2},
		// w3: only a asked in w2: s = 10, and b's entry is gone.
		{3, "a", 10, 10, 10, 1},
		// w4: b comes back while a floods first: s is still 10 (a alone
		// asked in w3) and a takes the window before b asks.
		{4, "a", 20, 10, 10, 1},
		{4, "b", 5, 0, 10, 2},
		// w5: both asked in w4: s = 5 each, whatever a sends.
		{5, "a", 20, 5, 5, 2},
		{5, "b", 5, 5, 5, 2},
		// w6, w7: a stops. In w6 its share is held (it asked in w5), so b
		// gets its 5 and no more; from w7 b alone is active and gets all 10.
		{6, "b", 10, 5, 5, 2},
		{7, "b", 10, 10, 10, 1},
		// w8: a is back, new again: b's 10 are held for it (it asked 10
		// in w7), so a may borrow nothing.
		{8, "a", 1, 0, 10, 2},
		{8, "b", 1, 1, 10, 2},
		// w10, after an idle w9: nobody asked in the window before, so
		// nobody is counted, and b may take it all.
		{10, "b", 10, 10, 10, 1},
	}
	for i, r := range rows {
		clk.Set(fairT0.Add(time.Duration(r.at)*time.Second + time.Millisecond*time.Duration(i)))
		if got := allowRun(f, r.tenant, r.ask); got != r.allowed {
			t.Errorf("row %d (w%d %s ×%d): allowed %d, want %d", i, r.at, r.tenant, r.ask, got, r.allowed)
		}
		if s, a := f.Share(); s != r.share || a != r.active {
			t.Errorf("row %d: share %d with %d active, want %d with %d", i, s, a, r.share, r.active)
		}
		if r.at == 3 && f.Tenants() != 1 {
			t.Errorf("row %d: %d tenant entries, want 1 (b dropped)", i, f.Tenants())
		}
	}
}

// A tenant past its share is told it may retry when the next window
// starts, with Remaining the headroom above the held guarantees.
func TestFairAllowNDecision(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 10)
	ctx := context.Background()
	for _, k := range []string{"a", "b"} { // both guaranteed 5 in w1
		if _, err := f.AllowN(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(fairT0.Add(time.Second + 250*time.Millisecond))
	d, err := f.AllowN(ctx, "a", 5)
	if err != nil || !d.Allowed || d.Remaining != 5 {
		t.Fatalf("a's share: %+v, %v", d, err)
	}
	d, err = f.AllowN(ctx, "a", 1)
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter != 750*time.Millisecond || d.Limit != 10 {
		t.Fatalf("a past its share: %+v, %v; want refused, 0 free, retry after 750ms", d, err)
	}
	if d, err := f.AllowN(ctx, "b", 0); err != nil || !d.Allowed || d.Remaining != 5 {
		t.Fatalf("peek: %+v, %v", d, err)
	}
	if d, err := f.AllowN(ctx, "b", 6); err != nil || d.Allowed {
		t.Fatalf("b asks 6 with 5 left: %+v, %v", d, err)
	}
	if d, err := f.AllowN(ctx, "b", 5); err != nil || !d.Allowed {
		t.Fatalf("b's share: %+v, %v", d, err)
	}
}

func TestFairBadInput(t *testing.T) {
	clk := NewManualClock(fairT0)
	fw, _ := NewFixedWindow(PerSecond(10), WithClock(clk))
	for _, c := range []struct {
		name   string
		shared Limiter
		rate   Rate
		opts   []FairOption
		want   error
	}{
		{"nil shared", nil, PerSecond(1), nil, ErrInvalidOption},
		{"zero rate", fw, Rate{}, nil, ErrInvalidRate},
		{"negative period", fw, Per(1, -time.Second), nil, ErrInvalidRate},
		{"zero tenants", fw, PerSecond(1), []FairOption{WithMaxTenants(0)}, ErrInvalidOption},
		{"zero key length", fw, PerSecond(1), []FairOption{WithMaxTenantKeyLen(0)}, ErrInvalidOption},
	} {
		if _, err := NewFair(c.shared, c.rate, c.opts...); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	f := newFairFixed(t, clk, 10, WithMaxTenantKeyLen(4))
	if f.Allow("12345") {
		t.Error("a key past the length cap was allowed")
	}
	if _, err := f.AllowN(context.Background(), "12345", 1); !errors.Is(err, ErrTenantKeyTooLong) {
		t.Errorf("long key: %v", err)
	}
	if _, err := f.AllowN(context.Background(), "a", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("n < 0: %v", err)
	}
	if _, err := f.AllowN(context.Background(), "a", 11); !errors.Is(err, ErrExceedsLimit) {
		t.Errorf("n past the limit: %v", err)
	}
	if !f.Allow("") {
		t.Error(`the empty tenant "" is a tenant like any other`)
	}
}

// A flood of distinct tenants past the cap shares one overflow entry: the
// table stays at the cap, the shared limit holds, and the tenants known
// before the flood keep their shares.
func TestFairTenantCap(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 100, WithMaxTenants(10))
	for i := range 9 {
		allowRun(f, "known"+strconv.Itoa(i), 11)
	}
	clk.Set(fairT0.Add(time.Second)) // 9 active: s = 11, each guaranteed 11
	allowed := 0
	for i := range 100_000 {
		if f.Allow("flood" + strconv.Itoa(i)) {
			allowed++
		}
	}
	if n := f.Tenants(); n != 10 {
		t.Errorf("%d entries, want the cap of 10", n)
	}
	// New tenants are guaranteed nothing in their first window: the flood
	// gets only the headroom above the 9 × 11 held, 1 event.
	if allowed != 1 {
		t.Errorf("the flood of distinct tenants got %d, want the 1 of headroom", allowed)
	}
	for i := range 9 {
		if got := allowRun(f, "known"+strconv.Itoa(i), 11); got != 11 {
			t.Errorf("known%d got %d of its share 11", i, got)
		}
	}
	// In the next window the whole flood counts as two tenants: the one
	// that got an entry before the table filled, and the overflow entry.
	clk.Set(fairT0.Add(2 * time.Second))
	if s, a := f.Share(); s != 100/11 || a != 11 {
		t.Errorf("after the flood: share %d with %d active, want 9 with 11", s, a)
	}
}

// Allow for a known tenant within its share does not allocate.
func TestFairAllowAllocs(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 1<<30)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		f.Allow(n)
	}
	clk.Set(fairT0.Add(time.Second))
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		if !f.Allow(names[i%3]) {
			t.Fatal("refused")
		}
		i++
	}); a != 0 {
		t.Errorf("Allow allocates %.1f times", a)
	}
}
