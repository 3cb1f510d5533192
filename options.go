package ratelimit

import (
	"fmt"
	"time"
)

// An Option configures a limiter built by one of the New… constructors.
// The same options apply to every algorithm.
type Option func(*config)

// config holds every option with its default, in one place.
type config struct {
	clock         Clock         // default: SystemClock()
	shards        int           // default: defaultShards
	maxKeys       int           // default: 0, no cap
	sweepInterval time.Duration // default: 0, no sweeper goroutine
	observer      Observer      // default: nil, no events
	name          string        // default: "", the limiter's name in events
	exempt        []string      // default: none; for rules only (WithExempt)
}

// defaultShards is enough to keep lock contention low on machines of up to
// a few dozen cores while costing little memory (one cache line each).
const defaultShards = 64

func newConfig(opts []Option) (config, error) {
	c := config{clock: SystemClock(), shards: defaultShards}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.clock == nil:
		return c, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	case c.shards < 1 || c.shards > 1<<16 || c.shards&(c.shards-1) != 0:
		return c, fmt.Errorf("%w: shards must be a power of two in [1, 65536], got %d", ErrInvalidOption, c.shards)
	case c.maxKeys < 0:
		return c, fmt.Errorf("%w: max keys must not be negative, got %d", ErrInvalidOption, c.maxKeys)
	case c.sweepInterval < 0:
		return c, fmt.Errorf("%w: sweep interval must not be negative, got %s", ErrInvalidOption, readable(int64(c.sweepInterval)))
	case c.exempt != nil:
		return c, fmt.Errorf("%w: WithExempt is for rules (NewRules, ParseRules), not for a limiter", ErrInvalidOption)
	}
	return c, nil
}

// WithClock makes the limiter read time from c instead of the system
// clock. All limiters that share keys must share a clock.
func WithClock(c Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithShards sets the number of shards of the keyed store, a power of two
// (default 64). More shards mean less lock contention across cores.
func WithShards(n int) Option { return func(cfg *config) { cfg.shards = n } }

// WithMaxKeys caps the number of keys the store holds (default 0: no cap).
// When a new key arrives at the cap, the store drops a key at rest if it
// finds one near its clock hand (losslessly), else a key chosen by CLOCK,
// an approximation of least recently used: the first the hand comes to
// that was not used since the hand last passed it (lossy: that key starts
// afresh, with a full allowance). Stats counts both. A new key at the cap
// costs a small multiple of what it costs below it, whatever the cap.
// With a cap, the store uses at most max(1, n/16) shards, and at least
// n/8192 (up to 65,536) whatever WithShards says, so that no shard holds
// more than 8,192 keys; each holds at most its share, so the total never
// exceeds n.
func WithMaxKeys(n int) Option { return func(cfg *config) { cfg.maxKeys = n } }

// WithSweepInterval starts a goroutine that drops every key at rest each
// interval and gives memory back; Close stops it. Without it (the default)
// keys at rest are dropped lazily as new keys arrive, and by Sweep.
func WithSweepInterval(d time.Duration) Option { return func(cfg *config) { cfg.sweepInterval = d } }

// WithExempt exempts subjects from every rule of a Rules built by NewRules
// or ParseRules, as an "exempt" line of the rule syntax does: each subject
// is an address ("192.0.2.7"), a CIDR prefix ("10.0.0.0/8") or "user" and
// a user id ("user healthcheck"). The exemptions stay through Reload and
// Replace, added to those the configuration states. A limiter given this
// option refuses it (ErrInvalidOption): a limiter has no subjects, and an
// exemption it ignored would limit what its author meant to let through.
func WithExempt(subjects ...string) Option {
	return func(cfg *config) { cfg.exempt = append(cfg.exempt[:len(cfg.exempt):len(cfg.exempt)], subjects...) }
}

// withoutExempt drops the exemptions given so far: the rules keep them and
// build their limiters without.
func withoutExempt(c *config) { c.exempt = nil }
