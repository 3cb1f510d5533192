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
