package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// AdaptiveParams are the bounds and the parameters of an AdaptiveBulkhead.
// A zero field takes its default.
type AdaptiveParams struct {
	// Min and Max bound the limit: it never leaves [Min, Max]. Max is
	// required; Min defaults to 1.
	Min, Max int
	// Initial is the limit to start from (default Min).
	Initial int
	// Window is the fewest completed calls that make one measurement
	// (default 20); a window also spans at least as many calls as the
	// limit. The limit moves at most once a window.
	Window int
	// Alpha and Beta bound the queue the limit aims to keep in front of
	// the dependency, in calls (defaults 3 and 6): below Alpha the limit
	// grows, above Beta it shrinks, in between it holds. 0 <= Alpha < Beta.
	Alpha, Beta int
	// ProbeEvery is how many windows pass between two probes of the
	// latency at no load (default 100); a negative value never probes.
	ProbeEvery int
}

// Defaults of AdaptiveParams, in one place.
const (
	defaultAdaptiveWindow = 20
	defaultAdaptiveAlpha  = 3
	defaultAdaptiveBeta   = 6
	defaultProbeEvery     = 100
)

func (p AdaptiveParams) withDefaults() (AdaptiveParams, error) {
	if p.Min == 0 {
		p.Min = 1
	}
	if p.Initial == 0 {
		p.Initial = p.Min
	}
	if p.Window == 0 {
		p.Window = defaultAdaptiveWindow
	}
	if p.Alpha == 0 && p.Beta == 0 {
		p.Alpha, p.Beta = defaultAdaptiveAlpha, defaultAdaptiveBeta
	}
	if p.ProbeEvery == 0 {
		p.ProbeEvery = defaultProbeEvery
	}
	switch {
	case p.Max == 0:
		return p, fmt.Errorf("%w: adaptive bulkhead needs a maximum limit", ErrInvalidCapacity)
	case p.Min < 1 || p.Max > maxBulkheadLimit || p.Min > p.Max:
		return p, fmt.Errorf("%w: adaptive bulkhead bounds must satisfy 1 <= min <= max <= %d, got [%d, %d]",
			ErrInvalidCapacity, maxBulkheadLimit, p.Min, p.Max)
	case p.Initial < p.Min || p.Initial > p.Max:
		return p, fmt.Errorf("%w: adaptive bulkhead initial limit %d is outside [%d, %d]", ErrInvalidCapacity, p.Initial, p.Min, p.Max)
	case p.Window < 1:
		return p, fmt.Errorf("%w: adaptive bulkhead window must be at least 1 call, got %d", ErrInvalidOption, p.Window)
	case p.Alpha < 0 || p.Beta <= p.Alpha:
		return p, fmt.Errorf("%w: adaptive bulkhead needs 0 <= alpha < beta, got alpha %d, beta %d", ErrInvalidOption, p.Alpha, p.Beta)
	}
	return p, nil
}

// AdaptiveBulkhead is a bulkhead whose limit follows the latency of the
// dependency behind it, a delay-based limit of the TCP Vegas family: while
// calls take about as long as they do at no load the limit grows, and when
// they take longer, which means they queue somewhere, it shrinks, always
// within [Min, Max]. It finds, and follows, how many calls the dependency
// can take at once without queueing, without anyone having to know it.
//
// The algorithm. Latency is measured per permit, on the clock of
// WithBulkheadClock, from the moment Acquire or TryAcquire grants it to
// its Release. Release takes no argument, so permits are matched in FIFO
// order: a Release is paired with the oldest permit still in flight. That
// is exact when calls finish in the order they started (a dependency that
// serves its queue in order), and otherwise keeps the sum of latencies
// exact while moving individual samples between calls. With L the limit,
// a window is the next max(Window, L) calls to complete that were granted
// after the limit last changed (calls granted before say nothing of the
// current limit, and are not counted); spanning L calls, it sees a whole
// round of them, slow ones too, and not only the first to finish. It gives
// the mean latency R and the smallest latency m of its calls. The no-load
// latency N is the smallest m seen since the last probe. The calls queued
// at the dependency are estimated as
//
//	queue = ⌈L × (R − N) / R⌉
//
// and, at the end of each window:
//   - queue < Alpha: the limit grows by 1 + L/32, if the window was busy
//     (at some point at least half the limit was in flight; an idle
//     client learns nothing about the dependency's capacity and does not
//     grow);
//   - queue > Beta: it shrinks by max(1, (queue − Beta)/2);
//   - otherwise it holds.
//
// So at equilibrium the dependency has between Alpha and Beta calls
// waiting. Against a dependency serving C calls at once, the limit settles
// near C + Alpha to C + Beta.
//
// N only ever falls between probes, so a dependency that became slower
// for good would be read as queueing forever. Every ProbeEvery windows the
// limit is therefore halved (not below Min) for one window of Window + L
// calls, long enough for the queue to drain; the smallest latency of that
// window becomes the new N, and the limit is restored.
//
// The limit applies as a Bulkhead's does: Acquire waits in FIFO order
// (WithMaxWait and WithMaxWaiters bound the wait), a shrinking limit drops
// no call in flight, and no permit is ever lost or double-released. The
// options are those of NewBulkhead; the clock also times latencies.
//
// Build it with NewAdaptiveBulkhead; the zero value is not usable. It is
// safe for concurrent use and starts no goroutine. It implements
// httplimit.Concurrency: most callers want Do, or hand it to
// httplimit.Transport, httplimit.ConcurrencyMiddleware or the grpclimit
// interceptors. Unlike Bulkhead, every Acquire and Release takes a mutex
// and reads the clock.
type AdaptiveBulkhead struct {
	b      *Bulkhead // the permits; its limit is the one enforced
	params AdaptiveParams
	nc     nanoClock

	mu      sync.Mutex
	starts  fifo  // grant instants of the permits in flight, oldest first
	limit   int   // the limit outside a probe
	noload  int64 // N, in ns; -1 until the first window
	win     window
	windows int   // windows since the last probe
	probing bool  // the current window is a probe
	changed int64 // when the enforced limit last changed
}

// window accumulates one measurement. Guarded by AdaptiveBulkhead.mu.
type window struct {
	n         int
	sum       int64 // latencies, saturating
	min       int64
	maxFlight int
}

// NewAdaptiveBulkhead returns an adaptive bulkhead with the given bounds
// and parameters, and the options of NewBulkhead (WithMaxWait,
// WithMaxWaiters, WithBulkheadClock, WithBulkheadFairQueue and
// WithBulkheadClasses, whose reserves are checked against Initial and, as
// the limit moves, capped at Limit()-1 as WithBulkheadClasses says). It
// returns an error matching ErrInvalidCapacity if the bounds are not 1 <=
// Min <= Initial <= Max <= 2³¹-1 (Max is required), and ErrInvalidOption
// for a parameter or an option out of range.
func NewAdaptiveBulkhead(p AdaptiveParams, opts ...BulkheadOption) (*AdaptiveBulkhead, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := newBulkheadConfig(p.Initial, opts)
	if err != nil {
		return nil, err
	}
	b, err := NewBulkhead(p.Initial, opts...)
	if err != nil {
		return nil, err
	}
	return &AdaptiveBulkhead{b: b, params: p, nc: newNanoClock(cfg.clock), limit: p.Initial, noload: -1}, nil
}

// TryAcquire takes a permit if one is free now and nobody is waiting for
// one, and reports whether it did. A true result must be paired with one
// Release.
func (a *AdaptiveBulkhead) TryAcquire() bool {
	if !a.b.TryAcquire() {
		return false
	}
	a.granted()
	return true
}

// Acquire takes a permit as Bulkhead.Acquire does, waiting in FIFO order
// until one is free, ctx is done or the maximum wait passes. A nil result
// must be paired with one Release. On failure the bulkhead is left
// unchanged and the errors are Bulkhead.Acquire's. The time spent waiting
// is not part of the call's latency.
func (a *AdaptiveBulkhead) Acquire(ctx context.Context) error {
	if err := a.b.Acquire(ctx); err != nil {
		return err
	}
	a.granted()
	return nil
}

// AcquireFor is Acquire for a call of tenant, waiting in its tenant's
// queue as Bulkhead.AcquireFor does (with WithBulkheadFairQueue; without,
// the tenant is ignored). On failure the bulkhead is left unchanged and
// the errors are Bulkhead.AcquireFor's.
func (a *AdaptiveBulkhead) AcquireFor(ctx context.Context, tenant string) error {
	if err := a.b.AcquireFor(ctx, tenant); err != nil {
		return err
	}
	a.granted()
	return nil
}

// DoFor runs fn holding a permit acquired as AcquireFor does, as
// Bulkhead.DoFor does. fn must not be nil.
func (a *AdaptiveBulkhead) DoFor(ctx context.Context, tenant string, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: AdaptiveBulkhead.DoFor with nil function")
	}
	if err := a.AcquireFor(ctx, tenant); err != nil {
		return err
	}
	defer a.Release()
	return fn(ctx)
}

// granted records the grant of a permit.
func (a *AdaptiveBulkhead) granted() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.starts.push(a.nc.now()) // read under mu: starts stay in push order
	a.win.maxFlight = max(a.win.maxFlight, a.starts.len())
}

// Release gives back a permit taken by TryAcquire or Acquire, and counts
// the call's latency (see the type's doc for how permits are matched).
// Release without a permit held panics with "ratelimit: Release without
// Acquire", leaving the bulkhead unchanged.
func (a *AdaptiveBulkhead) Release() {
	a.b.Release() // panics, changing nothing, if no permit is held
	a.mu.Lock()
	defer a.mu.Unlock()
	// A permit was held, so its grant is in starts: the holder pushed it
	// before Acquire returned. A permit granted since is younger.
	start := a.starts.pop()
	if start < a.changed {
		return // admitted under an older limit: says nothing of this one
	}
	a.sampleLocked(max(a.nc.now()-start, 0))
}

// Do runs fn holding a permit, as Bulkhead.Do does. fn must not be nil.
func (a *AdaptiveBulkhead) Do(ctx context.Context, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: AdaptiveBulkhead.Do with nil function")
	}
	if err := a.Acquire(ctx); err != nil {
		return err
	}
	defer a.Release()
	return fn(ctx)
}

// Limit returns the most calls admitted in flight at once now: the
// adaptive limit, or half of it during a probe. It is always in
// [Min, Max].
func (a *AdaptiveBulkhead) Limit() int { return a.b.Limit() }

// InFlight returns the number of permits held now. After the limit
// shrinks it may exceed Limit until enough calls finish.
func (a *AdaptiveBulkhead) InFlight() int { return a.b.InFlight() }

// Waiting returns the number of calls waiting in Acquire now.
func (a *AdaptiveBulkhead) Waiting() int { return a.b.Waiting() }

// MinLatency returns the latency taken as the dependency's at no load (N
// in the type's doc), or 0 before the first window.
func (a *AdaptiveBulkhead) MinLatency() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Duration(max(a.noload, 0))
}

// sampleLocked adds one latency to the window and, when the window is
// complete, moves the limit. Requires a.mu held.
func (a *AdaptiveBulkhead) sampleLocked(d int64) {
	w := &a.win
	if w.n == 0 || d < w.min {
		w.min = d
	}
	w.n++
	if w.sum += d; w.sum < 0 {
		w.sum = 1<<63 - 1
	}
	p := a.params
	size := max(p.Window, a.limit)
	if a.probing {
		size = p.Window + a.limit
	}
	if w.n < size {
		return
	}
	done := *w
	*w = window{maxFlight: a.starts.len()}
	enforced := a.b.Limit()
	switch {
	case a.probing:
		a.noload, a.probing, a.windows = done.min, false, 0
	default:
		if a.noload < 0 || done.min < a.noload {
			a.noload = done.min
		}
		a.limit = nextLimit(a.limit, done, a.noload, p)
		if a.windows++; p.ProbeEvery > 0 && a.windows >= p.ProbeEvery {
			a.probing = true
		}
	}
	next := a.limit
	if a.probing {
		next = max(p.Min, a.limit/2)
	}
	if next != enforced {
		a.b.SetLimit(next) // in [Min, Max]: cannot fail
		a.changed = a.nc.now()
	}
}

// nextLimit is one step of the algorithm: the limit after a window w,
// given the no-load latency n. It is pure, and within [p.Min, p.Max].
func nextLimit(limit int, w window, n int64, p AdaptiveParams) int {
	mean := w.sum / int64(w.n)
	if w.sum%int64(w.n) != 0 {
		mean++
	}
	q := queueEstimate(limit, mean, n)
	switch {
	case q < int64(p.Alpha):
		if 2*w.maxFlight >= limit {
			limit += 1 + limit/32
		}
	case q > int64(p.Beta):
		limit -= max(1, int((q-int64(p.Beta))/2))
	}
	return min(max(limit, p.Min), p.Max)
}

// queueEstimate is ⌈limit × (mean − n) / mean⌉, exactly, for n >= 0 (a
// negative n counts as 0); 0 when mean <= n. It is in [0, limit].
func queueEstimate(limit int, mean, n int64) int64 {
	n = max(n, 0)
	if mean <= n {
		return 0
	}
	hi, lo := bits.Mul64(uint64(limit), uint64(mean-n))
	q, rem := bits.Div64(hi, lo, uint64(mean)) // hi < mean: limit*(mean-n) < limit*mean
	if rem != 0 {
		q++
	}
	return int64(q) // <= limit
}

// fifo is a queue of int64 in a growable ring.
type fifo struct {
	buf        []int64
	head, size int
}

func (f *fifo) len() int { return f.size }

func (f *fifo) push(v int64) {
	if f.size == len(f.buf) {
		nb := make([]int64, max(8, 2*len(f.buf)))
		for i := range f.size {
			nb[i] = f.buf[(f.head+i)%len(f.buf)]
		}
		f.buf, f.head = nb, 0
	}
	f.buf[(f.head+f.size)%len(f.buf)] = v
	f.size++
}

// pop removes and returns the oldest value. The queue must not be empty.
func (f *fifo) pop() int64 {
	v := f.buf[f.head]
	f.head = (f.head + 1) % len(f.buf)
	f.size--
	return v
}
