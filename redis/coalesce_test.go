package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// batcherOf returns the batcher of a Redis limiter.
func batcherOf(t testing.TB, l ratelimit.Limiter) *batcher {
	t.Helper()
	b := l.(interface{ base() *limiter }).base().batch
	if b == nil {
		t.Fatal("coalescing is off")
	}
	return b
}

// hold makes b queue every call, as if depth calls were in flight.
func hold(b *batcher) {
	b.q.mu.Lock()
	b.q.inflight += b.q.depth
	b.q.mu.Unlock()
}

// release ends hold: what queued goes out in batches.
func release(b *batcher) {
	b.q.mu.Lock()
	b.q.inflight -= b.q.depth - 1
	b.q.mu.Unlock()
	b.q.done()
}

// releaseBatched lets b's held calls go (see release), waits for the n
// callers queued behind them (wg) and for b to be idle, and fails t unless
// all n went out in batches.
func releaseBatched(t *testing.T, b *batcher, wg *sync.WaitGroup, n int) {
	t.Helper()
	multi := b.q.multi.Load()
	release(b)
	wg.Wait()
	waitIdle(b)
	if got := b.q.multi.Load() - multi; got != int64(n) {
		t.Fatalf("%d decisions went in batches, want %d", got, n)
	}
}

// waitIdle spins (no sleep) until b has nothing in flight: a batch's
// flusher ends its call after answering.
func waitIdle(b *batcher) {
	for {
		b.q.mu.Lock()
		n := b.q.inflight
		b.q.mu.Unlock()
		if n == 0 {
			return
		}
		runtime.Gosched()
	}
}

// waitQueued spins (no sleep) until b's queue holds n calls.
func waitQueued(b *batcher, n int) {
	for {
		b.q.mu.Lock()
		q := len(b.q.queue)
		b.q.mu.Unlock()
		if q >= n {
			return
		}
		runtime.Gosched()
	}
}

// TestConformanceBatchAlways runs the conformance traces (every operation:
// AllowN, Reserve, Cancel, Take, Settle, SetRate, overrides, Reset) with
// every call through the batch form of the script.
func TestConformanceBatchAlways(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(conformanceSeeds()) {
				mc := ratelimit.NewManualClock(start)
				core, rds := pairFor(t, c, mc, client, withBatchAlways())
				runTrace(t, c, mc, core, rds, seed+100, 400)
			}
		})
	}
}

// TestBatchedDecisions: batches of several decisions (on the same keys and
// on others, each at its own instant, AllowN, Reserve, Take and Cancel
// mixed) decide exactly as the in-memory limiter deciding them one after
// the other in the batch's order.
func TestBatchedDecisions(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, c := range conformanceCases() {
		t.Run(c.name, func(t *testing.T) { batchedTrace(t, c, client, 1, 60) })
	}
}

// batchedTrace runs groups of random decisions, each group as one batch
// on the Redis side (queued in order behind a held batcher, then
// released) and one by one in memory, and compares every answer.
func batchedTrace(t *testing.T, c algoCase, client Client, seed uint64, groups int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	mcCore := ratelimit.NewManualClock(start)
	mcRedis := ratelimit.NewManualClock(start)
	core, err := c.core(mcCore)
	if err != nil {
		t.Fatal(err)
	}
	_, rds := pairFor(t, c, mcRedis, client)
	b := batcherOf(t, rds)
	limit := limitOf(core)
	keys := []string{"a", "b", "", "{x}", "c", "d"}
	type held struct {
		core, rds *ratelimit.Reservation
		cancelled bool // a second Cancel sends nothing
	}
	var books []held
	batches := 0
	reserves := limit / 2
	for g := range groups {
		size := 1 + rng.IntN(24)
		type op struct {
			kind int // 0 AllowN, 1 Reserve, 2 Take, 3 Cancel
			key  string
			n    int
			at   time.Duration
			book int
		}
		ops := make([]op, size)
		var at time.Duration
		for i := range ops {
			if rng.IntN(3) > 0 {
				at += time.Duration(rng.Int64N(int64(c.step)*2 + 1))
			}
			o := op{kind: rng.IntN(4), key: keys[rng.IntN(len(keys))], n: rng.IntN(limit + 1), at: at}
			if rng.IntN(3) == 0 {
				o.n = 1
			}
			// Reservations pile up: few enough, of one event each, that
			// none lies beyond the Redis backend's horizon (30 days),
			// where the in-memory limiter would still book.
			if o.kind == 1 {
				if reserves == 0 {
					o.kind = 0
				} else {
					reserves--
					o.n = 1
				}
			}
			if o.kind == 3 {
				if len(books) == 0 {
					o.kind = 0
				} else {
					o.book = rng.IntN(len(books))
				}
			}
			ops[i] = o
		}
		base := mcCore.Now()
		// In memory, one by one.
		type answer struct {
			d   ratelimit.Decision
			res *ratelimit.Reservation
			err error
		}
		want := make([]answer, size)
		for i, o := range ops {
			mcCore.Set(base.Add(o.at))
			switch o.kind {
			case 0:
				want[i].d, want[i].err = core.AllowN(ctx, o.key, o.n)
			case 1:
				want[i].res, want[i].err = core.Reserve(ctx, o.key, o.n)
			case 2:
				want[i].res, want[i].err = core.(ratelimit.Taker).Take(ctx, o.key, o.n)
			case 3:
				books[o.book].core.Cancel()
			}
		}
		// On Redis, as one batch (or a few, past the batch limits).
		waitIdle(b)
		hold(b)
		got := make([]answer, size)
		done := make(chan int, size)
		queued := 0
		for i, o := range ops {
			mcRedis.Set(base.Add(o.at))
			go func() {
				switch o.kind {
				case 0:
					got[i].d, got[i].err = rds.AllowN(ctx, o.key, o.n)
				case 1:
					got[i].res, got[i].err = rds.Reserve(ctx, o.key, o.n)
				case 2:
					got[i].res, got[i].err = rds.(ratelimit.Taker).Take(ctx, o.key, o.n)
				case 3:
					books[o.book].rds.Cancel()
				}
				done <- i
			}()
			// A second Cancel sends nothing: wait for it instead of for
			// the queue.
			if o.kind == 3 {
				if books[o.book].cancelled {
					<-done
					size--
					continue
				}
				books[o.book].cancelled = true
			}
			queued++
			waitQueued(b, queued)
		}
		release(b)
		for range size {
			<-done
		}
		batches++
		mcRedis.Set(mcCore.Now())
		for i, o := range ops {
			w, r := want[i], got[i]
			if (w.err == nil) != (r.err == nil) {
				t.Fatalf("group %d op %d %+v: error core %v, redis %v", g, i, o, w.err, r.err)
			}
			switch o.kind {
			case 0:
				if w.d != r.d {
					t.Fatalf("group %d op %d AllowN(%q, %d) at +%v: core %+v, redis %+v", g, i, o.key, o.n, o.at, w.d, r.d)
				}
			case 1, 2:
				if w.res == nil {
					continue
				}
				if w.res.OK() != r.res.OK() || w.res.Decision() != r.res.Decision() || w.res.Delay() != r.res.Delay() {
					t.Fatalf("group %d op %d kind %d (%q, %d) at +%v: core %v %v %+v, redis %v %v %+v", g, i, o.kind, o.key, o.n, o.at,
						w.res.OK(), w.res.Delay(), w.res.Decision(), r.res.OK(), r.res.Delay(), r.res.Decision())
				}
				if w.res.OK() && o.n > 0 {
					books = append(books, held{core: w.res, rds: r.res})
				}
			}
		}
		if len(books) > 16 {
			books = books[len(books)-16:]
		}
	}
	if batches == 0 || b.q.multi.Load() == 0 {
		t.Fatal("no batch of several decisions ran")
	}
	if _, ok := client.(*goredis.ClusterClient); ok && b.q.pipelines.Load() == 0 {
		t.Fatal("no batch spanned slots")
	}
}

// TestBatchedCluster runs batched traces on the 3-node cluster: the
// batches' decisions span slots (one script call per slot, pipelined),
// and the conformance traces pass with every call through the batch
// script.
func TestBatchedCluster(t *testing.T) {
	cc := startCluster(t)
	seen := map[string]bool{}
	for _, c := range conformanceCases() {
		kind, _, _ := strings.Cut(c.name, "(")
		if seen[kind] {
			continue
		}
		seen[kind] = true
		t.Run(kind, func(t *testing.T) {
			batchedTrace(t, c, cc, 3, 30)
			mc := ratelimit.NewManualClock(start)
			core, rds := pairFor(t, c, mc, cc, withBatchAlways())
			runTrace(t, c, mc, core, rds, 6, 150)
		})
	}
	// Limiters of every algorithm share the client's queue: batches hold
	// decisions of several limiters and slots, pipelined.
	t.Run("shared", func(t *testing.T) {
		mcCore, mcRedis := ratelimit.NewManualClock(start), ratelimit.NewManualClock(start)
		ls := sharedLimiters(t, cc, mcCore, mcRedis)
		b := batcherOf(t, ls[0].rds)
		pipelines := b.q.pipelines.Load()
		if mixed := sharedTrace(t, ls, mcCore, mcRedis, 9, 20, nil); mixed == 0 {
			t.Fatal("no batch held decisions of several limiters")
		}
		if b.q.pipelines.Load() == pipelines {
			t.Fatal("no batch went as a pipeline")
		}
	})
	// slot agrees with the cluster's.
	for i := range 200 {
		k := redisKey("p:", fmt.Sprintf("key-%d", i), ":tb")
		if got, want := slot(hashTag(k)), cc.ClusterKeySlot(context.Background(), k).Val(); int64(got) != want {
			t.Fatalf("slot(%q) = %d, cluster says %d", k, got, want)
		}
	}
}

// TestCoalescingOptions: the limits must be positive.
func TestCoalescingOptions(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, l := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-1, 1, 1}} {
		_, err := NewTokenBucket(client, ratelimit.PerSecond(1), 1, WithCoalescingLimits(l[0], l[1], l[2]))
		if err == nil || !strings.Contains(err.Error(), "coalescing") {
			t.Errorf("WithCoalescingLimits%v: %v, want an error", l, err)
		}
	}
	l, err := NewTokenBucket(client, ratelimit.PerSecond(1), 1, WithCoalescing(false))
	if err != nil {
		t.Fatal(err)
	}
	if l.batch != nil {
		t.Error("WithCoalescing(false): a batcher all the same")
	}
}

// TestBatchEvents: each batch the queue sends is reported once, as an
// EventBatch of its size under the limiter's name; decisions that go out
// at once are not.
func TestBatchEvents(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	events := make(chan ratelimit.Event, 100)
	l, err := NewTokenBucket(client, ratelimit.PerSecond(1000), 1000, WithPrefix(testPrefix(t)),
		WithName("api"), WithObserver(ratelimit.ObserverFunc(func(e ratelimit.Event) { events <- e })))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "k", 1); err != nil { // alone: no event
		t.Fatal(err)
	}
	b := l.batch
	waitIdle(b)
	hold(b)
	done := make(chan error, 10)
	for i := range 10 {
		go func() {
			_, err := l.AllowN(ctx, fmt.Sprint("k", i), 1)
			done <- err
		}()
		waitQueued(b, i+1)
	}
	release(b)
	for range 10 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(b)
	if len(events) != 1 {
		t.Fatalf("%d events, want 1", len(events))
	}
	if e := <-events; e.Kind != ratelimit.EventBatch || e.N != 10 || e.Limiter != "api" || e.Allowed || e.Key != "" {
		t.Errorf("event %+v, want an EventBatch of 10 for api", e)
	}
}

// TestRepeats: a batch is marked as repeating its keys (read once each by
// prefetch) when at least a quarter of its calls name the key of the call
// before them, and not otherwise.
func TestRepeats(t *testing.T) {
	for _, c := range []struct {
		keys []string
		want bool
	}{
		{nil, false},
		{[]string{"a"}, false},
		{[]string{"a", "a"}, true},
		{[]string{"a", "b", "a", "b"}, false},
		{[]string{"a", "a", "b", "c"}, true},
		{[]string{"a", "a", "b", "c", "d", "e", "f", "g"}, false},
		{[]string{"a", "a", "b", "b", "c", "d", "e", "f"}, true},
	} {
		if got := repeats(c.keys); got != c.want {
			t.Errorf("repeats(%q) = %v, want %v", c.keys, got, c.want)
		}
	}
}
