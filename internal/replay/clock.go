package replay

import (
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Clock is the replay's clock: it reads the time of the request being
// decided, set by the replay, and nothing else moves it. Its timers never
// fire (nothing in a replay waits).
type Clock struct{ ns atomic.Int64 }

// Now returns the time the replay set.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// NewTimer returns a timer that never fires.
func (c *Clock) NewTimer(time.Duration) ratelimit.Timer { return never{} }

func (c *Clock) set(ns int64) { c.ns.Store(ns) }

type never struct{}

func (never) C() <-chan time.Time { return nil }
func (never) Stop() bool          { return true }
