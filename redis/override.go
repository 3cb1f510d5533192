package redis

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Per-key overrides on Redis: a few keys (the tiers of paying customers)
// decide under parameters of their own instead of the limiter's. Like
// SetRate, an override is this limiter's, in the process, not in Redis:
// every instance sharing the keys must set it. A call looks the key up in
// the limiter's table (a map lookup, only once the limiter has had an
// override) and sends the key's own parameters; the key's state records,
// in its tag, which parameters it was written under, so that the first
// decision after a change re-expresses it by the rule SetRate follows, at
// the instant of the change, as the in-memory limiter does at once.

// overrides is a limiter's table of per-key parameters, an immutable map
// replaced whole by a change (under the limiter's mu), and, for the token
// bucket, the overrides removed lately (see ghosts).
type overrides struct {
	t      atomic.Pointer[map[string]*setting]
	gen    uint64 // the last override's generation; under mu
	ghosts ghosts
}

// ovGen0 is the first generation of an override's parameters, apart from
// those the limiter's own count through, so that a tag names one set of
// parameters.
const ovGen0 = 1 << 62

// params returns the parameters key decides under: its override, or the
// limiter's.
func (l *limiter) params(key string) *setting {
	if t := l.ov.t.Load(); t != nil {
		if p := (*t)[key]; p != nil {
			return p
		}
	}
	return l.cur.Load()
}

// setOverride gives key the parameters next builds from those it decides
// under now (at now, on the limiter's clock), or, with next nil, takes its
// override away; local makes the same change on the FailLocal limiter, if
// it has overrides. The key's counter of Resets moves on, as in memory: a
// Cancel or Settle's surplus of a booking on key made before gives
// nothing back; bookings on other keys are untouched (but for those that
// share key's counter, on the safe side, see limiter.resets). A key written under the
// parameters it leaves is re-expressed at its next decision (see
// tbAlgo.restate and the ghosts of removed overrides).
func (l *limiter) setOverride(key string, next func(from algorithm, now time.Time) algorithm, rate ratelimit.Rate, capacity int, local func(ratelimit.Limiter)) {
	if !l.changeOverride(key, next, rate, capacity, local) {
		return
	}
	// After the lock: an observer may peek at the limiter.
	if next == nil {
		l.operated(ratelimit.EventRemoveOverride, key, 0, 0)
	} else {
		l.operated(ratelimit.EventSetOverride, key, l.params(key).alg.max(), 0)
	}
}

// changeOverride is setOverride's change, under the limiter's mutex; it
// reports whether it made one (not a removal of no override).
func (l *limiter) changeOverride(key string, next func(from algorithm, now time.Time) algorithm, rate ratelimit.Rate, capacity int, local func(ratelimit.Limiter)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var old map[string]*setting
	if t := l.ov.t.Load(); t != nil {
		old = *t
	}
	prev := old[key]
	if next == nil && prev == nil {
		return false
	}
	m := make(map[string]*setting, len(old)+1)
	for k, p := range old {
		m[k] = p
	}
	now := l.cfg.clock.Now()
	if next != nil {
		from := l.cur.Load()
		if prev != nil {
			from = prev
		}
		l.ov.gen++
		a := next(from.alg, now)
		if tb, ok := a.(*tbAlgo); ok {
			tb.name(tb.nonce, ovGen0+l.ov.gen)
		}
		if lb, ok := a.(*lbAlgo); ok {
			lb.name(lb.nonce, ovGen0+l.ov.gen)
		}
		m[strings.Clone(key)] = &setting{alg: a, rate: rate, capacity: capacity}
	} else {
		delete(m, key)
		if tb, ok := prev.alg.(*tbAlgo); ok {
			l.ov.ghosts.add(tb, now, l.cur.Load().alg.(*tbAlgo).gen)
		}
	}
	slot := l.slot(key) // the key's alone, as a Reset: other keys' bookings stand
	slot.Add(1)
	l.ov.t.Store(&m)
	slot.Add(1)
	if l.local != nil {
		local(l.local)
	}
	if l.deny != nil {
		l.deny.forget(key)
	}
	return true
}

// override returns key's override.
func (l *limiter) override(key string) (ratelimit.Rate, int, bool) {
	if t := l.ov.t.Load(); t != nil {
		if p := (*t)[key]; p != nil {
			return p.rate, p.capacity, true
		}
	}
	return ratelimit.Rate{}, 0, false
}

// RemoveOverride takes key's override away, if it has one: the key decides
// under the limiter's parameters again, from its next decision on, its
// state re-expressed as SetRate would at the removal (a token bucket's
// tokens capped at the limiter's capacity; a leaky bucket's queue kept; a
// window's counts kept). A Cancel of a booking made before gives nothing
// back. Under FailLocal the local limiter's override goes too.
func (l *limiter) RemoveOverride(key string) {
	l.setOverride(key, nil, ratelimit.Rate{}, 0, func(loc ratelimit.Limiter) {
		if o, ok := loc.(interface{ RemoveOverride(string) }); ok {
			o.RemoveOverride(key)
		}
	})
}

// ghosts are the parameters of token-bucket overrides removed lately,
// with when they were removed and the generation of the limiter's
// parameters then: a key written under one is re-expressed from it into
// the limiter's parameters at the removal, then through the limiter's
// changes since. A key idle through more than maxGhosts removals is read
// as another instance's (empty until its TAT).
type ghosts struct {
	mu   sync.Mutex
	list []ghost // oldest first
}

type ghost struct {
	a     *tbAlgo
	since time.Time
	to    uint64 // the limiter's generation the key went back to
}

const maxGhosts = 256

func (g *ghosts) add(a *tbAlgo, since time.Time, to uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.list) == maxGhosts {
		g.list = g.list[1:]
	}
	g.list = append(g.list, ghost{a, since, to})
}

func (g *ghosts) find(tag string) (ghost, bool) {
	if g == nil {
		return ghost{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.list) - 1; i >= 0; i-- {
		if g.list[i].a.tag == tag {
			return g.list[i], true
		}
	}
	return ghost{}, false
}

// SetOverride gives key a rate and capacity of its own, in place of the
// limiter's, from the key's next decision on, as
// ratelimit.TokenBucket.SetOverride does: the key keeps the tokens it held
// at the change, capped at the new capacity, refilling at the new rate
// from then; a later SetRate leaves it alone; Reset starts it afresh under
// its override; its Decisions carry its own Limit (Limit() stays the
// limiter's), and AllowN, Reserve, WaitN and Take accept n up to its own
// capacity. It validates as NewTokenBucket does and returns the same
// errors, leaving everything unchanged on error.
//
// The override is this limiter's, not Redis's: every instance sharing the
// keys must set it (another instance reads the key's state as written
// under parameters it does not know: see the package doc, Changing the
// rate). The table is meant for a modest number of keys: a change copies
// it. A Cancel of a booking made before the change gives nothing back.
// Under FailLocal the local limiter gets the override too.
func (tb *TokenBucket) SetOverride(key string, rate ratelimit.Rate, capacity int) error {
	a, err := newTBAlgo(rate, capacity)
	if err != nil {
		return err
	}
	tb.setOverride(key, func(from algorithm, now time.Time) algorithm {
		a.succeed(from.(*tbAlgo), now, maxHist)
		return a
	}, rate, capacity, setLocalOverride(key, rate, capacity))
	return nil
}

// Override returns key's override, if it has one.
func (tb *TokenBucket) Override(key string) (rate ratelimit.Rate, capacity int, ok bool) {
	return tb.override(key)
}

// SetOverride gives key a drain rate and queue capacity of its own, as
// ratelimit.LeakyBucket.SetOverride does (the key keeps its queue), with
// the rules of TokenBucket.SetOverride on Redis.
func (lb *LeakyBucket) SetOverride(key string, rate ratelimit.Rate, capacity int) error {
	a, err := newTBAlgo(rate, capacity)
	if err != nil {
		return err
	}
	lb.setOverride(key, func(from algorithm, now time.Time) algorithm {
		a.succeed(&from.(*lbAlgo).tbAlgo, now, 0)
		return &lbAlgo{*a}
	}, rate, capacity, setLocalOverride(key, rate, capacity))
	return nil
}

// Override returns key's override, if it has one.
func (lb *LeakyBucket) Override(key string) (rate ratelimit.Rate, capacity int, ok bool) {
	return lb.override(key)
}

// SetOverride gives key a limit and window length of its own, as
// ratelimit.FixedWindow.SetOverride does (the key keeps its window's
// start and count), with the rules of TokenBucket.SetOverride on Redis.
func (fw *FixedWindow) SetOverride(key string, rate ratelimit.Rate) error {
	return fw.setWindowOverride(key, rate, windowParams)
}

// Override returns key's override, if it has one.
func (fw *FixedWindow) Override(key string) (rate ratelimit.Rate, ok bool) {
	rate, _, ok = fw.override(key)
	return rate, ok
}

// SetOverride gives key a limit and window length of its own, as
// ratelimit.SlidingLog.SetOverride does (the key keeps its instants), with
// the rules of TokenBucket.SetOverride on Redis.
func (sl *SlidingLog) SetOverride(key string, rate ratelimit.Rate) error {
	return sl.setWindowOverride(key, rate, slidingLogParams)
}

// Override returns key's override, if it has one.
func (sl *SlidingLog) Override(key string) (rate ratelimit.Rate, ok bool) {
	rate, _, ok = sl.override(key)
	return rate, ok
}

// SetOverride gives key a limit and window length of its own, as
// ratelimit.SlidingWindowCounter.SetOverride does (the key keeps its
// counts), with the rules of TokenBucket.SetOverride on Redis.
func (sc *SlidingWindowCounter) SetOverride(key string, rate ratelimit.Rate) error {
	return sc.setWindowOverride(key, rate, windowParams)
}

// Override returns key's override, if it has one.
func (sc *SlidingWindowCounter) Override(key string) (rate ratelimit.Rate, ok bool) {
	rate, _, ok = sc.override(key)
	return rate, ok
}

func (l *limiter) setWindowOverride(key string, rate ratelimit.Rate, check func(ratelimit.Rate) error) error {
	if err := check(rate); err != nil {
		return err
	}
	l.setOverride(key, func(from algorithm, _ time.Time) algorithm {
		return from.(*windowAlgo).with(rate)
	}, rate, int(rate.N), func(loc ratelimit.Limiter) {
		if o, ok := loc.(interface {
			SetOverride(string, ratelimit.Rate) error
		}); ok {
			_ = o.SetOverride(key, rate) // valid: the backend's bounds are the stricter
		}
	})
	return nil
}

// setLocalOverride makes a bucket's override on a FailLocal limiter that
// has overrides.
func setLocalOverride(key string, rate ratelimit.Rate, capacity int) func(ratelimit.Limiter) {
	return func(loc ratelimit.Limiter) {
		if o, ok := loc.(interface {
			SetOverride(string, ratelimit.Rate, int) error
		}); ok {
			_ = o.SetOverride(key, rate, capacity) // valid: the backend's bounds are the stricter
		}
	}
}
