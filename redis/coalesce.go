package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Coalescing: the limiters built on one client with equal coalescing
// limits share a queue (see queueFor). While depth calls of the queue are
// in flight, later decisions of any of its limiters queue, and when a call
// returns the queue goes out as one batch: one script call per limiter
// and group of keys (hash slot on a Cluster), each decided in arrival
// order, each decision exactly the step it would have been alone (see
// batch in luaPrelude), the calls sent as one pipeline. A decision that
// finds fewer than depth calls in flight and nobody queued goes at once,
// alone, as without coalescing: nothing ever waits for a timer.

const (
	defaultMaxBatch = 128
	defaultMaxBytes = 64 << 10
	defaultDepth    = 2
)

// WithCoalescing turns coalescing on (the default) or off. On, the
// limiters built on one client with equal WithCoalescingLimits share one
// queue, so that their decisions share round trips. Off, every decision
// of the limiter is one script call of its own, however many are in
// flight, and never queues.
func WithCoalescing(on bool) Option { return func(c *config) { c.coalesce = on } }

// WithCoalescingLimits bounds coalescing: a batch holds at most maxBatch
// decisions (default 128) and about maxBytes bytes of keys and arguments
// (default 64 KiB; a decision larger than that goes in a batch of its
// own), and at most depth calls of the queue are in flight at once
// (default 2), single decisions and batches alike. Each must be at least
// 1, or the constructor fails with an error matching
// ratelimit.ErrInvalidOption.
//
// The queue is shared by the limiters built on the same client (the same
// *redis.Client, *redis.ClusterClient or *redis.Ring, or other client of
// pointer type) with equal limits: their decisions queue together and a
// batch holds decisions of several of them, one script call per limiter
// (per hash slot on a Cluster, per hash tag on a Ring), all sent in one
// round trip as a pipeline. Limiters with other limits get a queue of
// their own on that client. A batch's call has the largest call timeout
// (WithTimeout) of the limiters in it, while each queued decision is
// answered within its own limiter's timeout; each limiter's observer
// hears an EventBatch for its own decisions in a batch; a failed script
// call is answered by its own limiter's failure policy and OnError, and
// does not touch the other calls of its pipeline.
func WithCoalescingLimits(maxBatch, maxBytes, depth int) Option {
	return func(c *config) { c.maxBatch, c.maxBytes, c.depth = maxBatch, maxBytes, depth }
}

// grouping is how a client's keys may share one script call.
type grouping uint8

const (
	groupAll  grouping = iota // one server: any keys
	groupSlot                 // Redis Cluster: keys of one hash slot
	groupTag                  // Ring, or a client of unknown kind: keys of one hash tag
)

func groupingOf(c Client) grouping {
	switch c.(type) {
	case *goredis.Client:
		return groupAll
	case *goredis.ClusterClient:
		return groupSlot
	}
	return groupTag
}

// result is what a queued decision gets back: its answer, or (lead not
// nil) a batch to send, its own decision among them, before its answer
// comes.
type result struct {
	v    any
	err  error
	lead *batchBuf
}

// pending is one queued decision: its context (for its deadline), its
// Redis keys and its arguments (copied), and where its answer goes. A
// pending is pooled: the caller puts it back after reading its answer,
// the batch's last access being the send. One whose caller gave up is
// left to the garbage collector.
type pending struct {
	ctx      context.Context // the caller's, without the call timeout
	deadline int64           // Unix ns: the call timeout's end
	keys     []string
	args     []any
	size     int
	tag      string // the hash tag of its keys (grouping groupTag)
	slot     uint16 // its Cluster slot (grouping groupSlot)
	ch       chan result
	b        *batcher // its limiter's
	// state: waiting, abandoned (its caller gave up, so it will not
	// lead a batch) or leading (handed its batch to send): set once
	// from waiting, by compare-and-swap, by the caller or the hand-off.
	state atomic.Uint32
}

const (
	waiting uint32 = iota
	abandoned
	leading
)

var pendingPool = sync.Pool{New: func() any { return &pending{ch: make(chan result, 1)} }}

// batchBuf holds the slices a batch is built in, pooled.
type batchBuf struct {
	ps     []*pending
	groups []group
	lims   []share
	keys   []string
	argv   []any
	calls  []any
}

// group is the decisions of a batch that go in one script call: of one
// limiter, and of one slot (or tag).
type group struct {
	b    *batcher
	tag  string
	slot uint16
	ps   []*pending
}

// share is a limiter's count of decisions in a batch.
type share struct {
	b *batcher
	n int
}

var batchPool = sync.Pool{New: func() any { return new(batchBuf) }}

// batcher is one limiter's side of coalescing: its calls, queued on the
// queue it shares (q), in the batch form of its script.
type batcher struct {
	q      *nodeQueue
	c      caller          // a copy, without batch
	kpc    int             // Redis keys per call
	script *goredis.Script // the batch form, for EVALSHA and EVAL
}

func newBatcher(c caller, s script) *batcher {
	return &batcher{q: queueFor(c.client, c.cfg), c: c, kpc: len(c.suffix),
		script: goredis.NewScript(s.batchSource())}
}

// nodeQueue is the queue that the limiters of one client with equal
// coalescing limits share, and its calls in flight.
type nodeQueue struct {
	maxBatch, maxBytes, depth int
	grouping                  grouping

	mu       sync.Mutex
	queue    []*pending
	inflight int

	// Counts, for tests: decisions sent in batches (by a batch script),
	// batches that went as a pipeline (several script calls), and
	// batches that held decisions of several limiters.
	multi, pipelines, mixed atomic.Int64
}

// timerPool holds stopped timers for queued decisions: a queued decision
// waits on one instead of a context of its own.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// do runs the call of keys and args within ctx and the call timeout: at
// once if fewer than depth calls are in flight and nobody queues, else in
// the next batch. It answers exactly once, by the time the call timeout
// (counted from now) or ctx ends at the latest.
func (b *batcher) do(ctx context.Context, keys []string, args []any) (any, error) {
	q := b.q
	q.mu.Lock()
	if q.inflight < q.depth && len(q.queue) == 0 {
		q.inflight++
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, b.c.cfg.timeout)
		defer cancel()
		if b.c.cfg.batchAlways {
			return b.alone(ctx, keys, args)
		}
		v, err := b.c.runBounded(ctx, keys, args)
		q.done()
		return v, err
	}
	p := b.pending(ctx, keys, args)
	p.deadline = time.Now().UnixNano() + int64(b.c.cfg.timeout)
	q.queue = append(q.queue, p)
	q.mu.Unlock()
	t := timerPool.Get().(*time.Timer)
	t.Reset(b.c.cfg.timeout)
	var r result
	var gone error
	select {
	case r = <-p.ch:
	case <-ctx.Done():
		r, gone = giveUp(p, ctx.Err())
	case <-t.C:
		r, gone = giveUp(p, context.DeadlineExceeded)
	}
	t.Stop() // from Go 1.23 on, no stale tick is left in t.C
	timerPool.Put(t)
	if gone != nil {
		return nil, gone
	}
	if r.lead != nil {
		// This caller sends the batch (its own decision in it) on its
		// own goroutine, whatever its context: a batch's call has its
		// own timeout, and its other callers wait for it.
		q.flush(r.lead)
		r = <-p.ch
	}
	p.release()
	return r.v, r.err
}

// giveUp is what a queued caller whose time ran out (err) gets: its
// answer if it has come, or the batch it was just made the leader of,
// else err (the batch may still send to p, which is then left to the
// garbage collector).
func giveUp(p *pending, err error) (result, error) {
	select {
	case r := <-p.ch:
		return r, nil
	default:
	}
	if p.state.CompareAndSwap(waiting, abandoned) {
		return result{}, err
	}
	return <-p.ch, nil // p was made a batch's leader: its batch comes at once
}

// alone runs one call as a batch of one through the batch script (tests:
// withBatchAlways), within ctx; a call is in flight.
func (b *batcher) alone(ctx context.Context, keys []string, args []any) (any, error) {
	p := b.pending(ctx, keys, args)
	buf := batchPool.Get().(*batchBuf)
	buf.ps = append(buf.ps, p)
	go b.q.flush(buf)
	select {
	case r := <-p.ch:
		p.release()
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pending returns a queued decision of keys and args.
func (b *batcher) pending(ctx context.Context, keys []string, args []any) *pending {
	p := pendingPool.Get().(*pending)
	p.ctx = ctx
	p.b = b
	p.keys = append(p.keys[:0], keys...)
	p.args = append(p.args[:0], args...)
	p.size = 0
	for _, k := range keys {
		p.size += len(k) + 8
	}
	for _, a := range args {
		if s, ok := a.(string); ok {
			p.size += len(s) + 8
		} else {
			p.size += 24
		}
	}
	// A pooled record may come from a queue of another grouping: its tag
	// and slot are set anew, or decisions of one key could fall in
	// different groups and be decided out of order.
	p.tag, p.slot = "", 0
	switch b.q.grouping {
	case groupSlot:
		p.slot = slot(hashTag(keys[0]))
	case groupTag:
		p.tag = hashTag(keys[0])
	}
	return p
}

func (p *pending) release() {
	p.ctx = nil
	p.b = nil
	p.state.Store(waiting)
	clear(p.args)
	clear(p.keys)
	pendingPool.Put(p)
}

// done ends a call in flight and starts batches of what queued, as many
// as the depth allows.
func (q *nodeQueue) done() {
	q.mu.Lock()
	q.inflight--
	for len(q.queue) > 0 && q.inflight < q.depth {
		buf := q.take()
		if buf == nil {
			break
		}
		q.inflight++
		q.mu.Unlock()
		q.hand(buf)
		q.mu.Lock()
	}
	q.mu.Unlock()
}

// hand starts buf's batch (a call in flight counted for it): a caller of
// it sends it, on its own goroutine, woken with it instead of an answer:
// the first of those whose limiter has the batch's call timeout (the
// largest), so that sending makes none wait past its own limiter's
// timeout for a longer one's; a goroutine of its own if all of those have
// given up.
func (q *nodeQueue) hand(buf *batchBuf) {
	var timeout time.Duration
	for _, p := range buf.ps {
		timeout = max(timeout, p.b.c.cfg.timeout)
	}
	for _, p := range buf.ps {
		if p.b.c.cfg.timeout == timeout && p.state.CompareAndSwap(waiting, leading) {
			p.ch <- result{lead: buf}
			return
		}
	}
	go q.flush(buf)
}

// take moves the front of the queue (q.mu held) into a batch, within the
// limits, leaving out decisions whose caller gave up; nil if none is left.
func (q *nodeQueue) take() *batchBuf {
	buf := batchPool.Get().(*batchBuf)
	bytes, i := 0, 0
	now := time.Now().UnixNano()
	for ; i < len(q.queue); i++ {
		p := q.queue[i]
		if now >= p.deadline || p.ctx.Err() != nil {
			continue // its caller has gone: not sent, so not booked
		}
		if len(buf.ps) == q.maxBatch || (len(buf.ps) > 0 && bytes+p.size > q.maxBytes) {
			break
		}
		bytes += p.size
		buf.ps = append(buf.ps, p)
	}
	n := copy(q.queue, q.queue[i:])
	clear(q.queue[n:])
	q.queue = q.queue[:n]
	if len(buf.ps) == 0 {
		batchPool.Put(buf)
		return nil
	}
	return buf
}

// flush sends buf's batch, then hands the next batch of the queue on in
// its call in flight, or ends that call if nothing queues.
func (q *nodeQueue) flush(buf *batchBuf) {
	q.send(buf)
	recycle(buf)
	q.mu.Lock()
	buf = nil
	if len(q.queue) > 0 {
		buf = q.take()
	}
	if buf == nil {
		q.inflight--
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	q.hand(buf)
}

func recycle(buf *batchBuf) {
	clear(buf.ps)
	buf.ps = buf.ps[:0]
	for i := range buf.groups {
		clear(buf.groups[i].ps)
		buf.groups[i] = group{ps: buf.groups[i].ps[:0]}
	}
	buf.groups = buf.groups[:0]
	clear(buf.lims)
	buf.lims = buf.lims[:0]
	clear(buf.keys)
	buf.keys = buf.keys[:0]
	clear(buf.argv)
	buf.argv = buf.argv[:0]
	clear(buf.calls)
	buf.calls = buf.calls[:0]
	batchPool.Put(buf)
}

// send decides the batch and answers each of its callers once. Its call
// has the largest call timeout of the limiters in it.
func (q *nodeQueue) send(buf *batchBuf) {
	var timeout time.Duration
	for _, p := range buf.ps {
		timeout = max(timeout, p.b.c.cfg.timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if p := buf.ps[0]; len(buf.ps) == 1 && !p.b.c.cfg.batchAlways {
		p.b.c.batched(1)
		v, err := p.b.c.run(ctx, p.keys, p.args)
		p.ch <- result{v: v, err: err}
		return
	}
	q.multi.Add(int64(len(buf.ps)))
	// Group by limiter and slot (or tag), keeping arrival order within
	// each group, and count each limiter's decisions.
	for _, p := range buf.ps {
		j := 0
		for ; j < len(buf.groups) && (buf.groups[j].b != p.b || buf.groups[j].tag != p.tag || buf.groups[j].slot != p.slot); j++ {
		}
		if j == len(buf.groups) {
			if j < cap(buf.groups) {
				buf.groups = buf.groups[:j+1]
				buf.groups[j].b, buf.groups[j].tag, buf.groups[j].slot = p.b, p.tag, p.slot
			} else {
				buf.groups = append(buf.groups, group{b: p.b, tag: p.tag, slot: p.slot})
			}
		}
		buf.groups[j].ps = append(buf.groups[j].ps, p)
		k := 0
		for ; k < len(buf.lims) && buf.lims[k].b != p.b; k++ {
		}
		if k == len(buf.lims) {
			buf.lims = append(buf.lims, share{b: p.b})
		}
		buf.lims[k].n++
	}
	for _, s := range buf.lims {
		s.b.c.batched(s.n)
	}
	if len(buf.lims) > 1 {
		q.mixed.Add(1)
	}
	if len(buf.groups) == 1 {
		g := buf.groups[0]
		keys, argv := g.b.build(buf, g.ps)
		v, err := g.b.run(ctx, keys, argv)
		answer(g.ps, v, err)
		return
	}
	q.pipelined(ctx, buf)
}

// build lays out ps's keys and arguments for batch (see luaPrelude), in
// buf's slices, which it returns (valid until the next build).
func (b *batcher) build(buf *batchBuf, ps []*pending) ([]string, []any) {
	keys := buf.keys[:0]
	argv := append(buf.argv[:0], b.c.pad, b.kpc, 0)
	calls := buf.calls[:0]
	nb := 0
	var starts [8]int // the last blocks' starts in argv (of their length)
	for _, p := range ps {
		keys = append(keys, p.keys...)
		params := p.args[5:]
		blk := 0
		for j := 0; j < len(starts) && j < nb; j++ {
			s := starts[j]
			if argv[s] == any(len(params)) && equalArgs(argv[s+1:s+1+len(params)], params) {
				blk = nb - j
				break
			}
		}
		if blk == 0 {
			nb++
			blk = nb
			copy(starts[1:], starts[:len(starts)-1])
			starts[0] = len(argv)
			argv = append(argv, len(params))
			argv = append(argv, params...)
		}
		if plainStep(p.args) {
			calls = append(calls, blk)
		} else {
			calls = append(calls, "*", blk, p.args[0], p.args[1], p.args[3], p.args[4])
		}
	}
	argv[2] = nb
	if b.kpc == 1 && repeats(keys) {
		argv[1] = "d"
	}
	argv = append(argv, calls...)
	buf.keys, buf.argv, buf.calls = keys, argv, calls
	return keys, argv
}

// repeats reports whether at least a quarter of keys repeat the key before
// them, as when one hot key fills a batch: the batch then reads each key
// once (see batch in luaPrelude), where a batch of distinct keys would pay
// for looking for repeats.
func repeats(keys []string) bool {
	r := 0
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			r++
		}
	}
	return r >= 1 && 4*r >= len(keys)
}

// plainStep reports whether a call's arguments are those of Allow: a step
// of one event on the server's clock that does not wait. A batch sends such
// a call as its block's number alone (see batch in luaPrelude): a fifth of
// the arguments for Redis to read.
func plainStep(args []any) bool {
	return args[0] == any("s") && args[1] == any("") && args[3] == any(1) && args[4] == boxedZero
}

func equalArgs(a, b []any) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// answer hands each caller of ps its part of the batch's reply v, a flat
// array (see batch in luaPrelude): a table's reply is a slice of v's.
func answer(ps []*pending, v any, err error) {
	vs, ok := v.([]any)
	if err == nil && (!ok || !wellFormed(vs, len(ps))) {
		err = fmt.Errorf("unexpected batch reply %#v", v)
	}
	for _, p := range ps {
		if err != nil {
			p.ch <- result{err: err}
			continue
		}
		var r result
		r, vs = nextReply(vs)
		p.ch <- r
	}
}

// wellFormed reports whether vs, a batch's flat reply, holds exactly n
// calls' replies.
func wellFormed(vs []any, n int) bool {
	for ; n > 0; n-- {
		if len(vs) == 0 {
			return false
		}
		m, ok := vs[0].(int64)
		switch {
		case !ok || m < -2 || m > int64(len(vs)-1):
			return false
		case m == -2:
			if len(vs) < 2 {
				return false
			}
			if _, ok := vs[1].(error); !ok {
				return false
			}
			vs = vs[2:]
		case m == -1:
			if len(vs) < 2 {
				return false
			}
			vs = vs[2:]
		default:
			vs = vs[1+m:]
		}
	}
	return len(vs) == 0
}

// nextReply returns the first call's reply of vs, a well-formed flat
// reply, and the rest of vs.
func nextReply(vs []any) (result, []any) {
	switch m := vs[0].(int64); m {
	case -2:
		return result{err: vs[1].(error)}, vs[2:]
	case -1:
		return result{v: vs[1]}, vs[2:]
	default:
		return result{v: vs[1 : 1+m : 1+m]}, vs[1+m:]
	}
}

// run runs one batch script call: FCALL of the library's batch function
// where Redis has the library, else EVALSHA (EVAL on NOSCRIPT).
func (b *batcher) run(ctx context.Context, keys []string, argv []any) (any, error) {
	if v, err, ok := b.c.fns.callFn(ctx, b.c.fns.fnb, keys, argv); ok {
		return v, err
	}
	return b.script.Run(ctx, b.c.client, keys, argv...).Result()
}

// pipelined sends the groups of buf, each one script call of its
// limiter's, as one pipeline (go-redis splits it by node), and any group
// the pipeline could not run (the library or script missing on its node)
// again on its own. Each group is answered by its own call's reply: one
// that fails leaves the others' answers as they are.
func (q *nodeQueue) pipelined(ctx context.Context, buf *batchBuf) {
	pl, ok := buf.groups[0].b.c.client.(interface{ Pipeline() goredis.Pipeliner })
	if !ok {
		for _, g := range buf.groups {
			keys, argv := g.b.build(buf, g.ps)
			v, err := g.b.run(ctx, keys, argv)
			answer(g.ps, v, err)
		}
		return
	}
	q.pipelines.Add(1)
	pipe := pl.Pipeline()
	cmds := make([]*goredis.Cmd, len(buf.groups))
	for i, g := range buf.groups {
		// Each group's keys and arguments need their own slices: the
		// pipeline keeps them until Exec.
		var tmp batchBuf
		keys, argv := g.b.build(&tmp, g.ps)
		if fns := &g.b.c.fns; fns.fc != nil && !fns.none.Load() {
			cmds[i] = pipe.FCall(ctx, fns.fnb, keys, argv...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, g.b.script.Hash(), keys, argv...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for i, g := range buf.groups {
		v, err := cmds[i].Result()
		if err != nil && (missingFunction(err) || isNoScript(err)) {
			keys, argv := g.b.build(buf, g.ps)
			v, err = g.b.run(ctx, keys, argv)
		}
		answer(g.ps, v, err)
	}
}

func isNoScript(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// runBounded is run within ctx's deadline even for a client that does not
// bound its I/O by the context (see caller.eval).
func (l *caller) runBounded(ctx context.Context, keys []string, args []any) (any, error) {
	if l.direct {
		return l.run(ctx, keys, args)
	}
	ch := make(chan result, 1)
	go func() {
		v, err := l.run(ctx, keys, args)
		ch <- result{v: v, err: err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// hashTag returns the hash tag of a Redis key this package wrote (between
// its first '{' and the next '}'), or the whole key.
func hashTag(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k[i+1 : i+1+j]
		}
	}
	return k
}

// slot returns the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM)
// modulo 16384.
func slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
