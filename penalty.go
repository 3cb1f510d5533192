package ratelimit

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// Penalty box events: a PenaltyBox reports to its observer (WithObserver)
// when a key is blocked and when its block ends. Observers that count
// decisions skip them (they are not EventDecision).
const (
	// EventBlocked: Key (in its kept form, see PenaltyBox) was refused N
	// times within the box's window and is blocked; RetryAfter is the
	// block's length. Allowed is false.
	EventBlocked EventKind = 60 + iota
	// EventUnblocked: Key's block is over. RetryAfter is zero when the
	// block ran its full length (reported at the key's first decision
	// after the end, or when its entry is cleared to make room), or the
	// time that was left when the box dropped the block early because its
	// table was full (see PenaltyBox).
	EventUnblocked
)

// DefaultPenaltyKeys is how many keys a PenaltyBox tracks (refusal
// histories and blocks together) when WithMaxKeys does not say.
const DefaultPenaltyKeys = 10000

// MaxPenaltyAfter is the largest refusal count a PenaltyBox accepts: its
// state per tracked key holds up to that many instants.
const MaxPenaltyAfter = 1000

// A PenaltyBox wraps a Limiter and blocks keys that keep being refused: a
// key the limiter refuses after times within a window W is blocked for D,
// and every decision for it (Allow, AllowN, Reserve, Wait, WaitN) is
// refused until the block ends, without asking the limiter. It is the
// answer to a guesser: 5/m on a login lets through 7,200 attempts a day,
// 5/m with a 15-minute block after 5 refusals about 5 every 15 minutes.
//
// The rule, on the box's clock (WithClock) in integer nanoseconds: a
// refusal at instant t blocks the key until t+D if, counting it, the key
// had at least after refusals at instants in (t−W, t] since its last
// block began. Refusals are what the limiter refused: Allow false, an
// AllowN (n > 0) not allowed, a Reserve not OK (a booking with a delay is
// not a refusal), a WaitN whose error matches ErrLimited. While a key is
// blocked:
//
//   - Allow returns false; AllowN returns a Decision with Allowed false,
//     Remaining 0, RetryAfter the time left until the block ends, Limit
//     and ResetAfter from a peek of the limiter (ResetAfter at least
//     RetryAfter); Reserve returns a reservation not OK with that
//     Decision, booking nothing; WaitN fails at once with a *LimitError
//     whose RetryAfter is the time left (it matches ErrLimited; Deadline
//     is false: the block, not the deadline, refused). A peek (AllowN with
//     n == 0) is still Allowed, as every peek, with Remaining 0 and
//     RetryAfter the time left.
//   - Nothing reaches the limiter but peeks, so the limiter refills; at
//     the block's end the key is asked of the limiter again, with no
//     refusals counted.
//
// The box reports to its observer an EventDecision for each decision it
// refuses itself (the limiter reports its own decisions to its own
// observer), and EventBlocked and EventUnblocked.
//
// Bounded memory: the box keeps at most WithMaxKeys entries (default
// DefaultPenaltyKeys), one per key with a refusal in the window or a
// block; a key longer than 64 bytes is kept as internal/keyhash's kept
// form (at most 78 bytes, a keyed digest under a per-box random secret),
// so an entry costs a bounded number of bytes: the kept key, at most 8 ×
// after bytes of refusal instants (none while blocked) and a fixed
// overhead. When the table is full and a new key needs an entry, the box
// first clears entries that are over (blocks ended, refusals all out of
// the window); then drops the refusal history that would expire soonest
// (that key's count starts again; no block is lifted); and only when
// every entry is a block, it drops the block ending soonest, reported as
// EventUnblocked with the time that was left. So a block is lifted early
// only when more than the cap of keys are blocked at once, one for each
// new key the table must take, and never one with more time left than
// another still kept.
//
// A decision under way when its key is blocked (by a refusal of another
// goroutine) finishes as the limiter answers. A clock stepped backwards
// is held at the latest instant seen.
//
// Blocks are kept in this process's memory; a Redis limiter wrapped in a
// PenaltyBox gets blocks per process, not shared between instances.
//
// Build it with NewPenaltyBox; the zero value is not usable. It is safe
// for concurrent use.
type PenaltyBox struct {
	inner   Limiter
	after   int
	within  int64
	block   int64
	clock   nanoClock
	maxKeys int
	secret  *keyhash.Secret
	name    string
	obs     Observer // nil: no events

	mu      sync.Mutex
	last    int64 // latest instant seen
	keys    map[string]*penaltyEntry
	hist    penaltyHeap // entries not blocked, by expiry (newest refusal + within)
	blocked penaltyHeap // blocked entries, by the block's end
}

type penaltyEntry struct {
	key     string  // kept form
	times   []int64 // refusal instants in the window, ascending; nil while blocked
	until   int64   // the block's end, while blocked
	isBlock bool
	due     int64 // heap key: expiry of the history, or until
	idx     int   // index in its heap
}

// NewPenaltyBox returns a box that blocks a key of l for block once l has
// refused it after times within within. after must be in [1,
// MaxPenaltyAfter]; within and block must be positive and at most about
// 36.5 years. Of opts, WithClock, WithMaxKeys (0: DefaultPenaltyKeys),
// WithObserver and WithName apply; the clock must be the one l reads.
func NewPenaltyBox(l Limiter, after int, within, block time.Duration, opts ...Option) (*PenaltyBox, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOption)
	case after < 1 || after > MaxPenaltyAfter:
		return nil, fmt.Errorf("%w: penalty box: refusals before a block must be in [1, %d], got %d", ErrInvalidOption, MaxPenaltyAfter, after)
	case within <= 0 || int64(within) > maxSpan:
		return nil, fmt.Errorf("%w: penalty box: window must be positive and at most %s, got %s", ErrInvalidOption, maxSpanText, readable(int64(within)))
	case block <= 0 || int64(block) > maxSpan:
		return nil, fmt.Errorf("%w: penalty box: block must be positive and at most %s, got %s", ErrInvalidOption, maxSpanText, readable(int64(block)))
	}
	if cfg.maxKeys == 0 {
		cfg.maxKeys = DefaultPenaltyKeys
	}
	p := &PenaltyBox{
		inner: l, after: after, within: int64(within), block: int64(block),
		clock: newNanoClock(cfg.clock), maxKeys: cfg.maxKeys, secret: keyhash.NewSecret(),
		name: cfg.name, keys: make(map[string]*penaltyEntry),
	}
	if cfg.observer != nil {
		p.obs = bind(cfg.observer, cfg.name)
	}
	return p, nil
}

// Limiter returns the wrapped limiter.
func (p *PenaltyBox) Limiter() Limiter { return p.inner }

// Blocked reports how long key stays blocked from now; zero if it is not
// blocked.
func (p *PenaltyBox) Blocked(key string) time.Duration {
	now := p.clock.now()
	p.mu.Lock()
	left, evs := p.gateLocked(p.secret.Keep(key), now)
	p.mu.Unlock()
	p.emit(evs)
	return durationNs(left)
}

// Len returns how many keys the box tracks (refusal histories and blocks).
func (p *PenaltyBox) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.keys)
}

// Allow reports whether one event for key may happen now: false while
// key is blocked, else the limiter's answer, a refusal counted.
func (p *PenaltyBox) Allow(key string) bool {
	now := p.clock.now()
	kept := p.secret.Keep(key)
	if left := p.gate(kept, now); left > 0 {
		p.refusedHere(key, 1, left)
		return false
	}
	if p.inner.Allow(key) {
		return true
	}
	p.refused(kept, now)
	return false
}

// AllowN is the limiter's AllowN, refused while key is blocked (see
// PenaltyBox).
func (p *PenaltyBox) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if n < 0 {
		return Decision{}, ErrNegativeN
	}
	now := p.clock.now()
	kept := p.secret.Keep(key)
	if left := p.gate(kept, now); left > 0 {
		d, err := p.blockedDecision(ctx, key, n, left)
		if err == nil && n > 0 {
			p.refusedHere(key, n, left)
		}
		return d, err
	}
	d, err := p.inner.AllowN(ctx, key, n)
	if err == nil && n > 0 && !d.Allowed {
		p.refused(kept, now)
	}
	return d, err
}

// Reserve is the limiter's Reserve, not OK while key is blocked (see
// PenaltyBox).
func (p *PenaltyBox) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	if n < 0 {
		return nil, ErrNegativeN
	}
	now := p.clock.now()
	kept := p.secret.Keep(key)
	if left := p.gate(kept, now); left > 0 {
		d, err := p.blockedDecision(ctx, key, n, left)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			p.refusedHere(key, n, left)
		}
		return NewReservation(p.clock.clock, false, d, p.clock.timeOf(now+left), nil), nil
	}
	r, err := p.inner.Reserve(ctx, key, n)
	if err == nil && n > 0 && !r.OK() {
		p.refused(kept, now)
	}
	return r, err
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (p *PenaltyBox) Wait(ctx context.Context, key string) error { return p.WaitN(ctx, key, 1) }

// WaitN is the limiter's WaitN; while key is blocked it fails at once
// with a *LimitError (see PenaltyBox).
func (p *PenaltyBox) WaitN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return ErrNegativeN
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := p.clock.now()
	kept := p.secret.Keep(key)
	if left := p.gate(kept, now); left > 0 {
		if _, err := p.blockedDecision(ctx, key, n, left); err != nil {
			return err
		}
		p.refusedHere(key, n, left)
		return &LimitError{RetryAfter: durationNs(left)}
	}
	err := p.inner.WaitN(ctx, key, n)
	if err != nil && errors.Is(err, ErrLimited) {
		p.refused(kept, now)
	}
	return err
}

// blockedDecision is the Decision for n events on a key blocked for left
// more nanoseconds: the limiter is peeked for Limit and ResetAfter and
// for its checks of n.
func (p *PenaltyBox) blockedDecision(ctx context.Context, key string, n int, left int64) (Decision, error) {
	d, err := p.inner.AllowN(ctx, key, 0)
	if err != nil {
		return Decision{}, err
	}
	if n > d.Limit {
		return Decision{}, ErrExceedsLimit
	}
	d.Allowed = n == 0
	d.Remaining = 0
	d.RetryAfter = durationNs(left)
	if d.ResetAfter < d.RetryAfter {
		d.ResetAfter = d.RetryAfter
	}
	return d, nil
}

// gate returns how long kept stays blocked after now; 0 if not blocked.
func (p *PenaltyBox) gate(kept string, now int64) int64 {
	p.mu.Lock()
	left, evs := p.gateLocked(kept, now)
	p.mu.Unlock()
	p.emit(evs)
	return left
}

func (p *PenaltyBox) gateLocked(kept string, now int64) (int64, []Event) {
	now = p.advanceLocked(now)
	e := p.keys[kept]
	if e == nil || !e.isBlock {
		return 0, nil
	}
	if now < e.until {
		return e.until - now, nil
	}
	heap.Remove(&p.blocked, e.idx)
	delete(p.keys, kept)
	if p.obs == nil {
		return 0, nil
	}
	return 0, []Event{{Limiter: p.name, Key: kept, Kind: EventUnblocked}}
}

// refused counts a refusal of kept by the limiter at now, and blocks the
// key if it is the after-th in the window.
func (p *PenaltyBox) refused(kept string, now int64) {
	var evs []Event
	p.mu.Lock()
	now = p.advanceLocked(now)
	e := p.keys[kept]
	if e != nil && e.isBlock {
		if now < e.until {
			// Blocked by another goroutine meanwhile: the refusal
			// falls in the block.
			p.mu.Unlock()
			return
		}
		_, evs = p.gateLocked(kept, now) // over: counting starts afresh
		e = nil
	}
	if e == nil {
		evs = p.makeRoomLocked(now, evs)
		e = &penaltyEntry{key: kept, times: make([]int64, 0, min(p.after, 8))}
		p.keys[kept] = e
		e.due = now + p.within
		heap.Push(&p.hist, e)
	}
	// Drop the refusals out of the window (t ≤ now − within).
	i := 0
	for i < len(e.times) && e.times[i] <= now-p.within {
		i++
	}
	e.times = e.times[:copy(e.times, e.times[i:])]
	e.times = append(e.times, now)
	if len(e.times) >= p.after {
		heap.Remove(&p.hist, e.idx)
		e.times, e.isBlock, e.until = nil, true, now+p.block
		e.due = e.until
		heap.Push(&p.blocked, e)
		if p.obs != nil {
			evs = append(evs, Event{Limiter: p.name, Key: kept, N: p.after, RetryAfter: durationNs(p.block), Kind: EventBlocked})
		}
	} else {
		e.due = now + p.within
		heap.Fix(&p.hist, e.idx)
	}
	p.mu.Unlock()
	p.emit(evs)
}

// makeRoomLocked makes room for one more entry if the table is full (see
// PenaltyBox for the order) and returns evs with the events to report.
func (p *PenaltyBox) makeRoomLocked(now int64, evs []Event) []Event {
	if len(p.keys) < p.maxKeys {
		return evs
	}
	for p.hist.Len() > 0 && p.hist[0].due <= now {
		delete(p.keys, heap.Pop(&p.hist).(*penaltyEntry).key)
	}
	for p.blocked.Len() > 0 && p.blocked[0].due <= now {
		e := heap.Pop(&p.blocked).(*penaltyEntry)
		delete(p.keys, e.key)
		if p.obs != nil {
			evs = append(evs, Event{Limiter: p.name, Key: e.key, Kind: EventUnblocked})
		}
	}
	for len(p.keys) >= p.maxKeys {
		if p.hist.Len() > 0 {
			delete(p.keys, heap.Pop(&p.hist).(*penaltyEntry).key)
			continue
		}
		e := heap.Pop(&p.blocked).(*penaltyEntry)
		delete(p.keys, e.key)
		if p.obs != nil {
			evs = append(evs, Event{Limiter: p.name, Key: e.key, RetryAfter: durationNs(e.until - now), Kind: EventUnblocked})
		}
	}
	return evs
}

func (p *PenaltyBox) advanceLocked(now int64) int64 {
	if now < p.last {
		return p.last
	}
	p.last = now
	return now
}

// refusedHere reports a decision the box refused itself.
func (p *PenaltyBox) refusedHere(key string, n int, left int64) {
	if p.obs != nil {
		p.obs.Observe(Event{Limiter: p.name, Key: key, N: n, RetryAfter: durationNs(left)})
	}
}

func (p *PenaltyBox) emit(evs []Event) {
	for _, e := range evs {
		p.obs.Observe(e)
	}
}

// penaltyHeap is a min-heap of entries by due.
type penaltyHeap []*penaltyEntry

func (h penaltyHeap) Len() int           { return len(h) }
func (h penaltyHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h penaltyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *penaltyHeap) Push(x any) {
	e := x.(*penaltyEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *penaltyHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
