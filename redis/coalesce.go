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

// Coalescing: while calls of a limiter are in flight, later decisions
// queue, and when a call returns the queue goes out as one batch, decided
// by one script call (per hash slot on a Cluster) in arrival order, each
// decision exactly the step it would have been alone (see batch in
// luaPrelude). A decision that finds fewer than the pipeline depth of
// calls in flight and nobody queued goes at once, alone, as without
// coalescing: nothing ever waits for a timer.

const (
	defaultMaxBatch = 128
	defaultMaxBytes = 64 << 10
	defaultDepth    = 2
)

// WithCoalescing turns coalescing on (the default) or off. Off, every
// decision is one script call of its own, however many are in flight.
func WithCoalescing(on bool) Option { return func(c *config) { c.coalesce = on } }

// WithCoalescingLimits bounds coalescing: a batch holds at most maxBatch
// decisions (default 128) and about maxBytes bytes of keys and arguments
// (default 64 KiB; a decision larger than that goes in a batch of its
// own), and at most depth calls of the limiter are in flight at once
// (default 2), single decisions and batches alike. Each must be at least
// 1, or the constructor fails with an error matching
// ratelimit.ErrInvalidOption.
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
	keys   []string
	argv   []any
	calls  []any
}

// group is the decisions of a batch that go in one script call.
type group struct {
	tag  string
	slot uint16
	ps   []*pending
}

var batchPool = sync.Pool{New: func() any { return new(batchBuf) }}

// batcher coalesces one limiter's calls.
type batcher struct {
	c        caller // a copy, without batch
	kpc      int    // Redis keys per call
	grouping grouping
	script   *goredis.Script // the batch form, for EVALSHA and EVAL

	mu       sync.Mutex
	queue    []*pending
	inflight int

	// Counts, for tests: decisions sent in batches of two or more, and
	// batches that spanned groups (a pipeline).
	multi, pipelines atomic.Int64
}

func newBatcher(c caller, s script) *batcher {
	return &batcher{c: c, kpc: len(c.suffix), grouping: groupingOf(c.client),
		script: goredis.NewScript(s.batchSource())}
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
	b.mu.Lock()
	if b.inflight < b.c.cfg.depth && len(b.queue) == 0 {
		b.inflight++
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, b.c.cfg.timeout)
		defer cancel()
		if b.c.cfg.batchAlways {
			return b.alone(ctx, keys, args)
		}
		v, err := b.c.runBounded(ctx, keys, args)
		b.done()
		return v, err
	}
	p := b.pending(ctx, keys, args)
	p.deadline = time.Now().UnixNano() + int64(b.c.cfg.timeout)
	b.queue = append(b.queue, p)
	b.mu.Unlock()
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
		b.flush(r.lead)
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
	go b.flush(buf)
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
	switch b.grouping {
	case groupSlot:
		p.slot = slot(hashTag(keys[0]))
	case groupTag:
		p.tag = hashTag(keys[0])
	}
	return p
}

func (p *pending) release() {
	p.ctx = nil
	p.state.Store(waiting)
	clear(p.args)
	clear(p.keys)
	pendingPool.Put(p)
}

// done ends a call in flight and starts batches of what queued, as many
// as the depth allows.
func (b *batcher) done() {
	b.mu.Lock()
	b.inflight--
	for len(b.queue) > 0 && b.inflight < b.c.cfg.depth {
		buf := b.take()
		if buf == nil {
			break
		}
		b.inflight++
		b.mu.Unlock()
		b.hand(buf)
		b.mu.Lock()
	}
	b.mu.Unlock()
}

// hand starts buf's batch (a call in flight counted for it): its first
// caller sends it, on its own goroutine, woken with it instead of an
// answer; a goroutine of its own if that caller has given up.
func (b *batcher) hand(buf *batchBuf) {
	if p := buf.ps[0]; p.state.CompareAndSwap(waiting, leading) {
		p.ch <- result{lead: buf}
		return
	}
	go b.flush(buf)
}

// take moves the front of the queue (b.mu held) into a batch, within the
// limits, leaving out decisions whose caller gave up; nil if none is left.
func (b *batcher) take() *batchBuf {
	buf := batchPool.Get().(*batchBuf)
	bytes, i := 0, 0
	now := time.Now().UnixNano()
	for ; i < len(b.queue); i++ {
		p := b.queue[i]
		if now >= p.deadline || p.ctx.Err() != nil {
			continue // its caller has gone: not sent, so not booked
		}
		if len(buf.ps) == b.c.cfg.maxBatch || (len(buf.ps) > 0 && bytes+p.size > b.c.cfg.maxBytes) {
			break
		}
		bytes += p.size
		buf.ps = append(buf.ps, p)
	}
	n := copy(b.queue, b.queue[i:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	if len(buf.ps) == 0 {
		batchPool.Put(buf)
		return nil
	}
	return buf
}

// flush sends buf's batch, then hands the next batch of the queue on in
// its call in flight, or ends that call if nothing queues.
func (b *batcher) flush(buf *batchBuf) {
	b.send(buf)
	b.recycle(buf)
	b.mu.Lock()
	buf = nil
	if len(b.queue) > 0 {
		buf = b.take()
	}
	if buf == nil {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.hand(buf)
}

func (b *batcher) recycle(buf *batchBuf) {
	clear(buf.ps)
	buf.ps = buf.ps[:0]
	for i := range buf.groups {
		clear(buf.groups[i].ps)
		buf.groups[i] = group{ps: buf.groups[i].ps[:0]}
	}
	buf.groups = buf.groups[:0]
	clear(buf.keys)
	buf.keys = buf.keys[:0]
	clear(buf.argv)
	buf.argv = buf.argv[:0]
	clear(buf.calls)
	buf.calls = buf.calls[:0]
	batchPool.Put(buf)
}

// send decides the batch and answers each of its callers once.
func (b *batcher) send(buf *batchBuf) {
	b.c.batched(len(buf.ps))
	ctx, cancel := context.WithTimeout(context.Background(), b.c.cfg.timeout)
	defer cancel()
	if len(buf.ps) == 1 && !b.c.cfg.batchAlways {
		p := buf.ps[0]
		v, err := b.c.run(ctx, p.keys, p.args)
		p.ch <- result{v: v, err: err}
		return
	}
	b.multi.Add(int64(len(buf.ps)))
	// Group by slot (or tag), keeping arrival order within each group.
	for _, p := range buf.ps {
		j := 0
		for ; j < len(buf.groups) && (buf.groups[j].tag != p.tag || buf.groups[j].slot != p.slot); j++ {
		}
		if j == len(buf.groups) {
			if j < cap(buf.groups) {
				buf.groups = buf.groups[:j+1]
				buf.groups[j].tag, buf.groups[j].slot = p.tag, p.slot
			} else {
				buf.groups = append(buf.groups, group{tag: p.tag, slot: p.slot})
			}
		}
		buf.groups[j].ps = append(buf.groups[j].ps, p)
	}
	if len(buf.groups) == 1 {
		keys, argv := b.build(buf, buf.groups[0].ps)
		v, err := b.run(ctx, keys, argv)
		b.answer(buf.groups[0].ps, v, err)
		return
	}
	b.pipelined(ctx, buf)
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
		calls = append(calls, blk, p.args[0], p.args[1], p.args[3], p.args[4])
	}
	argv[2] = nb
	argv = append(argv, calls...)
	buf.keys, buf.argv, buf.calls = keys, argv, calls
	return keys, argv
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
func (b *batcher) answer(ps []*pending, v any, err error) {
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

// pipelined sends the groups of buf as one pipeline (go-redis splits it by
// node), and any group the pipeline could not run (the library or script
// missing on its node) again on its own.
func (b *batcher) pipelined(ctx context.Context, buf *batchBuf) {
	pl, ok := b.c.client.(interface{ Pipeline() goredis.Pipeliner })
	if !ok {
		for _, g := range buf.groups {
			keys, argv := b.build(buf, g.ps)
			v, err := b.run(ctx, keys, argv)
			b.answer(g.ps, v, err)
		}
		return
	}
	b.pipelines.Add(1)
	fcall := b.c.fns.fc != nil && !b.c.fns.none.Load()
	pipe := pl.Pipeline()
	cmds := make([]*goredis.Cmd, len(buf.groups))
	for i, g := range buf.groups {
		// Each group's keys and arguments need their own slices: the
		// pipeline keeps them until Exec.
		var tmp batchBuf
		keys, argv := b.build(&tmp, g.ps)
		if fcall {
			cmds[i] = pipe.FCall(ctx, b.c.fns.fnb, keys, argv...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, b.script.Hash(), keys, argv...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for i, g := range buf.groups {
		v, err := cmds[i].Result()
		if err != nil && (missingFunction(err) || isNoScript(err)) {
			keys, argv := b.build(buf, g.ps)
			v, err = b.run(ctx, keys, argv)
		}
		b.answer(g.ps, v, err)
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
