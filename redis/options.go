package redis

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// FailurePolicy says what a limiter answers when Redis cannot: it is
// unreachable, answers with an error, or does not answer within the call
// timeout.
type FailurePolicy int

const (
	// FailLocal answers from an in-memory limiter of the same kind and
	// parameters, kept by each limiter instance, which also records what
	// Redis booked for this instance: while Redis is down, each service
	// instance enforces the limit on its own, starting from what it has
	// consumed, so one instance never gets more than the limit across the
	// failure and n instances together up to n times the limit. For as
	// long as a key takes to come to rest after a failure, AllowN allows
	// only what Redis and the local limiter both allow (Redis may have
	// come back without its state). It is the default: neither unlimited
	// nor an outage.
	FailLocal FailurePolicy = iota
	// FailOpen allows every request while Redis is down, answering as for
	// a key without history (Remaining Limit-n, no delays).
	FailOpen
	// FailClosed refuses every request while Redis is down: AllowN,
	// Reserve and WaitN return an error matching ErrUnavailable, Allow
	// false.
	FailClosed
)

// String returns the policy's name, as in Go source.
func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "FailLocal"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// An Option configures a limiter built by one of the New… constructors.
type Option func(*config)

// config holds every option with its default, in one place.
type config struct {
	prefix    string        // default: "ratelimit:"
	timeout   time.Duration // default: 100 ms
	policy    FailurePolicy // default: FailLocal
	onError   func(key string, err error)
	clock     ratelimit.Clock    // default: ratelimit.SystemClock()
	localOpts []ratelimit.Option // default: a cap of defaultLocalKeys
	denyKeys  int                // default: 0, no deny-cache
	poll      time.Duration      // default: 10 ms (Bulkhead only)
	lease     float64            // default: 0, no leases (see WithLease); -1: invalid
	leaseObs  ratelimit.Observer // default: nil

	// Coalescing (see coalesce.go): on by default.
	coalesce                  bool // default: true
	maxBatch, maxBytes, depth int  // defaults: defaultMaxBatch, ...

	observer ratelimit.Observer // default: none (see observe.go)
	name     string

	// Test only: pass the clock's time to the scripts instead of using
	// the server's TIME, and pad TTLs by this many milliseconds (the
	// test's clock and the server's real clock run at different speeds).
	clockTime bool
	ttlPadMs  int64
	// Test only: every call goes through the batch script, a batch of one
	// when nothing else queues.
	batchAlways bool

	// WithPenalty (see penalty.go).
	penSet              bool
	penAfter            int
	penWithin, penBlock time.Duration
}

const (
	defaultPrefix    = "ratelimit:"
	defaultTimeout   = 100 * time.Millisecond
	defaultLocalKeys = 1 << 16
	defaultPoll      = 10 * time.Millisecond
)

func newConfig(opts []Option) (config, error) {
	c := config{
		prefix:    defaultPrefix,
		timeout:   defaultTimeout,
		policy:    FailLocal,
		clock:     ratelimit.SystemClock(),
		localOpts: []ratelimit.Option{ratelimit.WithMaxKeys(defaultLocalKeys)},
		poll:      defaultPoll,
		coalesce:  true,
		maxBatch:  defaultMaxBatch,
		maxBytes:  defaultMaxBytes,
		depth:     defaultDepth,
	}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.timeout <= 0:
		return c, fmt.Errorf("%w: timeout must be positive, got %v", ratelimit.ErrInvalidOption, c.timeout)
	case c.policy < FailLocal || c.policy > FailClosed:
		return c, fmt.Errorf("%w: unknown failure policy %v", ratelimit.ErrInvalidOption, c.policy)
	case c.clock == nil:
		return c, fmt.Errorf("%w: nil clock", ratelimit.ErrInvalidOption)
	case c.denyKeys < 0:
		return c, fmt.Errorf("%w: deny-cache size must not be negative, got %d", ratelimit.ErrInvalidOption, c.denyKeys)
	case strings.ContainsAny(c.prefix, "{}"):
		// Redis Cluster hashes the first {…} of a key: braces in the
		// prefix would put every key in one slot ("tenant{42}:"), or
		// split one decision's keys over slots ("x{}:"), failing it.
		return c, fmt.Errorf("%w: prefix %q holds a brace, which would take over the keys' Redis Cluster hash tag", ratelimit.ErrInvalidOption, c.prefix)
	case c.poll <= 0:
		return c, fmt.Errorf("%w: poll interval must be positive, got %v", ratelimit.ErrInvalidOption, c.poll)
	case c.maxBatch < 1 || c.maxBytes < 1 || c.depth < 1:
		return c, fmt.Errorf("%w: coalescing limits must be positive, got batch %d, bytes %d, depth %d",
			ratelimit.ErrInvalidOption, c.maxBatch, c.maxBytes, c.depth)
	}
	if err := penaltyCheck(&c); err != nil {
		return c, err
	}
	return c, nil
}

// WithPrefix sets the prefix of every Redis key the limiter writes
// (default "ratelimit:"). Limiters with different parameters must not share
// a prefix: they would read each other's state. Keys of different
// algorithms never collide, as each algorithm adds its own suffix. The
// prefix must not hold '{' or '}': the key's hash tag follows it (see the
// package doc), and the constructors refuse such a prefix with an error
// matching ratelimit.ErrInvalidOption.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTimeout bounds each call to Redis (default 100 ms); past it the
// failure policy answers. A caller's context with an earlier deadline
// bounds the call sooner, and then its error is returned instead.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithFailurePolicy sets what the limiter answers when Redis cannot
// (default FailLocal).
func WithFailurePolicy(p FailurePolicy) Option { return func(c *config) { c.policy = p } }

// WithOnError sets a function called with the key and the error each time
// a call to Redis fails and the failure policy answers instead (the error
// matches ErrUnavailable and wraps the cause), and each time a key held a
// value the limiter could not have written and was started afresh
// (ErrCorruptState; the decision is then Redis's). It is for logging and
// metrics: it runs on the caller's goroutine and must not block. Keys may
// be personal data (client IPs): take care what you log.
func WithOnError(f func(key string, err error)) Option { return func(c *config) { c.onError = f } }

// WithClock sets the clock the Go side uses (default the system clock): for
// Wait's timers, Reservation delays, the deny-cache and the FailLocal
// limiter. Decisions themselves use the Redis server's clock.
func WithClock(clk ratelimit.Clock) Option { return func(c *config) { c.clock = clk } }

// WithLocalOptions sets the options of the in-memory limiter that answers
// under FailLocal (default: ratelimit.WithMaxKeys(65536)). The limiter's
// clock is always the one set by WithClock.
func WithLocalOptions(opts ...ratelimit.Option) Option {
	return func(c *config) { c.localOpts = append([]ratelimit.Option(nil), opts...) }
}

// WithDenyCache turns on a local deny-cache of up to size keys (default 0:
// off). When Redis denies n events for a key with RetryAfter R, later
// AllowN calls on this limiter for that key with n or more events are
// denied locally, without a round trip, until R has passed on the local
// clock. It protects Redis from a flood of requests that will be denied
// anyway, and changes answers in three ways:
//
//   - the deny lasts R from when the reply arrived, so up to one round trip
//     longer than on the server's clock;
//   - events given back meanwhile (Reservation.Cancel on another instance)
//     are not seen until R has passed;
//   - locally denied decisions carry Remaining 0, the remaining RetryAfter
//     and the ResetAfter last seen, counted down.
//
// Allow(key) is AllowN with n = 1. Reserve, Wait and peeks (n = 0) always
// ask Redis. When the cache is full, new denials are not cached until
// entries expire.
func WithDenyCache(size int) Option { return func(c *config) { c.denyKeys = size } }

// WithPollInterval sets how often Bulkhead.Acquire asks Redis again while
// the key is full (default 10 ms). The limiters ignore it.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// withClockTime makes the scripts read the limiter's clock, passed with
// each call, instead of the server's TIME. It is test only: it lets the
// same table of (time, key, n) → decision run bit for bit against Redis and
// the in-memory limiters. TTLs are padded by padMs, since the test's clock
// and the server's real clock do not run together.
func withClockTime(padMs int64) Option {
	return func(c *config) { c.clockTime, c.ttlPadMs = true, padMs }
}

// withBatchAlways makes every call of a limiter go through the batch form
// of its script (test only), so that serial traces check it.
func withBatchAlways() Option { return func(c *config) { c.batchAlways = true } }
