package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// ErrUnavailable matches the errors of calls to Redis that failed (the
// server unreachable, an error reply, no answer within the timeout). They
// reach the OnError hook, and under FailClosed the caller of AllowN,
// Reserve and WaitN; under the other policies the policy answers instead.
var ErrUnavailable = errors.New("ratelimit: redis unavailable")

// ErrCorruptState is what the OnError hook hears when a key held a value
// the limiter could not have written (another program's, of another type,
// or a state further ahead than the algorithm ever books): the script
// treated the key as new and replaced the value, and the decision is
// Redis's.
var ErrCorruptState = errors.New("ratelimit: redis key held a value the limiter did not write; started afresh")

// Client is what the limiters need of a Redis client: *goredis.Client,
// *goredis.ClusterClient, *goredis.Ring and goredis.UniversalClient all
// implement it.
type Client = goredis.Scripter

// algorithm is what each limiter type adds to the shared machinery: its
// script, its parameters, and how to read a step's reply.
type algorithm interface {
	// args appends the script's parameters (ARGV[6] on) for n events;
	// local is the limiter's clock in Unix ns, a reference point near the
	// server's time (see FixedWindow).
	args(dst []any, n, local int64) []any
	// decision builds the Decision of a step's reply for n events.
	decision(r reply, n int64) ratelimit.Decision
	// span is at least how long a key takes to come to rest, in ns: how
	// long events booked on Redis may still count against the limit.
	span() int64
	// period is how long an empty allowance takes to refill, in ns.
	period() int64
	// max is the most events one call may ask for.
	max() int
	// debt bounds a debt of e events to what the script computes with
	// exactly: no less than what reaches its cap (see limiter.settle).
	debt(e int) int
}

// restater is implemented by an algorithm whose script may answer that a
// key's state was written by this limiter under earlier parameters whose
// history it needs (the token bucket): restate re-expresses the state's
// value v in the algorithm's parameters at the server's instant now, sent
// is the limiter's clock reading the call was made at (the change instants
// are placed on the server's clock by their age on the local one). It
// returns the replacement value, as the script reads it.
type restater interface {
	restate(v string, now int64, sent time.Time) (string, error)
}

// setting is a limiter's parameters, swapped whole by SetRate: a call
// loads it once and uses it throughout.
type setting struct {
	alg algorithm
	// An override's rate and capacity (see SetOverride), as given.
	rate     ratelimit.Rate
	capacity int
}

// reply is what every script's step returns:
// {status, allowed, a, b, retryAfter, resetAfter[, token]}.
// status is 1 if the step booked, plus 2 if the key held a corrupt value
// (replaced), or 4 alone if the key's state was written by this limiter
// under earlier parameters and the script needs it re-expressed (a and b
// are then the server's time in s and ns, token the state's value); a and b are algorithm-specific (what Remaining is computed
// from); the durations are in ns, and retryAfter is also the delay of a
// booking; token, for bookings only,
// is what Cancel sends back (the booked instant, and for the token bucket
// the TAT the booking left).
type reply struct {
	ok, allowed, corrupt, stale bool
	blocked, began, ended       bool // a penalty box's flags (see WithPenalty)
	a, b                        int64
	retry, reset                int64
	token                       string
}

func parseReply(v any) (reply, error) {
	vs, ok := v.([]any)
	if !ok || len(vs) < 6 || len(vs) > 7 {
		return reply{}, fmt.Errorf("unexpected script reply %#v", v)
	}
	var ns [6]int64
	for i := range ns {
		x, ok := vs[i].(int64)
		if !ok {
			return reply{}, fmt.Errorf("unexpected script reply %#v", v)
		}
		ns[i] = x
	}
	r := reply{ok: ns[0]&1 == 1, corrupt: ns[0]&2 != 0, stale: ns[0]&4 != 0, blocked: ns[0]&8 != 0, began: ns[0]&16 != 0, ended: ns[0]&32 != 0,
		allowed: ns[1] == 1, a: ns[2], b: ns[3],
		retry: ns[4], reset: ns[5]}
	if len(vs) == 7 {
		if r.token, ok = vs[6].(string); !ok {
			return reply{}, fmt.Errorf("unexpected script reply %#v", v)
		}
	}
	return r, nil
}

// Boxed once: arguments most calls send, which would otherwise be
// allocated anew at each call.
var (
	boxedMinus1 any = int64(-1)
	boxedZero   any = int64(0)
)

// caller runs one script on a key's Redis keys, within the call timeout:
// by FCALL of the library's function, or by EVALSHA and EVAL.
type caller struct {
	client Client
	direct bool // the client bounds its I/O by the context's deadline
	fns    functions
	script *goredis.Script
	suffix []string // of each Redis key of a call: KEYS[1], KEYS[2], ...
	cfg    config
	pad    any      // cfg.ttlPadMs, boxed
	batch  *batcher // nil: coalescing off (see coalesce.go)
	pen    []any    // WithPenalty's arguments (ARGV[6..8]); nil without
}

func newCaller(client Client, s script, suffix []string, cfg config) (caller, error) {
	if isNil(client) {
		return caller{}, fmt.Errorf("%w: nil redis client", ratelimit.ErrInvalidOption)
	}
	c := caller{
		client: client,
		direct: honoursContext(client),
		fns:    newFunctions(client, s.name),
		script: goredis.NewScript(s.evalSource()),
		suffix: suffix,
		cfg:    cfg,
		pad:    cfg.ttlPadMs,
	}
	if cfg.penSet {
		c.pen = []any{cfg.penAfter, int64(cfg.penWithin), int64(cfg.penBlock)}
	}
	if cfg.coalesce && s.name != "" { // the scripts of the library have a batch form
		c.batch = newBatcher(c, s)
	}
	return c, nil
}

// limiter is the machinery every algorithm type shares: it implements
// ratelimit.Limiter over one script.
type limiter struct {
	caller
	cur   *atomic.Pointer[setting]
	local ratelimit.Limiter // FailLocal only
	deny  *denyCache        // nil: off
	// recover is, under FailLocal, the local clock's Unix ns until which
	// an event Redis allows must also conform locally: a span after the
	// last failure, as Redis may have come back without the state (a
	// restart, a failover to a replica that lagged).
	recover *atomic.Int64
	// epoch counts the rate changes this limiter made, twice each: odd
	// while one is under way; resets counts its Resets the same way, in
	// one of resetSlots counters chosen by a hash of the key. A Cancel or
	// Settle gives back only a booking made with neither a change nor a
	// Reset of its key's slot under way or since, as the in-memory
	// limiters do (which track Resets per key: a Reset of another key in
	// the same slot also stops a give-back here, erring on the safe side).
	epoch  *atomic.Uint64
	resets *[resetSlots]atomic.Uint64
	mu     *sync.Mutex // serialises rate changes and overrides
	ov     *overrides
	lease  *leaser // nil without WithLease
}

// resetSlots is how many counters of Resets a limiter keeps (8 bytes each).
const resetSlots = 1024

// stamp is what a booking records of the limiter's changes and of its
// key's Resets, read before it is sent.
type stamp struct{ epoch, resets uint64 }

// slot returns the counter of Resets of key.
func (l *limiter) slot(key string) *atomic.Uint64 {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &l.resets[h%resetSlots]
}

// stampOf reads the stamp of a booking on key about to be made.
func (l *limiter) stampOf(key string) stamp {
	return stamp{l.epoch.Load(), l.slot(key).Load()}
}

// current reports whether nothing that voids a booking stamped st has
// happened since, nor was under way then.
func (l *limiter) current(key string, st stamp) bool {
	return st.epoch&1 == 0 && st.resets&1 == 0 && l.epoch.Load() == st.epoch && l.slot(key).Load() == st.resets
}

func newLimiter(client Client, src script, suffix []string, alg algorithm, cfg config,
	newLocal func(opts ...ratelimit.Option) (ratelimit.Limiter, error)) (limiter, error) {
	if cfg.penSet {
		src = penaltyScript(src)
		suffix = append(suffix[:len(suffix):len(suffix)], suffix[0]+":blk")
	}
	c, err := newCaller(client, src, suffix, cfg)
	if err != nil {
		return limiter{}, err
	}
	l := limiter{caller: c, cur: new(atomic.Pointer[setting]), recover: new(atomic.Int64),
		epoch: new(atomic.Uint64), resets: new([resetSlots]atomic.Uint64), mu: new(sync.Mutex), ov: new(overrides)}
	l.cur.Store(&setting{alg: alg})
	if cfg.policy == FailLocal {
		opts := append(cfg.localOpts[:len(cfg.localOpts):len(cfg.localOpts)], ratelimit.WithClock(cfg.clock))
		local, err := newLocal(opts...)
		if err != nil {
			return limiter{}, err
		}
		l.local = local
	}
	if cfg.denyKeys > 0 {
		l.deny = newDenyCache(cfg.denyKeys)
	}
	if cfg.lease != 0 {
		if l.lease, err = newLeaser(l, src.name); err != nil {
			return limiter{}, err
		}
	}
	return l, nil
}

// isNil reports whether c is nil or a nil pointer of a go-redis client.
func isNil(c Client) bool {
	switch c := c.(type) {
	case nil:
		return true
	case *goredis.Client:
		return c == nil
	case *goredis.ClusterClient:
		return c == nil
	case *goredis.Ring:
		return c == nil
	}
	return false
}

// honoursContext reports whether c bounds its socket I/O by the context's
// deadline (go-redis does only with ContextTimeoutEnabled). Otherwise each
// call runs on a helper goroutine that the caller stops waiting for at the
// timeout.
func honoursContext(c Client) bool {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// Limit returns the most events the limiter allows a key at once, under
// its parameters now.
func (l *limiter) Limit() int { return l.cur.Load().alg.max() }

// Window returns how long a key's allowance takes to come back from empty
// to full if nothing more is consumed, as the in-memory limiter of the
// same kind says (httplimit's RateLimit-Policy w).
func (l *limiter) Window() time.Duration { return time.Duration(l.cur.Load().alg.period()) }

// Allow reports whether one event for key may happen now, and records it
// if so. When Redis fails it returns the failure policy's answer (false
// under FailClosed).
func (l *limiter) Allow(key string) bool {
	if l.lease != nil {
		return l.lease.allow(key)
	}
	d, err := l.AllowN(context.Background(), key, 1)
	return err == nil && d.Allowed
}

// AllowN reports whether n events for key may happen now, all or nothing,
// and records them if so, in one round trip. n == 0 peeks and writes
// nothing. It returns ctx.Err() if ctx ends before Redis answers. When
// Redis fails, the failure policy answers (see FailurePolicy): FailLocal
// with the local limiter's Decision, FailOpen with the Decision a key
// without history would get (allowed, Remaining Limit-n, no delays), and
// FailClosed with an error matching ErrUnavailable, so that a caller (such
// as httplimit's middleware) can tell an outage from a denial.
func (l *limiter) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if l.lease != nil {
		return l.lease.allowN(ctx, key, n)
	}
	p := l.params(key)
	if err := validN(p, n); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if l.deny != nil && n > 0 {
		if d, ok := l.deny.lookup(key, n, l.cfg.clock.Now()); ok {
			return d, nil
		}
	}
	// Just after a failure, the local limiter must allow too.
	var held *ratelimit.Reservation
	if l.local != nil && n > 0 && l.cfg.clock.Now().UnixNano() < l.recover.Load() {
		res, err := l.local.Reserve(ctx, key, n)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		if !res.OK() || res.Delay() > 0 {
			giveBack(res)
			d := res.Decision()
			d.Allowed = false
			return d, nil
		}
		held = res
	}
	r, _, err := l.step(ctx, p, key, n, 0, "s")
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			if held != nil {
				giveBack(held)
			}
			return ratelimit.Decision{}, cerr
		}
		l.fail(key, err)
		switch l.cfg.policy {
		case FailOpen:
			return ratelimit.Decision{Allowed: true, Limit: p.alg.max(), Remaining: p.alg.max() - n}, nil
		case FailClosed:
			return ratelimit.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if held != nil {
			return held.Decision(), nil
		}
		return l.local.AllowN(ctx, key, n)
	}
	d := l.decide(p, r, int64(n))
	switch {
	case held != nil && !r.ok:
		giveBack(held)
	case held == nil && l.local != nil && r.ok && n > 0:
		l.mirror(key, n)
	}
	if l.deny != nil && !d.Allowed && n > 0 {
		l.deny.add(key, n, l.cfg.clock.Now(), d)
	}
	return d, nil
}

// mirror records in the FailLocal limiter n events Redis booked for key,
// so that if Redis fails the local limiter starts from what this instance
// has consumed, not from a full allowance: one instance then never gets
// more than its limit across the failover. The local limiter books them
// even if it would not allow them now (it never refuses what Redis
// booked). It returns the local booking.
//
// For a span after a failure (as long as a key takes to come to rest),
// AllowN also asks the local limiter first and allows only what both
// allow: a Redis that came back without its state (restarted without
// persistence, or a replica promoted before it had the latest writes)
// would otherwise give this instance a full allowance again.
func (l *limiter) mirror(key string, n int) *ratelimit.Reservation {
	res, err := l.local.Reserve(context.Background(), key, n)
	if err != nil || !res.OK() {
		return nil
	}
	return res
}

// Reserve books n events for key at the earliest time they conform, in
// one round trip, and returns the booking; Cancel gives it back (one more
// round trip) if it is not yet due on the server's clock. Bookings more
// than the limiter's horizon ahead (see the type's doc) are refused: the
// Reservation is not OK. It returns ctx.Err() if ctx ends before Redis
// answers. When Redis fails: under FailOpen an OK reservation with no
// delay, under FailClosed an error matching ErrUnavailable, under
// FailLocal the local limiter's.
func (l *limiter) Reserve(ctx context.Context, key string, n int) (*ratelimit.Reservation, error) {
	st := l.stampOf(key)
	p := l.params(key)
	if err := validN(p, n); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, local, err := l.step(ctx, p, key, n, -1, "r")
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		l.fail(key, err)
		switch l.cfg.policy {
		case FailOpen:
			return l.openReservation(p, n), nil
		case FailClosed:
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return l.local.Reserve(ctx, key, n)
	}
	return l.reservation(p, key, n, &r, local, st, nil), nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen, and records them. The
// rules are the in-memory limiters': if ctx is already done it returns
// ctx.Err() and books nothing; if the needed delay would pass ctx's
// deadline (measured on the time package's clock, as a deadline is an
// instant of real time, before the round trip) it
// fails at once, booking nothing, with a *ratelimit.LimitError matching
// ratelimit.ErrLimited and context.DeadlineExceeded (a refusal for another
// reason, such as a full leaky-bucket queue that frees in time, matches
// only ratelimit.ErrLimited); if ctx ends during the
// wait, the booking is given back and ctx.Err() returned. When Redis fails:
// FailOpen returns nil at once, FailClosed an error matching
// ErrUnavailable, FailLocal waits on the local limiter.
func (l *limiter) WaitN(ctx context.Context, key string, n int) error {
	st := l.stampOf(key)
	p := l.params(key)
	if err := validN(p, n); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n == 0 {
		return l.waitNone(ctx, p, key)
	}
	var maxWait int64 = -1
	if dl, ok := ctx.Deadline(); ok {
		// A deadline is an instant of real time, whatever our clock.
		maxWait = max(int64(time.Until(dl)), 0)
	}
	r, local, err := l.step(ctx, p, key, n, maxWait, "r")
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		l.fail(key, err)
		switch l.cfg.policy {
		case FailOpen:
			return nil
		case FailClosed:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return l.local.WaitN(ctx, key, n)
	}
	res := l.reservation(p, key, n, &r, local, st, nil)
	if !res.OK() {
		// The deadline caused the refusal only if the events could not
		// conform within it (not, say, a full leaky-bucket queue that
		// frees in time).
		retry := res.Decision().RetryAfter
		return &ratelimit.LimitError{RetryAfter: retry, Deadline: !r.blocked && maxWait >= 0 && retry > time.Duration(maxWait)}
	}
	delay := res.Delay()
	if delay <= 0 {
		return nil
	}
	t := l.cfg.clock.NewTimer(delay)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		res.Cancel()
		return ctx.Err()
	}
}

// Reset makes key start afresh, full, as if it had never been seen: it
// deletes every Redis key the algorithm keeps for key, in one round trip,
// so a key that was absent stays absent (nothing is written). Under
// FailLocal it also resets the key in the local limiter (whatever Redis
// answers), and with a deny cache it forgets the key's cached denial.
//
// A Cancel (or a Settle's surplus) of a booking this limiter made on key
// before the Reset (or while it was under way) gives nothing back, as in
// memory; bookings on other keys are untouched, but for the keys that
// share key's counter of Resets (one in 1024, by a hash of the key), whose
// bookings also give nothing back. A booking made by another instance is
// checked by Redis alone, which gives back only the latest booking still
// held (see each type's Cancel rules): the Reset deleted it, so nothing
// comes back unless a booking since left exactly the state it left (the
// same instant, on the server's clock to the microsecond).
//
// It returns ctx.Err() if ctx ends before Redis answers. When Redis fails
// it returns an error matching ErrUnavailable under every policy, as the
// key was not reset there (a timed-out call may still have been applied),
// and reports the failure to the OnError hook.
func (l *limiter) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	slot := l.slot(key)
	slot.Add(1)
	defer slot.Add(1)
	if l.lease != nil {
		l.lease.forget(key)
	}
	if l.local != nil {
		if r, ok := l.local.(interface{ Reset(string) }); ok {
			r.Reset(key)
		}
	}
	_, err := l.eval(ctx, key, []any{"x", "", l.pad, boxedZero, boxedZero})
	if l.deny != nil {
		// After the round trip: a denial cached during it is stale too.
		l.deny.forget(key)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		l.fail(key, err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l.operated(ratelimit.EventReset, key, 0, 0)
	return nil
}

// setRate makes the parameters that next builds from the current ones
// (at now, on the limiter's clock) the limiter's, or leaves them if next
// fails; under FailLocal, local then makes the same change on the local
// limiter (the Redis backend's bounds are the stricter: it cannot fail),
// and a deny cache forgets its denials, made under the old parameters.
// The epoch is odd while the change is under way: a booking that
// overlaps it, or precedes it, is not given back by Cancel.
func (l *limiter) setRate(next func(old algorithm, now time.Time) (algorithm, error), local func(ratelimit.Limiter) error) error {
	if err := l.changeRate(next, local); err != nil {
		return err
	}
	l.operated(ratelimit.EventSetRate, "", l.cur.Load().alg.max(), 0) // after the lock: an observer may peek
	return nil
}

// changeRate is setRate's change, under the limiter's mutex.
func (l *limiter) changeRate(next func(old algorithm, now time.Time) (algorithm, error), local func(ratelimit.Limiter) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, err := next(l.cur.Load().alg, l.cfg.clock.Now())
	if err != nil {
		return err
	}
	l.epoch.Add(1)
	l.cur.Store(&setting{alg: a})
	l.epoch.Add(1)
	if l.local != nil {
		if err := local(l.local); err != nil {
			return err
		}
	}
	if l.deny != nil {
		l.deny.clear()
	}
	return nil
}

// reservation turns a step's reply into a Reservation. The time to act is
// the booked instant: in production, the local time the reply arrived plus
// the server's delay (never early, at most a round trip late); on a test's
// clock, the instant the step was sent for plus the delay. st is the stamp
// read before the step was sent: a booking that a Reset of its key or a
// SetRate may have overlapped, or that one followed, is not given back by
// Cancel, nor its surplus by Settle. held is the FailLocal limiter's
// booking of the same events, if the caller made it already; otherwise
// the booking is mirrored there now.
func (l *limiter) reservation(p *setting, key string, n int, r *reply, local int64, st stamp, held *ratelimit.Reservation) *ratelimit.Reservation {
	d := l.decide(p, *r, int64(n))
	var act time.Time
	if l.cfg.clockTime {
		act = time.Unix(0, local+r.retry)
	} else {
		act = l.cfg.clock.Now().Add(time.Duration(r.retry))
	}
	if !r.ok {
		return ratelimit.NewReservation(l.cfg.clock, false, d, act, nil)
	}
	token := r.token
	mirrored := held
	if mirrored == nil && l.local != nil && n > 0 {
		mirrored = l.mirror(key, n)
	}
	void := !l.current(key, st) // a Reset or change overlapped the step: never given back
	var cancel func(time.Time)
	if n > 0 {
		cancel = func(at time.Time) {
			if !void && l.current(key, st) {
				l.unstep(p, key, n, token, at)
			}
			if mirrored != nil {
				mirrored.Cancel()
			}
		}
	}
	res := ratelimit.NewReservation(l.cfg.clock, true, d, act, cancel)
	if n == 0 { // nothing booked, nothing to settle: as in memory
		return res.SetSettle(func(time.Time, int) (ratelimit.Decision, error) { return ratelimit.Decision{}, ratelimit.ErrSettled })
	}
	return res.SetSettle(func(at time.Time, actual int) (ratelimit.Decision, error) {
		return l.settle(key, n, actual, token, !void && l.current(key, st), mirrored, at)
	})
}

// settle settles n events booked with the cancel token at actual, at at
// (on the server's clock, or at itself in tests), in one round trip (two
// if the key's state must first be re-expressed, see step), with the
// in-memory rules: a surplus comes back only if same (no change of the
// parameters and no Reset of the key since the booking) and by the
// algorithm's give-back rule; an excess is booked as debt in the
// parameters now in force. The Decision is the key's after it, as a peek
// sees it, with Allowed true and no RetryAfter. Under FailLocal the local
// booking is settled too, and answers if Redis fails; under FailOpen
// a failure answers as for a key without history; under FailClosed it is
// an error matching ErrUnavailable.
func (l *limiter) settle(key string, n, actual int, token string, same bool, mirrored *ratelimit.Reservation, at time.Time) (ratelimit.Decision, error) {
	var ld ratelimit.Decision
	var lerr error = errNoLocal
	if mirrored != nil {
		ld, lerr = mirrored.Settle(actual)
	}
	p := l.params(key)
	op, d := "s", 0
	switch {
	case actual < n && same:
		op, d = "g", n-actual
	case actual > n:
		op, d = "d", p.alg.debt(actual-n)
	}
	if op == "s" {
		token = "0" // a peek: a maximum wait of none
	}
	r, _, err := l.call(context.Background(), p, key, op, d, token, at)
	if err != nil {
		l.fail(key, err)
		switch {
		case l.cfg.policy == FailOpen:
			return ratelimit.Decision{Allowed: true, Limit: p.alg.max(), Remaining: p.alg.max()}, nil
		case l.cfg.policy == FailLocal && lerr == nil:
			return ld, nil
		}
		return ratelimit.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dec := p.alg.decision(r, 0)
	dec.Allowed, dec.RetryAfter = true, 0
	l.operated(ratelimit.EventSettle, key, actual, dec.Remaining)
	return dec, nil
}

var errNoLocal = errors.New("no local booking")

// giveBack undoes a local booking whose events never acted: Redis refused
// them, or the call was abandoned. It settles the booking at 0 rather
// than cancelling it: Cancel gives nothing back once the time to act has
// passed, and over a round trip it has, though nothing acted.
func giveBack(r *ratelimit.Reservation) {
	if _, err := r.Settle(0); errors.Is(err, ratelimit.ErrCannotSettle) {
		r.Cancel()
	}
}

// openReservation is FailOpen's booking of n events: OK at once, as for a
// key without history, and settled as one (nothing is recorded).
func (l *limiter) openReservation(p *setting, n int) *ratelimit.Reservation {
	limit := p.alg.max()
	d := ratelimit.Decision{Allowed: true, Limit: limit, Remaining: limit - n}
	res := ratelimit.NewReservation(l.cfg.clock, true, d, l.cfg.clock.Now(), nil)
	return res.SetSettle(func(time.Time, int) (ratelimit.Decision, error) {
		return ratelimit.Decision{Allowed: true, Limit: limit, Remaining: limit}, nil
	})
}

// Take decides n events for key like AllowN, in one round trip, and hands
// back the booking, so that its cost can be settled later
// (ratelimit.Taker): the Reservation is OK iff the n events were allowed
// now and booked. n == 0 is a peek (not OK). Its errors are AllowN's, and
// so are its answers when Redis fails (under FailLocal, the local
// limiter's Take). A deny cache is not consulted: a Take always asks
// Redis.
func (l *limiter) Take(ctx context.Context, key string, n int) (*ratelimit.Reservation, error) {
	st := l.stampOf(key)
	p := l.params(key)
	if err := validN(p, n); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n == 0 {
		d, err := l.AllowN(ctx, key, 0)
		if err != nil {
			return nil, err
		}
		return ratelimit.NewReservation(l.cfg.clock, false, d, l.cfg.clock.Now(), nil), nil
	}
	// Just after a failure, the local limiter must allow too.
	var held *ratelimit.Reservation
	if l.local != nil && l.cfg.clock.Now().UnixNano() < l.recover.Load() {
		res, err := l.local.(ratelimit.Taker).Take(ctx, key, n)
		if err != nil || !res.OK() {
			return res, err
		}
		held = res
	}
	r, local, err := l.step(ctx, p, key, n, 0, "r")
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			if held != nil {
				giveBack(held)
			}
			return nil, cerr
		}
		l.fail(key, err)
		switch l.cfg.policy {
		case FailOpen:
			return l.openReservation(p, n), nil
		case FailClosed:
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if held != nil {
			return held, nil
		}
		return l.local.(ratelimit.Taker).Take(ctx, key, n)
	}
	if !r.ok {
		if held != nil {
			giveBack(held)
		}
		return ratelimit.NewReservation(l.cfg.clock, false, l.decide(p, r, int64(n)), l.cfg.clock.Now(), nil), nil
	}
	return l.reservation(p, key, n, &r, local, st, held), nil
}

// step runs the script's step (op "s", or "r" for a booking that may be
// cancelled) for n events that must conform within maxWait ns (-1: within
// the horizon). It returns the reply and the limiter's clock reading sent.
func (l *limiter) step(ctx context.Context, p *setting, key string, n int, maxWait int64, op string) (reply, int64, error) {
	arg := boxedZero
	if maxWait < 0 {
		arg = boxedMinus1
	} else if maxWait > 0 {
		arg = maxWait
	}
	return l.call(ctx, p, key, op, n, arg, l.cfg.clock.Now())
}

// call runs the script's operation op for n with ARGV[5] arg, sent at
// sent on the limiter's clock, re-expressing the key's state first if the
// script asks (a token bucket's state written under earlier parameters).
// It returns the reply and sent in Unix ns.
func (l *limiter) call(ctx context.Context, p *setting, key, op string, n int, arg any, sent time.Time) (reply, int64, error) {
	local := sent.UnixNano()
	cb := callPool.Get().(*callBuf)
	defer l.putBuf(cb)
	dst := cb.args[:5]
	dst[0], dst[1], dst[2], dst[3], dst[4] = boxOp(op), "", l.pad, n, arg
	if l.cfg.clockTime {
		dst[1] = strconv.FormatInt(local, 10)
	}
	dst = append(dst, l.pen...)
	dst = p.alg.args(dst, int64(n), local)
	v, err := l.evalIn(ctx, cb, key, dst)
	if err != nil {
		return reply{}, local, err
	}
	r, err := parseReply(v)
	if err != nil {
		return r, local, err
	}
	// The key's state was written under this limiter's earlier
	// parameters: re-express it (see restater) and decide again, on
	// condition that the state is still the one re-expressed. Should other
	// calls keep rewriting it meanwhile (racing rate changes), the third
	// try asks the script to read it as another instance's state instead,
	// which needs no history.
	for try := 0; r.stale; try++ {
		rs, ok := p.alg.(restater)
		if !ok || try == 3 {
			return r, local, errors.New("the key's state was written under other parameters and could not be re-expressed")
		}
		cond, rep := "*", ""
		if try < 2 {
			if rep, err = rs.restate(r.token, r.a*1e9+r.b, sent); err != nil {
				return r, local, err
			}
			cond = r.token
		}
		if v, err = l.evalIn(ctx, cb, key, append(dst, cond, rep)); err != nil {
			return reply{}, local, err
		}
		if r, err = parseReply(v); err != nil {
			return r, local, err
		}
	}
	if r.corrupt {
		l.corrupted(key)
	}
	if r.began || r.ended {
		l.penaltyEvents(key, &r)
	}
	return r, local, nil
}

// unstep gives back n events booked with the cancel token, if at (on the
// server's clock, or at itself in tests) has not passed the booked
// instant.
func (l *limiter) unstep(p *setting, key string, n int, token string, at time.Time) {
	args := []any{"u", "", l.pad, n, token}
	if l.cfg.clockTime {
		args[1] = strconv.FormatInt(at.UnixNano(), 10)
	}
	args = append(args, l.pen...)
	v, err := l.eval(context.Background(), key, p.alg.args(args, int64(n), at.UnixNano()))
	if err != nil {
		l.fail(key, err)
		return
	}
	if x, ok := v.(int64); ok && x&2 != 0 {
		l.corrupted(key)
	}
}

// eval runs the script on key's Redis key within the call timeout. If the
// client does not bound its I/O by the context, the call runs on a helper
// goroutine and eval returns at the timeout all the same; the call then
// completes or fails in the background, bounded by the client's own
// timeouts. A call that timed out may still have been applied by Redis.
func (l *caller) eval(ctx context.Context, key string, args []any) (any, error) {
	cb := callPool.Get().(*callBuf)
	v, err := l.evalIn(ctx, cb, key, args)
	l.putBuf(cb)
	return v, err
}

// evalIn is eval with key's Redis keys built in cb.
func (l *caller) evalIn(ctx context.Context, cb *callBuf, key string, args []any) (any, error) {
	var keys []string
	if len(l.suffix) <= len(cb.keys) {
		keys = cb.keys[:len(l.suffix)]
	} else {
		keys = make([]string, len(l.suffix))
	}
	redisKeys(keys, l.cfg.prefix, key, l.suffix)
	if l.batch != nil && args[0] != "x" {
		return l.batch.do(ctx, keys, args) // bounds it by the call timeout
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	return l.runBounded(ctx, keys, args)
}

// callBuf holds one call's Redis keys and arguments, pooled so that a
// call allocates no slices of its own: once the call has returned nothing
// refers to them (a queued decision and go-redis copy what they keep),
// except for a client that does not bound its I/O by the context, whose
// call may outlive eval on its helper goroutine (see runBounded): such a
// buffer is left to the garbage collector.
type callBuf struct {
	args [12]any
	keys [2]string
}

var callPool = sync.Pool{New: func() any { return new(callBuf) }}

func (l *caller) putBuf(cb *callBuf) {
	if !l.direct {
		return
	}
	clear(cb.args[:])
	clear(cb.keys[:])
	callPool.Put(cb)
}

// boxOp returns op as an argument without allocating for the operations
// of the scripts: a constant string is boxed at compile time.
func boxOp(op string) any {
	switch op {
	case "s":
		return "s"
	case "r":
		return "r"
	case "u":
		return "u"
	case "g":
		return "g"
	case "d":
		return "d"
	}
	return op
}

// run runs the script once: FCALL where Redis has the library, else
// EVALSHA (EVAL on NOSCRIPT).
func (l *caller) run(ctx context.Context, keys []string, args []any) (any, error) {
	if v, err, ok := l.fns.call(ctx, keys, args); ok {
		return v, err
	}
	return l.script.Run(ctx, l.client, keys, args...).Result()
}

// corrupted reports to the OnError hook a key that held a value the
// limiter could not have written, which the script replaced.
func (l *caller) corrupted(key string) {
	if l.cfg.onError != nil {
		l.cfg.onError(key, ErrCorruptState)
	}
}

// fail reports a failed call to the OnError hook and, under FailLocal,
// starts or extends the recovery span.
func (l *limiter) fail(key string, err error) {
	if l.local != nil {
		until := l.cfg.clock.Now().UnixNano() + l.cur.Load().alg.span()
		for {
			old := l.recover.Load()
			if old >= until || l.recover.CompareAndSwap(old, until) {
				break
			}
		}
	}
	l.caller.fail(key, err)
}

// fail reports a failed call to the OnError hook.
func (l *caller) fail(key string, err error) {
	if l.cfg.onError != nil {
		l.cfg.onError(key, fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
}

func validN(p *setting, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %d", ratelimit.ErrNegativeN, n)
	}
	if limit := p.alg.max(); n > limit {
		return fmt.Errorf("%w: %d > %d", ratelimit.ErrExceedsLimit, n, limit)
	}
	return nil
}
