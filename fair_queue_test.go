package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fairQueueRig is a Fair over a token bucket of 1 per 10ms and capacity
// 1, drained, on the bubble's clock: each grant of the queue happens at its
// own instant.
func fairQueueRig(t *testing.T, opts ...FairOption) (*Fair, *countingLimiter) {
	t.Helper()
	tb, err := NewTokenBucket(Every(10*time.Millisecond), 1)
	if err != nil {
		t.Fatal(err)
	}
	shared := &countingLimiter{Limiter: tb}
	f, err := NewFair(shared, Every(10*time.Millisecond), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Allow("drain") {
		t.Fatal("the bucket was not full")
	}
	return f, shared
}

type fairGrant struct {
	at     time.Time
	tenant string
	seq    int // the order of queuing within its tenant
}

// TestFairQueueRoundRobin: a tenant with 20 waits queued delays the waits of
// two other tenants by one grant at most.
func TestFairQueueRoundRobin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := fairQueueRig(t)
		var mu sync.Mutex
		var grants []fairGrant
		var wg sync.WaitGroup
		wait := func(tenant string, seq int) {
			wg.Go(func() {
				if err := f.Wait(context.Background(), tenant); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				grants = append(grants, fairGrant{time.Now(), tenant, seq})
				mu.Unlock()
			})
			synctest.Wait() // queued before the next
		}
		for i := range 20 {
			wait("flood", i)
		}
		wait("a", 0)
		wait("b", 0)
		if q := f.Queued(); q != 22 {
			t.Fatalf("%d queued, want 22", q)
		}
		wg.Wait()
		slices.SortFunc(grants, func(x, y fairGrant) int { return x.at.Compare(y.at) })
		var order []string
		for _, g := range grants {
			order = append(order, g.tenant+strconv.Itoa(g.seq))
		}
		want := []string{"flood0", "a0", "b0"}
		for i := 1; i < 20; i++ {
			want = append(want, "flood"+strconv.Itoa(i))
		}
		if !slices.Equal(order, want) {
			t.Errorf("grant order %v, want %v", order, want)
		}
	})
}

// TestFairQueueBounds: past the per-tenant or the total bound WaitN fails at
// once with ErrQueueFull; a cancelled wait leaves the queue and consumes
// nothing.
func TestFairQueueBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, shared := fairQueueRig(t, WithFairQueue(2, 3))
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 10)
		for _, k := range []string{"a", "a", "b"} {
			go func() { errs <- f.Wait(ctx, k) }()
			synctest.Wait()
		}
		if err := f.Wait(ctx, "a"); !errors.Is(err, ErrQueueFull) {
			t.Errorf("a's third wait: %v, want ErrQueueFull", err)
		}
		if err := f.Wait(ctx, "c"); !errors.Is(err, ErrQueueFull) {
			t.Errorf("a fourth wait in all: %v, want ErrQueueFull", err)
		}
		before := shared.allowed
		cancel()
		for range 3 {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled wait: %v", err)
			}
		}
		if q := f.Queued(); q != 0 || shared.allowed != before {
			t.Errorf("after the cancels: %d queued, %d consumed", q, shared.allowed-before)
		}
		for _, c := range []struct {
			n    int
			want error
		}{{-1, ErrNegativeN}, {2, ErrExceedsLimit}} {
			if err := f.WaitN(context.Background(), "a", c.n); !errors.Is(err, c.want) {
				t.Errorf("WaitN(%d): %v, want %v", c.n, err, c.want)
			}
		}
		if err := f.WaitN(context.Background(), "a", 0); err != nil {
			t.Errorf("WaitN(0): %v", err)
		}
		if _, err := NewFair(shared, PerSecond(1), WithFairQueue(0, 1)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithFairQueue(0, 1): %v", err)
		}
	})
}

// TestFairQueueProperty: random tenants queue random waits in a random
// order, some cancelled at random times. Every grant is one the shared
// limiter allowed; nothing cancelled is granted or consumed; grants to one
// tenant come in the order queued; and a wait that was the k-th of its
// tenant's queue (k from 1) when queued is granted after at most k grants
// to each other tenant.
func TestFairQueueProperty(t *testing.T) {
	for seed := range uint64(25) {
		synctest.Test(t, func(t *testing.T) { fairQueueRun(t, seed) })
	}
}

func fairQueueRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 27))
	f, shared := fairQueueRig(t)
	tenants := 1 + rng.IntN(6)
	type waitRec struct {
		tenant    string
		seq, pos  int // order queued within its tenant; its place then, from 1
		queuedAt  int // grants made before it was queued
		cancelled bool
		granted   time.Time
	}
	var mu sync.Mutex
	var recs []*waitRec
	var wg sync.WaitGroup
	seqs := make(map[string]int)
	grantsSoFar := func() int {
		n := 0
		for _, r := range recs {
			if !r.granted.IsZero() {
				n++
			}
		}
		return n
	}
	for range 10 + rng.IntN(30) {
		k := "t" + strconv.Itoa(rng.IntN(tenants))
		mu.Lock()
		pos := 1
		for _, r := range recs {
			if r.tenant == k && r.granted.IsZero() && !r.cancelled {
				pos++
			}
		}
		r := &waitRec{tenant: k, seq: seqs[k], pos: pos, queuedAt: grantsSoFar()}
		seqs[k]++
		recs = append(recs, r)
		mu.Unlock()
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if rng.IntN(5) == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Millisecond)
		}
		wg.Go(func() {
			defer cancel()
			err := f.Wait(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				r.granted = time.Now()
			case errors.Is(err, context.DeadlineExceeded):
				r.cancelled = true
			default:
				t.Error(err)
			}
		})
		synctest.Wait()
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
			synctest.Wait()
		}
	}
	wg.Wait()
	var granted []*waitRec
	for _, r := range recs {
		if !r.granted.IsZero() {
			granted = append(granted, r)
		}
	}
	if len(granted) != shared.allowed-1 { // the drain took 1
		t.Fatalf("seed %d: %d waits granted, the shared limiter allowed %d", seed, len(granted), shared.allowed-1)
	}
	slices.SortFunc(granted, func(x, y *waitRec) int { return x.granted.Compare(y.granted) })
	for i := 1; i < len(granted); i++ {
		if granted[i].granted.Equal(granted[i-1].granted) {
			t.Fatalf("seed %d: two grants at one instant", seed)
		}
	}
	last := make(map[string]int)
	for i, r := range granted {
		if prev, ok := last[r.tenant]; ok && r.seq < prev {
			t.Errorf("seed %d: %s's wait %d granted after its wait %d", seed, r.tenant, r.seq, prev)
		}
		last[r.tenant] = r.seq
		others := make(map[string]int)
		for _, g := range granted[r.queuedAt:i] {
			if g.tenant != r.tenant {
				others[g.tenant]++
			}
		}
		for o, c := range others {
			if c > r.pos {
				t.Errorf("seed %d: %s's wait %d (place %d) waited behind %d grants to %s", seed, r.tenant, r.seq, r.pos, c, o)
			}
		}
	}
}

// Fair.Reserve books only what is allowed now, and nothing else.
func TestFairReserve(t *testing.T) {
	clk := NewManualClock(fairT0)
	f := newFairFixed(t, clk, 2)
	for i, want := range []bool{true, true, false} {
		r, err := f.Reserve(context.Background(), "a", 1)
		if err != nil || r.OK() != want || r.Delay() != 0 && want {
			t.Fatalf("reserve %d: ok %v delay %v, %v; want ok %v", i, r.OK(), r.Delay(), err, want)
		}
		if !want && r.Delay() != time.Second {
			t.Errorf("refused: delay %v, want 1s (the next window)", r.Delay())
		}
	}
	if _, err := f.Reserve(context.Background(), "a", -1); !errors.Is(err, ErrNegativeN) {
		t.Errorf("n < 0: %v", err)
	}
}

// countingLimiterSync counts, safely for concurrent use, the events its
// Limiter allows through Allow and AllowN.
type countingLimiterSync struct {
	Limiter
	allowed atomic.Int64
}

func (c *countingLimiterSync) Allow(key string) bool {
	ok := c.Limiter.Allow(key)
	if ok {
		c.allowed.Add(1)
	}
	return ok
}

func (c *countingLimiterSync) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	d, err := c.Limiter.AllowN(ctx, key, n)
	if err == nil && d.Allowed {
		c.allowed.Add(int64(n))
	}
	return d, err
}

// TestFairConcurrent: goroutines mix Allow, AllowN, AllowPriority and Wait
// (some cancelled) on one Fair with classes, on the real clock, under
// -race. Fair allows exactly what the shared limiter allowed, and the
// queue ends empty.
func TestFairConcurrent(t *testing.T) {
	fw, err := NewFixedWindow(Per(200, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	shared := &countingLimiterSync{Limiter: fw}
	f, err := NewFair(shared, Per(200, 20*time.Millisecond), WithMaxTenants(8),
		WithClasses(Class{"critical", 20}, Class{"rest", 0}), WithFairQueue(4, 16))
	if err != nil {
		t.Fatal(err)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 29))
			for range 300 {
				tenant := "t" + strconv.Itoa(rng.IntN(12))
				switch rng.IntN(4) {
				case 0:
					if f.Allow(tenant) {
						allowed.Add(1)
					}
				case 1:
					n := 1 + rng.IntN(3)
					if d, err := f.AllowN(context.Background(), tenant, n); err == nil && d.Allowed {
						allowed.Add(int64(n))
					}
				case 2:
					if f.AllowPriority(tenant, Priority(rng.IntN(2))) {
						allowed.Add(1)
					}
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(5))*time.Millisecond)
					ctx = ContextWithPriority(ctx, Priority(rng.IntN(2)))
					if err := f.Wait(ctx, tenant); err == nil {
						allowed.Add(1)
					} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrQueueFull) {
						t.Error(err)
					}
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if a, s := allowed.Load(), shared.allowed.Load(); a != s || a == 0 {
		t.Errorf("Fair allowed %d, the shared limiter %d", a, s)
	}
	if q := f.Queued(); q != 0 {
		t.Errorf("%d waits left queued", q)
	}
}
