package redis

import (
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// LeakyMeter is ratelimit.LeakyMeter on Redis: per key, a bucket of
// capacity C whose level rises by each event admitted and leaks at rate r,
// admitting n events iff the level plus n fits in C, shared by every
// limiter instance that uses the same Redis, prefix and parameters. The
// meter is the token bucket under another name (see ratelimit.LeakyMeter):
// it runs TokenBucket's script, so its decisions, Reserve, Cancel, Take
// and Settle, SetRate, overrides and their limits (capacity/rate at most
// 35 days, a rate's count at most 2^52, bookings at most 30 days ahead)
// are TokenBucket's on Redis, to the nanosecond, on the Redis server's
// clock.
//
// Its keys end in ":lm", apart from a TokenBucket's (":tb") under the same
// prefix. Each holds the instant at which the bucket is empty again as
// "<Unix ns> <numerator>", with a TTL ending at most 2 ms after it.
//
// Build it with NewLeakyMeter. It is safe for concurrent use. Most callers
// want Allow.
type LeakyMeter struct {
	limiter
}

var (
	_ ratelimit.Limiter = (*LeakyMeter)(nil)
	_ ratelimit.Taker   = (*LeakyMeter)(nil)
)

// NewLeakyMeter returns a leaky bucket per key on Redis used as a meter: a
// bucket of capacity events leaking at rate. Its errors are
// NewTokenBucket's; like it, it sends nothing to Redis.
func NewLeakyMeter(client Client, rate ratelimit.Rate, capacity int, opts ...Option) (*LeakyMeter, error) {
	a, err := newTBAlgo(rate, capacity)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	a.name(newNonce(), 0)
	l, err := newLimiter(client, tbScript, []string{":lm"}, a, cfg, func(o ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyMeter(rate, capacity, o...)
	})
	if err != nil {
		return nil, err
	}
	a.ghosts = &l.ov.ghosts
	return &LeakyMeter{l}, nil
}

// SetRate changes the leak rate and capacity for every key, from each
// key's next decision on, with the rules and errors of
// TokenBucket.SetRate on Redis (each key keeps the room it had left,
// capped at the new capacity). Every instance sharing the keys must make
// the change. Under FailLocal the local limiter changes too.
func (lm *LeakyMeter) SetRate(rate ratelimit.Rate, capacity int) error {
	return lm.setRate(func(old algorithm, now time.Time) (algorithm, error) {
		a, err := newTBAlgo(rate, capacity)
		if err != nil {
			return nil, err
		}
		a.succeed(old.(*tbAlgo), now, maxHist)
		return a, nil
	}, func(l ratelimit.Limiter) error {
		return l.(interface {
			SetRate(ratelimit.Rate, int) error
		}).SetRate(rate, capacity)
	})
}

// SetOverride gives key a leak rate and capacity of its own, with the
// rules of TokenBucket.SetOverride on Redis.
func (lm *LeakyMeter) SetOverride(key string, rate ratelimit.Rate, capacity int) error {
	a, err := newTBAlgo(rate, capacity)
	if err != nil {
		return err
	}
	lm.setOverride(key, func(from algorithm, now time.Time) algorithm {
		a.succeed(from.(*tbAlgo), now, maxHist)
		return a
	}, rate, capacity, setLocalOverride(key, rate, capacity))
	return nil
}

// Override returns key's override, if it has one.
func (lm *LeakyMeter) Override(key string) (rate ratelimit.Rate, capacity int, ok bool) {
	return lm.override(key)
}
