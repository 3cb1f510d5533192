package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// sharedLim is one of the limiters of a sharedTrace: the Redis one (on the
// shared queue) and its in-memory twin, and the decisions its observer
// heard of in batches.
type sharedLim struct {
	c         algoCase
	core, rds ratelimit.Limiter
	batched   atomic.Int64
}

// sharedLimiters builds one limiter of each algorithm (its first
// conformance parameters) on client, each with a call timeout of its own
// (5 s, 6 s, ...), the Redis ones on clock mcRedis, the in-memory ones on
// mcCore.
func sharedLimiters(t *testing.T, client Client, mcCore, mcRedis *ratelimit.ManualClock) []*sharedLim {
	t.Helper()
	var ls []*sharedLim
	for i, a := range testAlgorithms {
		s := &sharedLim{c: a.conformanceCase(a.conformance[0])}
		var err error
		if s.core, err = s.c.core(mcCore); err != nil {
			t.Fatal(err)
		}
		s.rds, err = s.c.redis(client, WithClock(mcRedis), WithPrefix(fmt.Sprintf("%s%d:", testPrefix(t), i)),
			withClockTime(60_000), WithTimeout(time.Duration(5+i)*time.Second), WithName(a.name),
			WithOnError(func(key string, err error) { t.Errorf("%s: redis error for %q: %v", a.name, key, err) }),
			WithObserver(ratelimit.ObserverFunc(func(e ratelimit.Event) {
				if e.Kind == ratelimit.EventBatch {
					if e.Limiter != a.name {
						t.Errorf("%s: an EventBatch of %q", a.name, e.Limiter)
					}
					s.batched.Add(int64(e.N))
				}
			})))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, s)
	}
	q := batcherOf(t, ls[0].rds).q
	for _, s := range ls[1:] {
		if batcherOf(t, s.rds).q != q {
			t.Fatalf("%s: a queue of its own on the same client", s.c.name)
		}
	}
	return ls
}

// sharedTrace plays groups of random decisions (AllowN and Take, peeks
// among them) spread over the limiters ls, which share one queue: each
// group queued behind the held queue, then released, so that it goes out
// as batches holding decisions of several limiters; and in memory one
// after the other. Every answer must be the same. mid, if not nil, runs
// while a group is queued, before it goes out. It returns how many
// batches held decisions of several limiters.
func sharedTrace(t *testing.T, ls []*sharedLim, mcCore, mcRedis *ratelimit.ManualClock, seed uint64, groups int, mid func(g int)) int64 {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5a4ed))
	b := batcherOf(t, ls[0].rds)
	mixed := b.q.mixed.Load()
	keys := []string{"a", "b", "{x}", "c"}
	type op struct {
		lim  int
		take bool
		key  string
		n    int
		at   time.Duration
	}
	type answer struct {
		d   ratelimit.Decision
		res *ratelimit.Reservation
		err error
	}
	sent := make([]int64, len(ls))
	for g := range groups {
		ops := make([]op, 1+rng.IntN(30))
		var at time.Duration
		for i := range ops {
			o := op{lim: rng.IntN(len(ls)), take: rng.IntN(3) == 0, key: keys[rng.IntN(len(keys))]}
			c := ls[o.lim].c
			if rng.IntN(3) > 0 {
				at += time.Duration(rng.Int64N(int64(c.step)*2 + 1))
			}
			o.at, o.n = at, rng.IntN(c.limit+1)
			if rng.IntN(3) == 0 {
				o.n = 1
			}
			ops[i] = o
			sent[o.lim]++
		}
		base := mcCore.Now()
		want := make([]answer, len(ops))
		for i, o := range ops {
			mcCore.Set(base.Add(o.at))
			if o.take {
				want[i].res, want[i].err = ls[o.lim].core.(ratelimit.Taker).Take(ctx, o.key, o.n)
			} else {
				want[i].d, want[i].err = ls[o.lim].core.AllowN(ctx, o.key, o.n)
			}
		}
		waitIdle(b)
		hold(b)
		got := make([]answer, len(ops))
		var wg sync.WaitGroup
		for i, o := range ops {
			mcRedis.Set(base.Add(o.at))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if o.take {
					got[i].res, got[i].err = ls[o.lim].rds.(ratelimit.Taker).Take(ctx, o.key, o.n)
				} else {
					got[i].d, got[i].err = ls[o.lim].rds.AllowN(ctx, o.key, o.n)
				}
			}()
			waitQueued(b, i+1)
		}
		if mid != nil {
			mid(g)
		}
		release(b)
		wg.Wait()
		mcRedis.Set(mcCore.Now())
		for i, o := range ops {
			w, r := want[i], got[i]
			if (w.err == nil) != (r.err == nil) {
				t.Fatalf("group %d op %d %+v (%s): error core %v, redis %v", g, i, o, ls[o.lim].c.name, w.err, r.err)
			}
			if w.d != r.d {
				t.Fatalf("group %d op %d %+v (%s): core %+v, redis %+v", g, i, o, ls[o.lim].c.name, w.d, r.d)
			}
			if w.res != nil && (w.res.OK() != r.res.OK() || w.res.Decision() != r.res.Decision() || w.res.Delay() != r.res.Delay()) {
				t.Fatalf("group %d op %d %+v (%s): core %v %v %+v, redis %v %v %+v", g, i, o, ls[o.lim].c.name,
					w.res.OK(), w.res.Delay(), w.res.Decision(), r.res.OK(), r.res.Delay(), r.res.Decision())
			}
		}
	}
	waitIdle(b)
	// Every decision went out in a batch, reported to its own limiter.
	for i, s := range ls {
		if got := s.batched.Load(); got != sent[i] {
			t.Errorf("%s: its observer heard of %d decisions in batches, want %d", s.c.name, got, sent[i])
		}
	}
	return b.q.mixed.Load() - mixed
}

// TestSharedQueue: limiters of every algorithm on one client (a Ring,
// then a standalone client) share one queue, and batches that hold
// decisions of several of them (one script call per limiter and group of
// keys, pipelined) decide each exactly as the in-memory limiters deciding
// them one after the other; each limiter's observer hears of its own
// decisions only. The Ring's batches go first: the pooled records of its
// decisions, which carry a hash tag, are then reused by the standalone
// client's, which group all keys together.
func TestSharedQueue(t *testing.T) {
	// On a Ring, batches split by limiter and hash tag.
	t.Run("ring", func(t *testing.T) {
		ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": redisAddr(t)}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { ring.Close() })
		mcCore, mcRedis := ratelimit.NewManualClock(start), ratelimit.NewManualClock(start)
		ls := sharedLimiters(t, ring, mcCore, mcRedis)
		if mixed := sharedTrace(t, ls, mcCore, mcRedis, 13, 20, nil); mixed == 0 {
			t.Fatal("no batch held decisions of several limiters")
		}
	})
	t.Run("standalone", func(t *testing.T) {
		client := newClient(t, redisAddr(t), true)
		mcCore, mcRedis := ratelimit.NewManualClock(start), ratelimit.NewManualClock(start)
		ls := sharedLimiters(t, client, mcCore, mcRedis)
		b := batcherOf(t, ls[0].rds)
		pipelines := b.q.pipelines.Load()
		if mixed := sharedTrace(t, ls, mcCore, mcRedis, 11, 40, nil); mixed == 0 {
			t.Fatal("no batch held decisions of several limiters")
		}
		if b.q.pipelines.Load() == pipelines {
			t.Fatal("no batch went as a pipeline")
		}
	})
}

// TestSharedQueueScriptMissing: in a shared batch, one limiter's call
// fails for want of its script (SCRIPT FLUSH while it runs by EVALSHA) or
// of the library (FUNCTION FLUSH while it runs by FCALL) and is sent again
// on its own, while the other limiters' calls of the same pipeline, which
// succeeded, are neither sent again nor failed: every decision is still
// the in-memory one.
func TestSharedQueueScriptMissing(t *testing.T) {
	srv := ownServer(t)
	client := newClient(t, srv.addr, true)
	ctx := context.Background()
	mcCore, mcRedis := ratelimit.NewManualClock(start), ratelimit.NewManualClock(start)
	ls := sharedLimiters(t, client, mcCore, mcRedis)
	// Every other limiter runs by EVALSHA, as without Functions.
	for i, s := range ls {
		if i%2 == 1 {
			s.rds.(interface{ base() *limiter }).base().fns.none.Store(true)
		}
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mixed := sharedTrace(t, ls, mcCore, mcRedis, 5, 24, func(g int) {
		cmd := "SCRIPT"
		if g%2 == 1 {
			cmd = "FUNCTION"
		}
		if err := client.Do(ctx, cmd, "FLUSH").Err(); err != nil {
			t.Fatal(err)
		}
	})
	if mixed == 0 {
		t.Fatal("no batch held decisions of several limiters")
	}
	var loads int64
	for i, s := range ls {
		if i%2 == 0 {
			loads += s.rds.(interface{ base() *limiter }).base().fns.loads.Load()
		}
	}
	if loads == 0 {
		t.Error("the library was never loaded again after FUNCTION FLUSH")
	}
	stats := client.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_eval:") {
		t.Error("no EVAL after SCRIPT FLUSH")
	}
}

// TestSharedQueueConcurrent: 64 goroutines each call two limiters of
// different algorithms on one client (a token bucket and a fixed window),
// as a service does per request: their decisions share batches, and each
// limiter admits exactly its limit on its hot key.
func TestSharedQueueConcurrent(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	prefix := testPrefix(t)
	tb, err := NewTokenBucket(client, ratelimit.PerDay(100), 300, WithPrefix(prefix+"tb:"), WithFailurePolicy(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := NewFixedWindow(client, ratelimit.PerDay(200), WithPrefix(prefix+"fw:"), WithFailurePolicy(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	q := tb.batch.q
	if fw.batch.q != q {
		t.Fatal("two limiters on one client with the same limits do not share a queue")
	}
	mixed := q.mixed.Load()
	ctx := context.Background()
	var okTB, okFW atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				d, err := tb.AllowN(ctx, "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					okTB.Add(1)
				}
				d, err = fw.AllowN(ctx, fmt.Sprint("hot", (g+i)%2), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					okFW.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(tb.batch)
	if okTB.Load() != 300 || okFW.Load() != 400 {
		t.Errorf("allowed %d by the token bucket (want 300), %d by the fixed window (want 400)", okTB.Load(), okFW.Load())
	}
	if q.mixed.Load() == mixed {
		t.Error("no batch held decisions of both limiters")
	}
}

// TestSharedQueueLimits: limiters on one client share a queue if their
// coalescing limits are equal; others get a queue of their own, as do
// limiters on another client; a limiter without coalescing has none.
func TestSharedQueueLimits(t *testing.T) {
	c1 := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c1.Close()
	c2 := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c2.Close()
	mk := func(c Client, opts ...Option) *limiter {
		l, err := NewFixedWindow(c, ratelimit.PerSecond(10), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l.base()
	}
	tb, err := NewTokenBucket(c1, ratelimit.PerSecond(10), 10, WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, b := mk(c1), mk(c1, WithCoalescingLimits(defaultMaxBatch, defaultMaxBytes, 3))
	c, d := mk(c2), mk(c1, WithCoalescing(false))
	switch {
	case a.batch.q != tb.batch.q:
		t.Error("a token bucket and a fixed window on one client: two queues")
	case b.batch.q == a.batch.q:
		t.Error("other limits: the same queue")
	case c.batch.q == a.batch.q:
		t.Error("another client: the same queue")
	case d.batch != nil:
		t.Error("WithCoalescing(false): a queue all the same")
	}
	runtime.KeepAlive(tb)
}

// TestQueueRegistryShrinks: a program that makes clients and limiters and
// drops them keeps no queue for them: the registry finds queues without
// holding them.
func TestQueueRegistryShrinks(t *testing.T) {
	settle := func(want func(int) bool) int {
		n := queueCount()
		for deadline := time.Now().Add(10 * time.Second); !want(n) && time.Now().Before(deadline); n = queueCount() {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		return n
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	before := queueCount()
	peak := 0
	for i := range 200 {
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
		for _, opts := range [][]Option{nil, nil, {WithCoalescingLimits(8, 1<<10, 1)}} {
			if _, err := NewSlidingWindowCounter(c, ratelimit.PerSecond(10), opts...); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		peak = max(peak, queueCount())
		if i%50 == 0 {
			runtime.GC()
		}
	}
	if peak <= before {
		t.Fatalf("the registry never grew (%d before, peak %d)", before, peak)
	}
	if n := settle(func(n int) bool { return n <= before }); n > before {
		t.Fatalf("the registry holds %d queues after its limiters and clients were dropped, %d before", n, before)
	}
	// A queue still held stays registered and shared.
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	l1, err := NewTokenBucket(c, ratelimit.PerSecond(10), 10)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	l2, err := NewLeakyBucket(c, ratelimit.PerSecond(10), 10)
	if err != nil {
		t.Fatal(err)
	}
	if l1.batch.q != l2.base().batch.q {
		t.Error("a queue in use was dropped from the registry")
	}
}

// TestSharedBatchFailure: a shared batch (a token bucket's decisions and a
// fixed window's, each limiter with its own failure policy and call
// timeout) whose server stops answering (SIGSTOP), dies under it (kill
// -9) or is paused (CLIENT PAUSE) answers each caller exactly once, from
// its own limiter's policy, by its own limiter's timeout, and reports each
// failure once to that limiter's OnError.
func TestSharedBatchFailure(t *testing.T) {
	const short, long = 200 * time.Millisecond, 1500 * time.Millisecond
	const callers = 12
	pairs := [][2]FailurePolicy{{FailClosed, FailOpen}, {FailOpen, FailLocal}, {FailLocal, FailClosed}}
	for _, fault := range []string{"SIGSTOP", "kill -9", "CLIENT PAUSE"} {
		for _, pol := range pairs {
			t.Run(fmt.Sprintf("%s/%v+%v", fault, pol[0], pol[1]), func(t *testing.T) {
				srv := ownServer(t)
				client := newClient(t, srv.addr, true)
				var reported [2]atomic.Int64
				lims := make([]ratelimit.Limiter, 2)
				var err error
				lims[0], err = NewTokenBucket(client, ratelimit.PerSecond(100), 100, WithPrefix(testPrefix(t)+"tb:"),
					WithTimeout(short), WithFailurePolicy(pol[0]), WithOnError(func(string, error) { reported[0].Add(1) }))
				if err != nil {
					t.Fatal(err)
				}
				lims[1], err = NewFixedWindow(client, ratelimit.PerSecond(100), WithPrefix(testPrefix(t)+"fw:"),
					WithTimeout(long), WithFailurePolicy(pol[1]), WithOnError(func(string, error) { reported[1].Add(1) }))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, l := range lims {
					if _, err := l.AllowN(ctx, "warm", 1); err != nil {
						t.Fatal(err)
					}
				}
				b := batcherOf(t, lims[0])
				waitIdle(b)
				hold(b)
				type answer struct {
					lim     int
					d       ratelimit.Decision
					err     error
					elapsed time.Duration
				}
				answers := make(chan answer, callers)
				for i := range callers {
					go func() {
						t0 := time.Now()
						d, err := lims[i%2].AllowN(ctx, fmt.Sprintf("k%d", i%3), 1)
						answers <- answer{i % 2, d, err, time.Since(t0)}
					}()
					waitQueued(b, i+1)
				}
				switch fault {
				case "SIGSTOP":
					srv.pause()
					release(b)
				case "kill -9":
					srv.pause()
					multi := b.q.multi.Load()
					release(b)
					for b.q.multi.Load() == multi {
						time.Sleep(time.Millisecond)
					}
					srv.cmd.Process.Signal(syscall.SIGKILL)
					srv.kill()
				case "CLIENT PAUSE":
					admin := newClient(t, srv.addr, true)
					if err := admin.Do(ctx, "CLIENT", "PAUSE", 2500, "ALL").Err(); err != nil {
						t.Fatal(err)
					}
					release(b)
				}
				var heard [2]int64
				for range callers {
					var a answer
					select {
					case a = <-answers:
					case <-time.After(long + 3*time.Second):
						t.Fatal("a caller of the failed batch got no answer")
					}
					heard[a.lim]++
					timeout := []time.Duration{short, long}[a.lim]
					// The short limiter's callers do not wait for the long
					// one's timeout (a dead connection answers sooner).
					if a.elapsed > timeout+time.Second || (a.lim == 0 && a.elapsed >= long) {
						t.Errorf("limiter %d answered after %v, its timeout %v", a.lim, a.elapsed, timeout)
					}
					switch pol[a.lim] {
					case FailClosed:
						if !errors.Is(a.err, ErrUnavailable) {
							t.Errorf("limiter %d, FailClosed: %+v %v, want an error matching ErrUnavailable", a.lim, a.d, a.err)
						}
					case FailOpen, FailLocal:
						if a.err != nil || !a.d.Allowed {
							t.Errorf("limiter %d, %v: %+v %v, want allowed", a.lim, pol[a.lim], a.d, a.err)
						}
					}
				}
				select {
				case a := <-answers:
					t.Fatalf("an extra answer %+v", a)
				default:
				}
				for i := range reported {
					if n := reported[i].Load(); n != heard[i] {
						t.Errorf("limiter %d: OnError heard %d failures, want %d (one per caller)", i, n, heard[i])
					}
				}
				if fault == "SIGSTOP" {
					srv.resume()
				}
			})
		}
	}
}
