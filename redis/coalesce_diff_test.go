package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// TestBatchedAgainstOneByOne drives the same random traces through two
// Redis limiters of one algorithm on twin manual clocks: one deciding each
// group of calls as one batch (queued behind a held batcher, then
// released), the other with coalescing off, one script call per decision.
// Each decision of a batch must be exactly the one it would have been
// alone. The traces mix, on a few repeated keys, steps and peeks (n = 0),
// n up to the limit, Reserve, Take, Cancel and Settle (below, at and above
// the estimate), overrides set and removed and SetRate between the
// decisions of a batch, keys that hold a value of another type or a
// corrupt one when a batch starts, and instants on the algorithm's grid
// (window boundaries, interval multiples) and a nanosecond either side;
// each algorithm runs bare and with a penalty box.
func TestBatchedAgainstOneByOne(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		ps := append([]params{}, a.conformance...)
		for _, c := range edgeCases() {
			if c.name == a.conformanceCase(c.params).name && a.vectors != "slidinglog" {
				ps = append(ps, c.params)
			}
		}
		for i, p := range ps {
			if a.vectors == "slidinglog" && p.rate.N > 100 {
				continue // the log pushes n entries a decision: kept short
			}
			for _, pen := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d/penalty=%v", a.name, i, pen)
				t.Run(name, func(t *testing.T) {
					var extra []Option
					if pen {
						extra = append(extra, WithPenalty(2, p.rate.Period, p.rate.Period/2+1))
					}
					diffTrace(t, a, p, client, extra, uint64(i)*2+uint64(len(name)), 16, false)
				})
			}
		}
	}
}

// diffOp is one call of a diffTrace group.
type diffOp struct {
	kind   int // see the kinds below
	key    string
	n      int
	at     time.Duration // from the group's base
	book   int           // Cancel, Settle: which booking
	p      params        // SetOverride, SetRate
	actual int           // Settle
}

const (
	opAllow = iota
	opReserve
	opTake
	opCancel
	opSettle
	opOverride
	opRemoveOverride
	opSetRate
	opKinds
)

// diffTrace plays groups of random calls on algorithm a with p: each group
// as one batch on a Redis limiter with coalescing, and one call at a time
// on a Redis limiter without (or, if vsCore, on the in-memory limiter:
// then no key is written behind the limiters' backs), comparing every
// answer. extra are options for both Redis limiters.
func diffTrace(t *testing.T, a testAlgorithm, p params, client *goredis.Client, extra []Option, seed uint64, groups int, vsCore bool) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	c := a.conformanceCase(p)
	mcA, mcB := ratelimit.NewManualClock(start), ratelimit.NewManualClock(start)
	base := func(mc *ratelimit.ManualClock, prefix string, coalesce bool) ratelimit.Limiter {
		opts := append([]Option{WithClock(mc), WithPrefix(prefix), withClockTime(60_000),
			WithTimeout(30 * time.Second), WithCoalescing(coalesce),
			WithOnError(func(key string, err error) {
				if !errors.Is(err, ErrCorruptState) { // the trace writes such values
					t.Errorf("redis error for %q: %v", key, err)
				}
			})}, extra...)
		l, err := c.redis(client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	pa, pb := testPrefix(t)+"a:", testPrefix(t)+"b:"
	la := base(mcA, pa, true)
	var lb ratelimit.Limiter
	if vsCore {
		var err error
		if lb, err = c.core(mcB); err != nil {
			t.Fatal(err)
		}
	} else {
		lb = base(mcB, pb, false)
	}
	b := batcherOf(t, la)
	limit := c.limit
	keys := []string{"k", "j", "{i}"}
	// grid is a span the algorithm's answers turn on: the window, or one
	// interval of a bucket (at least 1 ns).
	grid := max(p.rate.Period/time.Duration(p.rate.N), 1)
	if !a.bucket {
		grid = p.rate.Period
	}
	type booking struct{ a, b *ratelimit.Reservation }
	var books []booking
	ns := func() int {
		// The limit, its halves and quarters: with a window of 2^k ns the
		// sliding counter's products then meet their bounds exactly.
		switch rng.IntN(8) {
		case 0:
			return 0
		case 1:
			return 1
		case 2:
			return limit
		case 3:
			return max(limit-1, 0)
		case 4:
			return limit/2 + 1
		case 5:
			return limit / 2
		case 6:
			return limit / 4
		}
		return rng.IntN(limit + 1)
	}
	multi := 0
	// Against the core, no booking may reach the Redis backend's horizon
	// (30 days), where it refuses what the core books.
	span := p.rate.Period
	if a.bucket {
		span = p.rate.Period / time.Duration(p.rate.N) * time.Duration(p.capacity)
	}
	canBook := !vsCore || 4*span < horizon
	restates := a.vectors == "tokenbucket" || a.vectors == "leakymeter"
	for g := range groups {
		// Keys holding what the scripts never write, in both.
		if !vsCore && rng.IntN(4) == 0 {
			k := keys[rng.IntN(len(keys))]
			vals := []string{"junk", "1 2", "-5 7 x", "99999999999999999999 0", "1741000000000000000 -3 1"}
			wrong := rng.IntN(len(vals) + 1)
			for _, prefix := range []string{pa, pb} {
				for _, sfx := range la.(interface{ base() *limiter }).base().suffix {
					rk := redisKey(prefix, k, sfx)
					client.Del(ctx, rk)
					if wrong == len(vals) {
						client.RPush(ctx, rk, "x")
						if sfx == ":sl" {
							client.Del(ctx, rk) // a list is what earlier versions kept there
							client.HSet(ctx, rk, "f", "v")
						}
					} else {
						client.Set(ctx, rk, vals[wrong], time.Minute)
					}
				}
			}
		}
		// Every key peeked, one by one on both sides, before the group.
		for _, k := range keys {
			da, erra := la.AllowN(ctx, k, 0)
			db, errb := lb.AllowN(ctx, k, 0)
			if da != db || (erra == nil) != (errb == nil) {
				t.Fatalf("group %d: peek of %q: alone %+v %v, batched %+v %v", g, k, db, errb, da, erra)
			}
		}
		size := 2 + rng.IntN(20)
		ops := make([]diffOp, size)
		var at time.Duration
		for i := range ops {
			switch rng.IntN(4) {
			case 0: // onto the grid, or a nanosecond either side
				now := start.Add(at)
				w := int64(grid)
				next := now.UnixNano() - windowStart(now.UnixNano(), w) // into the grid cell
				at += time.Duration(w-next) + time.Duration(rng.IntN(3)-1)
				if at < 0 {
					at = 0
				}
			case 1:
				at += time.Duration(rng.Int64N(int64(grid)/2 + 1))
			}
			o := diffOp{kind: rng.IntN(opKinds), key: keys[rng.IntN(len(keys))], n: ns(), at: at}
			if !canBook && (o.kind == opReserve || o.kind == opTake || o.kind == opSettle) {
				o.kind = opAllow
			}
			switch o.kind {
			case opReserve:
				o.n = min(o.n, 3)
			case opCancel, opSettle:
				if len(books) == 0 {
					o.kind = opAllow
				} else {
					o.book = rng.IntN(len(books))
					o.actual = rng.IntN(4)
				}
			case opOverride, opSetRate:
				o.p = variant(rng, c)
				// Against the core, no change for the leaky bucket: at
				// 2^52/s a trace of changes leaves a queue the core and
				// Redis (batched or not) see differently, an open question
				// outside the batch.
				if rng.IntN(3) > 0 || !redisValid(a.bucket, o.p) || (vsCore && a.vectors == "leakybucket") {
					o.kind = opAllow // rarer than decisions; within Redis's bounds
				}
			case opRemoveOverride:
				if rng.IntN(2) > 0 || (vsCore && a.vectors == "leakybucket") {
					o.kind = opAllow
				}
			}
			// A token bucket's key written under earlier parameters is
			// re-expressed by a second call after the batch (see
			// limiter.call), its callers then racing like any concurrent
			// callers: there, a change comes last in a group, and the
			// peeks before the next group re-express every key in order.
			if restates && o.kind >= opOverride && i < size-1 {
				o.kind = opAllow
			}
			ops[i] = o
		}
		lastChange := -1
		for i, o := range ops {
			if o.kind >= opOverride {
				lastChange = i
			}
		}
		type answer struct {
			d   ratelimit.Decision
			res *ratelimit.Reservation
			err error
		}
		run := func(l ratelimit.Limiter, mc *ratelimit.ManualClock, o diffOp, bk func(booking) *ratelimit.Reservation) (r answer) {
			switch o.kind {
			case opAllow:
				r.d, r.err = l.AllowN(ctx, o.key, o.n)
			case opReserve:
				r.res, r.err = l.Reserve(ctx, o.key, o.n)
			case opTake:
				r.res, r.err = l.(ratelimit.Taker).Take(ctx, o.key, o.n)
			case opCancel:
				bk(books[o.book]).Cancel()
			case opSettle:
				r.d, r.err = bk(books[o.book]).Settle(o.actual)
			case opOverride:
				r.err = setOverride(l, a.bucket, o.key, o.p)
			case opRemoveOverride:
				l.(interface{ RemoveOverride(string) }).RemoveOverride(o.key)
			case opSetRate:
				r.err = setRate(l, a.bucket, o.p)
			}
			return r
		}
		gbase := mcB.Now()
		want := make([]answer, size)
		for i, o := range ops {
			mcB.Set(gbase.Add(o.at))
			want[i] = run(lb, mcB, o, func(x booking) *ratelimit.Reservation { return x.b })
		}
		// The batch: each call queued in order (a call that sends nothing
		// finishes instead), then all released at once.
		waitIdle(b)
		hold(b)
		got := make([]answer, size)
		fin := make([]atomic.Bool, size)
		done := make(chan struct{}, size)
		queued := 0
		for i, o := range ops {
			mcA.Set(gbase.Add(o.at))
			if o.kind >= opOverride {
				got[i] = run(la, mcA, o, nil)
				fin[i].Store(true)
				done <- struct{}{}
				continue
			}
			go func() {
				got[i] = run(la, mcA, o, func(x booking) *ratelimit.Reservation { return x.a })
				fin[i].Store(true)
				done <- struct{}{}
			}()
			for {
				b.q.mu.Lock()
				q := len(b.q.queue)
				b.q.mu.Unlock()
				if q > queued {
					queued++
					break
				}
				if fin[i].Load() {
					break
				}
				runtime.Gosched()
			}
		}
		if queued > 1 {
			multi++
		}
		release(b)
		for range size {
			<-done
		}
		mcA.Set(mcB.Now())
		for i, o := range ops {
			w, r := want[i], got[i]
			if (w.err == nil) != (r.err == nil) {
				t.Fatalf("group %d op %d %+v: error alone %v, batched %v", g, i, o, w.err, r.err)
			}
			if w.d != r.d {
				t.Fatalf("group %d op %d %+v: alone %+v, batched %+v", g, i, o, w.d, r.d)
			}
			if (w.res == nil) != (r.res == nil) {
				t.Fatalf("group %d op %d %+v: reservation alone %v, batched %v", g, i, o, w.res, r.res)
			}
			if w.res == nil {
				continue
			}
			if w.res.OK() != r.res.OK() || w.res.Decision() != r.res.Decision() || w.res.Delay() != r.res.Delay() ||
				(w.res.OK() && !w.res.TimeToAct().Equal(r.res.TimeToAct())) {
				t.Fatalf("group %d op %d %+v: alone %v %v %+v, batched %v %v %+v", g, i, o,
					w.res.OK(), w.res.Delay(), w.res.Decision(), r.res.OK(), r.res.Delay(), r.res.Decision())
			}
			// A change made while a step is in flight (in the batch)
			// voids its booking: Cancel and Settle then give nothing back
			// (see limiter.step). Alone, the step was over by then: such
			// bookings are left alone.
			if w.res.OK() && i > lastChange {
				books = append(books, booking{a: r.res, b: w.res})
			}
		}
		if len(books) > 12 {
			books = books[len(books)-12:]
		}
	}
	if multi == 0 {
		t.Fatal("no batch of several decisions ran")
	}
}

// TestBatchedAgainstCore plays the traces of TestBatchedAgainstOneByOne
// (without keys written behind the limiters' backs, nor a penalty box)
// against the in-memory limiter: so that the batch's arithmetic, which the
// one-by-one calls share, is checked too; with the parameters at the
// arithmetic's edges (edgeCases) on instants on their grid.
func TestBatchedAgainstCore(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		for i, c := range edgeCases() {
			if c.name != a.conformanceCase(c.params).name {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", a.name, i), func(t *testing.T) {
				diffTrace(t, a, c.params, client, nil, uint64(i)+77, 30, true)
			})
		}
	}
}

// redisValid reports whether the Redis backend takes parameters p.
func redisValid(bucket bool, p params) bool {
	if bucket {
		_, err := newTBAlgo(p.rate, p.capacity)
		return err == nil
	}
	return windowParams(p.rate) == nil
}
