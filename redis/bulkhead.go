package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// ErrLeaseLost means a Bulkhead lease had expired (or was never granted by
// Redis) when its holder tried to extend it: its place may have been given
// to another caller.
var ErrLeaseLost = errors.New("ratelimit: bulkhead lease lost")

// Bulkhead is a bulkhead per key on Redis: at most limit calls in flight
// for each key across every instance that uses the same Redis and prefix.
// Each call in flight holds a lease that expires after the lease duration
// unless extended, so the place of a holder that dies without releasing
// comes back on its own.
//
// Each key is a sorted set of lease ids scored by their expiry in server
// milliseconds (exact in Lua's doubles), with a TTL ending with its last
// lease. A call is one round trip: the script drops expired leases, then
// grants, releases or extends. Expiry is measured on the server's clock
// (TIME), to the millisecond: a lease lasts at least its duration and at
// most 1 ms more.
//
// Unlike ratelimit.Bulkhead, waiters are not queued: Acquire asks again
// every poll interval (WithPollInterval, default 10 ms), so a waiter may be
// overtaken by a later caller; there is no bound on waiters. Failures
// follow the failure policy: FailOpen grants a lease that holds nothing,
// FailClosed refuses with an error matching ErrUnavailable, and FailLocal
// (the default) takes a place in a ratelimit.KeyedBulkhead of the same
// limit kept by this instance, counting the unexpired leases Redis granted
// this instance: across a failure, one instance never holds more than
// limit places (n instances may then hold up to n × limit). A TryAcquire that times out after Redis
// granted the lease leaves that lease to expire on its own. Options about
// decisions (WithDenyCache, WithLocalOptions) do not apply.
//
// Build it with NewBulkhead. It is safe for concurrent use. Most callers
// want Do.
type Bulkhead struct {
	caller
	limit int
	lease time.Duration
	local *ratelimit.KeyedBulkhead // FailLocal only

	mu     sync.Mutex
	leases map[string]map[*Lease]int64 // FailLocal: granted by Redis, to their local expiry
}

// Lease is a place in a Bulkhead, held until Release or until it expires.
// Its methods are safe for concurrent use; Release acts at most once.
type Lease struct {
	b     *Bulkhead
	key   string
	id    string // "" when Redis granted nothing (FailOpen or FailLocal)
	local bool   // held in the FailLocal bulkhead
	done  atomic.Bool
}

// NewBulkhead returns a bulkhead per key on Redis that lets at most limit
// calls for a key be in flight at once, each holding a lease that expires
// after lease unless extended. It returns an error matching
// ratelimit.ErrInvalidCapacity if limit is not positive, and
// ratelimit.ErrInvalidOption if lease is under 1 ms or over 35 days, for a
// nil client or a bad option.
func NewBulkhead(client Client, limit int, lease time.Duration, opts ...Option) (*Bulkhead, error) {
	if limit <= 0 || limit > 1<<31-1 {
		return nil, fmt.Errorf("%w: bulkhead limit must be in [1, 2^31-1], got %d", ratelimit.ErrInvalidCapacity, limit)
	}
	if lease < time.Millisecond || lease > maxSpan {
		return nil, fmt.Errorf("%w: lease must be in [1ms, %v], got %v", ratelimit.ErrInvalidOption, maxSpan, lease)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.lease != 0 {
		return nil, fmt.Errorf("%w: a bulkhead counts calls in flight, not events", ErrLeaseUnsupported)
	}
	c, err := newCaller(client, bhScript, []string{":bh"}, cfg)
	if err != nil {
		return nil, err
	}
	b := &Bulkhead{caller: c, limit: limit, lease: lease}
	if cfg.policy == FailLocal {
		if b.local, err = ratelimit.NewKeyedBulkhead(limit); err != nil {
			return nil, err
		}
		b.leases = map[string]map[*Lease]int64{}
	}
	return b, nil
}

// Limit returns the most calls a key may have in flight.
func (b *Bulkhead) Limit() int { return b.limit }

// TryAcquire takes a place for key if one is free now, in one round trip,
// and returns its lease. If the key is full it returns
// ratelimit.ErrBulkheadFull, and ctx.Err() if ctx ends first. When Redis
// fails, the failure policy answers (see Bulkhead).
func (b *Bulkhead) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var raw [12]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	v, err := b.eval(ctx, key, b.args("a", id, b.cfg.clock.Now()))
	if err == nil {
		var granted int64
		if granted, err = firstInt(v); err == nil {
			if granted == 0 {
				return nil, ratelimit.ErrBulkheadFull
			}
			l := &Lease{b: b, key: key, id: id}
			b.granted(l, true)
			return l, nil
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	b.fail(key, err)
	switch b.cfg.policy {
	case FailOpen:
		return &Lease{b: b, key: key}, nil
	case FailClosed:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	b.mu.Lock()
	ok := b.liveLocked(key)+b.local.InFlight(key) < b.limit && b.local.TryAcquire(key)
	b.mu.Unlock()
	if !ok {
		return nil, ratelimit.ErrBulkheadFull
	}
	return &Lease{b: b, key: key, local: true}, nil
}

// granted records (held) or forgets a lease Redis granted this instance,
// under FailLocal: the local bulkhead counts them when Redis fails, so
// that the instance never holds more than limit places across the failure.
// A lease counts until its expiry on the local clock.
func (b *Bulkhead) granted(l *Lease, held bool) {
	if b.local == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.leases[l.key]
	if !held {
		delete(m, l)
		if len(m) == 0 {
			delete(b.leases, l.key)
		}
		return
	}
	if m == nil {
		m = map[*Lease]int64{}
		b.leases[l.key] = m
	}
	m[l] = b.cfg.clock.Now().UnixNano() + int64(b.lease)
}

// liveLocked returns how many of the leases Redis granted this instance
// for key have not expired on the local clock, forgetting those that
// have. It requires b.mu held.
func (b *Bulkhead) liveLocked(key string) int {
	m := b.leases[key]
	now := b.cfg.clock.Now().UnixNano()
	for l, until := range m {
		if until <= now {
			delete(m, l)
		}
	}
	if len(m) == 0 {
		delete(b.leases, key)
	}
	return len(m)
}

// Acquire takes a place for key, asking again every poll interval while
// the key is full, until ctx ends; it then returns ctx.Err(), holding
// nothing. Errors other than a full key end it at once.
func (b *Bulkhead) Acquire(ctx context.Context, key string) (*Lease, error) {
	for {
		l, err := b.TryAcquire(ctx, key)
		if !errors.Is(err, ratelimit.ErrBulkheadFull) {
			return l, err
		}
		t := b.cfg.clock.NewTimer(b.cfg.poll)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// Do runs fn holding a place for key: Acquire, fn, Release. It returns
// Acquire's error without calling fn, else fn's error. fn must not be nil.
func (b *Bulkhead) Do(ctx context.Context, key string, fn func(context.Context) error) error {
	if fn == nil {
		panic("ratelimit: Bulkhead.Do with nil function")
	}
	l, err := b.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer l.Release()
	return fn(ctx)
}

// InFlight returns the number of unexpired leases of key on Redis.
func (b *Bulkhead) InFlight(ctx context.Context, key string) (int, error) {
	v, err := b.eval(ctx, key, b.args("c", "", b.cfg.clock.Now()))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	n, err := firstInt(v)
	return int(n), err
}

// Release gives the place back, in one round trip. Releasing twice does
// nothing. If Redis cannot be reached, the OnError hook hears of it and
// the lease expires on its own.
func (l *Lease) Release() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	switch {
	case l.local:
		l.b.local.Release(l.key)
	case l.id != "":
		l.b.granted(l, false)
		if _, err := l.b.eval(context.Background(), l.key, l.b.args("r", l.id, l.b.cfg.clock.Now())); err != nil {
			l.b.fail(l.key, err)
		}
	}
}

// Extend renews the lease for the lease duration from now, in one round
// trip. It returns ErrLeaseLost if the lease has expired or been released,
// and an error matching ErrUnavailable if Redis fails. A lease that Redis
// did not grant (under FailOpen or FailLocal) extends trivially.
func (l *Lease) Extend(ctx context.Context) error {
	if l.done.Load() {
		return ErrLeaseLost
	}
	if l.id == "" {
		return nil
	}
	v, err := l.b.eval(ctx, l.key, l.b.args("e", l.id, l.b.cfg.clock.Now()))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if ok, err := firstInt(v); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	} else if ok == 0 {
		l.b.granted(l, false)
		return ErrLeaseLost
	}
	l.b.granted(l, true)
	return nil
}

// args are the script's: op, now, pad, 0, 0, then (ARGV[6..]) the lease
// id, the lease in ms and the limit.
func (b *Bulkhead) args(op, id string, now time.Time) []any {
	args := []any{op, "", b.cfg.ttlPadMs, 0, 0, id, b.lease.Milliseconds(), b.limit}
	if b.cfg.clockTime {
		args[1] = strconv.FormatInt(now.UnixNano(), 10)
	}
	return args
}

func firstInt(v any) (int64, error) {
	if vs, ok := v.([]any); ok && len(vs) > 0 {
		if n, ok := vs[0].(int64); ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("unexpected script reply %#v", v)
}

// bhScript keeps a key's leases in a sorted set scored by expiry, in
// server milliseconds. It answers {granted or released or extended (1/0),
// leases held}.
var bhScript = script{body: `
local id, lease, limit = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
-- A lease taken at now expires at ceil(now) + lease (in ms), and has
-- expired once floor(now) reaches that: it lasts at least lease, at most
-- 1 ms more.
local now_ms = now_s * 1000 + math.floor(now_ns / 1000000)
local until_ms = now_s * 1000 + math.ceil(now_ns / 1000000) + lease
redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
-- last sets the key to expire with its last lease.
local function last()
  local l = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if not l[2] then return end
  if ARGV[2] == '' then
    redis.call('PEXPIREAT', key, tonumber(l[2]))
  else
    redis.call('PEXPIRE', key, tonumber(l[2]) - now_ms + pad)
  end
end
local held = redis.call('ZCARD', key)
if op == 'a' then
  if held >= limit then return {0, held} end
  redis.call('ZADD', key, until_ms, id)
  last()
  return {1, held + 1}
elseif op == 'r' then
  local r = redis.call('ZREM', key, id)
  last()
  return {r, held - r}
elseif op == 'e' then
  if not redis.call('ZSCORE', key, id) then return {0, held} end
  redis.call('ZADD', key, 'XX', until_ms, id)
  last()
  return {1, held}
end
return {held, held}
`}
