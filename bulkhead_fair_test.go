package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Tests of the fair bulkheads (bulkhead_fair.go). Most drive the queue
// through enqueueFair, abandon and Release, without goroutines: a waiter
// is granted when its granted field turns true, so every interleaving is
// exact and deterministic.

// fbWaiter is one queued call of a test, with what the test knows of it.
type fbWaiter struct {
	w      *permitWaiter
	tenant string
	class  int
	seq    int // its place among all calls
}

// fbEnqueue queues a call of class c and tenant on b, failing if it was
// admitted at once or refused.
func fbEnqueue(t *testing.T, b *Bulkhead, c int, tenant string) *permitWaiter {
	t.Helper()
	w, err := b.enqueueFair(c, tenant)
	if err != nil || w == nil {
		t.Fatalf("enqueueFair(%d, %q) = %v, %v; want queued", c, tenant, w, err)
	}
	return w
}

// TestBulkheadFairRoundRobin pins the order of service of a fair
// bulkhead: round-robin across tenants in the order they joined (a new
// tenant at the back of the round), FIFO within a tenant.
func TestBulkheadFairRoundRobin(t *testing.T) {
	b := bhNew(t, 1, WithBulkheadFairQueue(10, 100))
	if !b.TryAcquire() {
		t.Fatal("TryAcquire = false on an idle bulkhead")
	}
	var ws []*permitWaiter
	var names []string
	add := func(tenant string, n int) {
		for i := range n {
			ws = append(ws, fbEnqueue(t, b, 0, tenant))
			names = append(names, fmt.Sprintf("%s%d", tenant, i+1))
		}
	}
	add("a", 5) // a's flood first
	add("b", 2)
	add("c", 1)
	bhCheck(t, b, 1, 8)
	if b.TryAcquire() {
		t.Fatal("TryAcquire = true while calls wait")
	}
	var got []string
	for range ws {
		before := grantedSet(ws)
		b.Release()
		for i, w := range ws {
			if w.granted && !before[i] {
				got = append(got, names[i])
			}
		}
	}
	// b and c joined the round behind a, each at its back: after a1 come
	// b1 and c1, not a2.
	want := "a1 b1 c1 a2 b2 a3 a4 a5"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("grants %s, want %s", g, want)
	}
	bhCheck(t, b, 1, 0)
	b.Release()
	bhCheck(t, b, 0, 0)
	if len(b.fs.q.tenants) != 0 || len(b.fs.q.classes[0].byTenant) != 0 || len(b.fs.q.classes[0].ring) != 0 {
		t.Errorf("the empty queue keeps tenants: %v, %v", b.fs.q.tenants, b.fs.q.classes[0].byTenant)
	}
}

func grantedSet(ws []*permitWaiter) []bool {
	g := make([]bool, len(ws))
	for i, w := range ws {
		g[i] = w.granted
	}
	return g
}

// TestBulkheadFairBounds checks the queue bounds: per tenant, in total,
// and the errors they give, matching ErrBulkheadFull and ErrQueueFull.
func TestBulkheadFairBounds(t *testing.T) {
	b := bhNew(t, 1, WithBulkheadFairQueue(2, 3))
	if !b.TryAcquire() {
		t.Fatal("TryAcquire = false")
	}
	fbEnqueue(t, b, 0, "a")
	fbEnqueue(t, b, 0, "a")
	_, err := b.enqueueFair(0, "a")
	if !errors.Is(err, ErrBulkheadFull) || !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("third wait of a: %v, want the tenant's queue full", err)
	}
	fbEnqueue(t, b, 0, "b")
	_, err = b.enqueueFair(0, "c")
	if !errors.Is(err, ErrBulkheadFull) || !errors.Is(err, ErrQueueFull) || strings.Contains(err.Error(), "tenant") {
		t.Fatalf("fourth wait in all: %v, want the queue full", err)
	}
	bhCheck(t, b, 1, 3)

	// WithMaxWaiters, smaller, bounds the total too.
	b = bhNew(t, 1, WithBulkheadFairQueue(5, 10), WithMaxWaiters(1))
	b.TryAcquire()
	fbEnqueue(t, b, 0, "a")
	if _, err := b.enqueueFair(0, "b"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second wait with WithMaxWaiters(1): %v, want ErrQueueFull", err)
	}

	// A tenant key past DefaultMaxTenantKeyLen is refused, not kept.
	err = b.AcquireFor(context.Background(), strings.Repeat("x", DefaultMaxTenantKeyLen+1))
	if !errors.Is(err, ErrTenantKeyTooLong) {
		t.Fatalf("long tenant: %v, want ErrTenantKeyTooLong", err)
	}
}

func TestBulkheadFairInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  BulkheadOption
	}{
		{"zero per tenant", WithBulkheadFairQueue(0, 5)},
		{"negative total", WithBulkheadFairQueue(5, -1)},
		{"no class", WithBulkheadClasses()},
		{"no reserve", WithBulkheadClasses(Class{"a", 0}, Class{"b", 0})},
		{"negative reserve", WithBulkheadClasses(Class{"a", -1}, Class{"b", 2})},
		{"reserves past the limit", WithBulkheadClasses(Class{"a", 3}, Class{"b", 2})},
	} {
		if _, err := NewBulkhead(4, tc.opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: NewBulkhead = %v, want ErrInvalidOption", tc.name, err)
		}
		if _, err := NewKeyedBulkhead(4, tc.opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: NewKeyedBulkhead = %v, want ErrInvalidOption", tc.name, err)
		}
	}
	b := bhNew(t, 4, WithBulkheadClasses(Class{"a", 1}, Class{"b", 0}))
	ctx := ContextWithPriority(context.Background(), 2)
	if err := b.Acquire(ctx); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("Acquire with priority 2 of 2 classes: %v, want ErrUnknownClass", err)
	}
	if _, err := b.ClassGranted(2); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("ClassGranted(2): %v, want ErrUnknownClass", err)
	}
	bhCheck(t, b, 0, 0)
}

// TestBulkheadFairTenantBound checks the bound of WithBulkheadFairQueue on
// random arrivals: a tenant's k-th queued call (k-1 of its calls ahead of
// it when it joined) is granted after at most k grants to each other
// tenant, however many calls the others queue, whenever they queue them.
func TestBulkheadFairTenantBound(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		limit := 1 + rng.IntN(3)
		b := bhNew(t, limit, WithBulkheadFairQueue(10000, 100000))
		for range limit {
			b.TryAcquire()
		}
		type queued struct {
			w      *permitWaiter
			tenant string
			k      int            // its place in its tenant's queue when it joined
			others map[string]int // grants to each other tenant since it joined
		}
		var live []*queued
		per := map[string]int{}
		for step := range 3000 {
			if rng.IntN(3) > 0 || len(live) == 0 {
				// Tenant 0 floods; the others come now and then.
				tenant := "t0"
				if rng.IntN(4) == 0 {
					tenant = fmt.Sprintf("t%d", 1+rng.IntN(6))
				}
				per[tenant]++
				live = append(live, &queued{w: fbEnqueue(t, b, 0, tenant), tenant: tenant, k: per[tenant], others: map[string]int{}})
				continue
			}
			b.Release()
			var rest []*queued
			var got *queued
			for _, q := range live {
				if q.w.granted && got == nil {
					got = q
					continue
				}
				rest = append(rest, q)
			}
			if got == nil {
				t.Fatalf("seed %d step %d: a Release granted nobody", seed, step)
			}
			for _, q := range rest {
				if q.w.granted {
					t.Fatalf("seed %d step %d: one Release granted two", seed, step)
				}
			}
			per[got.tenant]--
			for other, n := range got.others {
				if n > got.k {
					t.Fatalf("seed %d: %s's call %d waited behind %d grants to %s, bound %d", seed, got.tenant, got.k, n, other, got.k)
				}
			}
			for _, q := range rest {
				if q.tenant != got.tenant {
					q.others[got.tenant]++
				}
			}
			live = rest
		}
	}
}

// TestBulkheadFairProperty runs random mixes of queued calls of random
// tenants and classes, cancellations (some at the instant of their grant),
// TryAcquire, Release and SetLimit, and checks: never more in flight than
// the limit when admitted; each tenant's calls of one class granted in
// FIFO order; a call of the highest class within its reserve admitted at
// once; no permit lost: at the end, with all released, nothing is in
// flight or waiting and the full limit can be taken.
func TestBulkheadFairProperty(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { fbProperty(t, seed) })
	}
}

func fbProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	limit := 2 + rng.IntN(5)
	reserve := 1 + rng.IntN(limit)
	classes := seed%3 != 0
	opts := []BulkheadOption{WithBulkheadFairQueue(1+rng.IntN(20), 1+rng.IntN(60))}
	nclass := 1
	if classes {
		opts = append(opts, WithBulkheadClasses(Class{"critical", int64(reserve)}, Class{"normal", 0}, Class{"batch", 0}))
		nclass = 3
	}
	b := bhNew(t, limit, opts...)
	// The reserve the highest class may count on: capped at limit-1, so
	// that the other classes can run on an idle bulkhead.
	sure := min(reserve, limit-1)
	held := make([]int, nclass) // permits held per class, as the test knows
	inUse := func() int {
		n := 0
		for _, h := range held {
			n += h
		}
		return n
	}
	var live []*fbWaiter
	next := map[string]int{} // per tenant and class: the seq of the next to be granted
	order := map[string][]int{}
	seq := 0
	grantedNow := func() {
		var rest []*fbWaiter
		for _, q := range live {
			if !q.w.granted {
				rest = append(rest, q)
				continue
			}
			held[q.class]++
			key := fmt.Sprint(q.tenant, "/", q.class)
			want := order[key][next[key]]
			if want != q.seq {
				t.Fatalf("%s: call %d granted, want %d first (FIFO)", key, q.seq, want)
			}
			next[key]++
		}
		live = rest
		if n := inUse(); n > b.Limit() && !shrunk(b) {
			t.Fatalf("%d in flight, limit %d", n, b.Limit())
		}
	}
	for range 4000 {
		switch op := rng.IntN(10); {
		case op < 4: // a call of some tenant and class
			c, tenant := rng.IntN(nclass), fmt.Sprintf("t%d", rng.IntN(5))
			before := inUse()
			w, err := b.enqueueFair(c, tenant)
			switch {
			case err != nil:
				if !errors.Is(err, ErrQueueFull) {
					t.Fatalf("enqueueFair: %v", err)
				}
				if classes && c == 0 && held[0] < sure && before < b.Limit() {
					t.Fatalf("a critical call within its reserve (%d of %d held) refused: %v", held[0], reserve, err)
				}
			case w == nil:
				held[c]++
				if inUse() > b.Limit() {
					t.Fatalf("%d in flight, limit %d", inUse(), b.Limit())
				}
			default:
				if classes && c == 0 && held[0] < sure && b.Limit() >= limit {
					t.Fatalf("a critical call within its reserve (%d of %d held, %d in flight) queued", held[0], sure, before)
				}
				key := fmt.Sprint(tenant, "/", c)
				order[key] = append(order[key], seq)
				live = append(live, &fbWaiter{w: w, tenant: tenant, class: c, seq: seq})
				seq++
				grantedNow()
			}
		case op < 5: // a cancel, perhaps of a call granted at that instant
			if len(live) == 0 {
				continue
			}
			i := rng.IntN(len(live))
			if c := rng.IntN(nclass); rng.IntN(2) == 0 && held[c] > 0 {
				// A release hands a permit over as the wait ends: the
				// waiter granted gives it up unused.
				held[c]--
				b.Release()
				for j, q := range live {
					if q.w.granted {
						i = j
					}
				}
			}
			q := live[i]
			live = append(live[:i], live[i+1:]...)
			b.abandon(q.w)
			key := fmt.Sprint(q.tenant, "/", q.class)
			order[key] = removeInt(order[key], q.seq)
			grantedNow()
		case op < 6:
			if b.TryAcquire() {
				held[nclass-1]++
			}
			grantedNow()
		case op < 9: // a release by a random class holding a permit
			var cs []int
			for c, h := range held {
				if h > 0 {
					cs = append(cs, c)
				}
			}
			if len(cs) == 0 {
				continue
			}
			held[cs[rng.IntN(len(cs))]]--
			b.Release()
			grantedNow()
		default:
			if rng.IntN(4) == 0 {
				n := limit
				if rng.IntN(2) == 0 {
					n = 1 + rng.IntN(limit)
				}
				if err := b.SetLimit(n); err != nil {
					t.Fatal(err)
				}
				grantedNow()
			}
		}
	}
	if err := b.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	grantedNow()
	for _, q := range live {
		b.abandon(q.w)
	}
	live = nil
	for c := range held {
		for ; held[c] > 0; held[c]-- {
			b.Release()
		}
	}
	bhCheck(t, b, 0, 0)
	for i := range limit {
		if w, err := b.enqueueFair(0, "end"); w != nil || err != nil {
			t.Fatalf("after the run, permit %d of %d not free: %v", i+1, limit, err)
		}
	}
	bhCheck(t, b, limit, 0)
}

// shrunk reports whether b's limit is below what it was built with, when
// the calls in flight may exceed it.
func shrunk(b *Bulkhead) bool { return b.InFlight() > b.Limit() }

func removeInt(s []int, v int) []int {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// TestBulkheadClassReserve pins the reserves: batch calls saturating the
// bulkhead leave the critical reserve free, so critical calls within it
// are admitted at once; queued calls go highest class first.
func TestBulkheadClassReserve(t *testing.T) {
	b := bhNew(t, 4, WithBulkheadClasses(Class{"critical", 2}, Class{"batch", 0}))
	var batch []*permitWaiter
	for i := range 10 {
		w, err := b.enqueueFair(1, "")
		if err != nil {
			t.Fatal(err)
		}
		if (w == nil) != (i < 2) {
			t.Fatalf("batch call %d admitted = %v; want only the first 2 (4 permits, 2 reserved)", i, w == nil)
		}
		if w != nil {
			batch = append(batch, w)
		}
	}
	if b.TryAcquire() {
		t.Fatal("TryAcquire (the lowest class) took a reserved permit")
	}
	bhCheck(t, b, 2, 8)
	for i := range 2 {
		if w, err := b.enqueueFair(0, ""); w != nil || err != nil {
			t.Fatalf("critical call %d within the reserve queued behind batch: %v", i, err)
		}
	}
	bhCheck(t, b, 4, 8)
	crit := fbEnqueue(t, b, 0, "") // past the reserve and the limit: it waits
	b.Release()                    // a batch call ends: the critical call goes first
	if !crit.granted || batch[0].granted {
		t.Fatalf("after a release: critical granted %v, batch %v; want the critical", crit.granted, batch[0].granted)
	}
	b.Release() // 3 in flight, 1 free but reserved
	b.Release() // 2 in flight, 2 free: no more than the reserve
	if batch[0].granted {
		t.Fatal("a batch call took a reserved permit")
	}
	b.Release() // 1 in flight, 3 free, more than the reserve: batch goes
	if !batch[0].granted || batch[1].granted {
		t.Fatal("batch not served in order once the reserve was free")
	}
	if g, _ := b.ClassGranted(0); g != 3 {
		t.Errorf("ClassGranted(critical) = %d, want 3", g)
	}
}

// TestBulkheadClassStarvation pins the starvation bound: with higher-class
// calls always waiting, the lowest class gets one grant after every
// maxClassPasses (8) grants to higher classes.
func TestBulkheadClassStarvation(t *testing.T) {
	b := bhNew(t, 1, WithBulkheadClasses(Class{"high", 1}, Class{"low", 0}))
	b.TryAcquire()
	low := []*permitWaiter{fbEnqueue(t, b, 1, ""), fbEnqueue(t, b, 1, "")}
	var grants []string
	for range 20 {
		high := fbEnqueue(t, b, 0, "")
		b.Release()
		switch {
		case high.granted:
			grants = append(grants, "h")
		case low[0].granted && len(grants) == 8, low[1].granted && len(grants) == 17:
			grants = append(grants, "L")
			b.abandon(high)
		default:
			t.Fatalf("after %v, nobody granted", grants)
		}
	}
	want := "hhhhhhhhLhhhhhhhhLhh"
	if g := strings.Join(grants, ""); g != want {
		t.Fatalf("grants %s, want %s", g, want)
	}
}

// TestBulkheadFairBlocking runs the blocking calls on a fair bulkhead:
// AcquireFor waits in its tenant's turn, a cancelled one gives nothing
// back it did not have, the maximum wait on the manual clock ends a wait,
// DoFor releases.
func TestBulkheadFairBlocking(t *testing.T) {
	bhNoLeak(t)
	synctest.Test(t, func(t *testing.T) {
		clk := NewManualClock(bhT0)
		b := bhNew(t, 1, WithBulkheadFairQueue(4, 8), WithBulkheadClock(clk), WithMaxWait(time.Second))
		if err := b.AcquireFor(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a2 := bhGo(func() error { return b.AcquireFor(ctx, "a") })
		bhPending(t, a2, "a2")
		b1 := bhGo(func() error {
			return b.DoFor(context.Background(), "b", func(context.Context) error { return nil })
		})
		bhPending(t, b1, "b1")
		cancel()
		if err := bhDone(t, a2, "a2"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a2: %v, want context.Canceled", err)
		}
		bhCheck(t, b, 1, 1)
		b.Release()
		if err := bhDone(t, b1, "b1"); err != nil {
			t.Fatalf("b1: %v", err)
		}
		bhCheck(t, b, 0, 0)
		if err := b.Acquire(context.Background()); err != nil { // the "" tenant
			t.Fatal(err)
		}
		c1 := bhGo(func() error { return b.AcquireFor(context.Background(), "c") })
		bhPending(t, c1, "c1")
		clk.Advance(time.Second)
		if err := bhDone(t, c1, "c1"); !errors.Is(err, ErrBulkheadFull) {
			t.Fatalf("c1 past the maximum wait: %v, want ErrBulkheadFull", err)
		}
		b.Release()
		bhCheck(t, b, 0, 0)
	})
}

// TestBulkheadClassEvents checks the class events of a bulkhead with
// classes: one per decision, the class's name as Key.
func TestBulkheadClassEvents(t *testing.T) {
	var evs []Event
	b := bhNew(t, 2, WithBulkheadName("db"), WithBulkheadClasses(Class{"critical", 1}, Class{"batch", 0}),
		WithBulkheadObserver(ObserverFunc(func(e Event) { evs = append(evs, e) })))
	crit := ContextWithPriority(context.Background(), 0)
	if err := b.Acquire(crit); err != nil {
		t.Fatal(err)
	}
	if b.TryAcquire() {
		t.Fatal("TryAcquire took the reserved permit")
	}
	var got []string
	for _, e := range evs {
		if e.Kind == EventBulkheadClass {
			got = append(got, fmt.Sprintf("%s %s %v %d", e.Limiter, e.Key, e.Allowed, e.Remaining))
		}
	}
	want := "db critical true 1, db batch false 1"
	if g := strings.Join(got, ", "); g != want {
		t.Fatalf("class events %s, want %s", g, want)
	}
	if len(evs) != 4 {
		t.Errorf("%d events, want 2 decisions and 2 class events", len(evs))
	}
}

// TestBulkheadFairNoJump checks that a call does not take a permit that a
// Release has freed, on its way to hand it to a waiting call: the waiter
// gets it.
func TestBulkheadFairNoJump(t *testing.T) {
	b := bhNew(t, 1, WithBulkheadFairQueue(4, 4))
	b.TryAcquire()
	w := fbEnqueue(t, b, 0, "a")
	b.state.Add(^uint64(0)) // the first half of Release: the count drops ...
	if b.TryAcquire() {
		t.Fatal("TryAcquire took the permit freed for a waiting call")
	}
	if w2, _ := b.enqueueFair(0, "b"); w2 == nil || w2.granted {
		t.Fatal("a call of another tenant took the permit freed for a waiting call")
	}
	if !w.granted {
		t.Fatal("the waiting call was not handed the permit")
	}
	bhCheck(t, b, 1, 1)
}
