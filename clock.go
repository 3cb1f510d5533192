package ratelimit

import (
	"context"
	"sort"
	"sync"
	"time"
)

// A Clock tells the time and makes timers. Every limiter reads time only
// through its Clock, so tests and simulations can drive it with a
// ManualClock. All limiters that share state must share a clock.
//
// The in-memory limiters keep time as integer nanoseconds within the years
// 1970 to 2116: a reading outside that range acts as the nearest end of it
// (time.Time{}, the year 1, acts as 1970), so while a clock reads outside,
// the limiter's time stands still: nothing refills and a wait for a later
// instant lasts until the clock reaches it. The system clock is always
// inside.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after Now.
	// A d of zero or less fires at once.
	NewTimer(d time.Duration) Timer
}

// A Timer fires once on its channel. It is what Wait blocks on.
type Timer interface {
	// C returns the channel on which the time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it did so:
	// false means the timer had already fired or been stopped.
	Stop() bool
}

// SystemClock returns the clock of the time package: the wall clock for
// Now and the runtime's timers. It is the default clock of every limiter,
// and it follows the fake time of testing/synctest bubbles.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// nanoClock is how limiters read time on the hot path: integer Unix
// nanoseconds. For the system clock it reads only the monotonic clock
// (time.Since of an instant taken at construction, about 23 ns on the
// reference machine, against about 39 ns for time.Now, which also reads the
// wall clock) and adds the wall time of that instant. The result is therefore
// immune to wall-clock steps after construction: a limiter never sees time
// jump backwards or forwards when NTP or an operator sets the clock.
// Other clocks are read through Now.
type nanoClock struct {
	clock  Clock
	system bool
	start  time.Time // monotonic anchor, system clock only
	base   int64     // start on the limiter's time line
}

func newNanoClock(c Clock) nanoClock {
	if c == nil {
		c = systemClock{}
	}
	_, sys := c.(systemClock)
	n := nanoClock{clock: c, system: sys}
	if sys {
		n.start = time.Now()
		n.base = clampNanos(n.start)
	}
	return n
}

// The limiter's time line is Unix nanoseconds within [minNanos, maxNanos]
// (years 1970 to 2116). A clock reading outside is clamped: for a limiter,
// time stands still before 1970 and after 2116. The bounds keep every sum of
// an instant and a few spans of maxSpan, or a difference of two instants,
// within int64. The system clock is read as an offset from an instant
// inside them.
const (
	minNanos = 0
	maxNanos = 1 << 62
)

// maxSpan bounds the spans every algorithm keeps ahead of now: capacity ×
// interval, a window, and how far ahead Reserve books. An instant plus three
// such spans stays within int64. It is about 36.5 years.
const maxSpan = int64(1) << 60

// maxSpanText is maxSpan in error text.
const maxSpanText = "2^60 ns, about 36.5 years"

var (
	minTime = time.Unix(0, minNanos)
	maxTime = time.Unix(0, maxNanos)
)

// clampNanos returns t in Unix nanoseconds, clamped to [minNanos,
// maxNanos]. It compares t itself first: t.UnixNano is undefined outside
// the years 1678 to 2262, so converting before clamping would wrap.
func clampNanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return minNanos
	case t.After(maxTime):
		return maxNanos
	}
	return t.UnixNano()
}

// now returns the current instant on the limiter's time line.
func (n *nanoClock) now() int64 {
	if n.system {
		return n.base + int64(time.Since(n.start))
	}
	return clampNanos(n.clock.Now())
}

// nanosOf converts a reading t of this clock to the limiter's time line:
// the inverse of timeOf, and what now returns for a reading of t.
func (n *nanoClock) nanosOf(t time.Time) int64 {
	if n.system {
		return n.base + int64(t.Sub(n.start))
	}
	return clampNanos(t)
}

// timeOf converts an instant of the limiter's time line to a time.Time on
// this clock. For a clock reading within the time line, nanosOf(timeOf(ns))
// is ns.
func (n *nanoClock) timeOf(ns int64) time.Time {
	if n.system {
		return n.start.Add(time.Duration(ns - n.base))
	}
	return time.Unix(0, ns)
}

// ManualClock is a Clock that moves only when told to, with Advance or Set.
// Timers fire, in order of their deadlines, when the clock reaches them.
// Tests and simulations use it to pin behaviour to the nanosecond without
// sleeping. The clock may be set backwards; timers then wait for it to
// come forward again.
//
// Build it with NewManualClock. It is safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer // pending, unsorted
	seq    uint64
}

// NewManualClock returns a ManualClock that reads t until moved.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backwards if d is negative) and
// fires every timer whose deadline has been reached.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t, forwards or backwards, and fires every timer
// whose deadline has been reached.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.setLocked(t)
}

// setLocked requires c.mu held and releases it.
func (c *ManualClock) setLocked(t time.Time) {
	c.now = t
	var due []*manualTimer
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.when.After(t) {
			due = append(due, tm)
		} else {
			kept = append(kept, tm)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if due[i].when.Equal(due[j].when) {
			return due[i].seq < due[j].seq
		}
		return due[i].when.Before(due[j].when)
	})
	for _, tm := range due {
		tm.ch <- t // buffered, capacity 1, sent at most once
	}
}

// Timers returns the number of timers waiting to fire. Tests use it to
// know that a goroutine has started to wait.
func (c *ManualClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	c.seq++
	tm := &manualTimer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1), seq: c.seq}
	if d <= 0 {
		now := c.now
		c.mu.Unlock()
		tm.ch <- now
		return tm
	}
	c.timers = append(c.timers, tm)
	c.mu.Unlock()
	return tm
}

type manualTimer struct {
	c    *ManualClock
	when time.Time
	ch   chan time.Time
	seq  uint64
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm == t {
			last := len(c.timers) - 1
			c.timers[i] = c.timers[last]
			c.timers[last] = nil
			c.timers = c.timers[:last]
			return true
		}
	}
	return false
}

// noMaxWait is a maxWait that sets no bound on a booking's delay.
const noMaxWait = -1

// untilDeadline returns how long is left of ctx's deadline, in
// nanoseconds and never negative, or noMaxWait if it has none. A
// context's deadline is an instant of real time: what is left of it is
// measured on the time package's clock, whatever the limiter's Clock.
func untilDeadline(ctx context.Context) int64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return noMaxWait
	}
	return max(int64(time.Until(dl)), 0)
}

// durationNs converts nanoseconds to a Duration, never negative.
func durationNs(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
