package benchmarks

import (
	"context"
	"math"
	"sync"
	"time"

	failsafebulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	failsafe "github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/go-chi/httprate"
	juju "github.com/juju/ratelimit"
	"github.com/ratelimitkit/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	uber "go.uber.org/ratelimit"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
)

// spec is the limit every implementation is configured with in a scenario:
// limit events per period per key, all of which may come at once.
type spec struct {
	limit  int
	period time.Duration
	// clock, if not nil, is the time an implementation reads if it can be
	// given a clock (the memory benchmark moves it to make keys idle).
	// Timed benchmarks leave it nil: reading the real clock is part of the
	// cost being measured.
	clock *ratelimit.ManualClock
}

var (
	// allowSpec is never reached within a one-key benchmark: every call is
	// allowed. Its burst of 2³⁰ events outlasts any run.
	allowSpec = spec{limit: 1 << 30, period: time.Hour}
	// wholeSpec is allowSpec with an interval between events of a whole
	// number of nanoseconds (4 µs), as most configured limits have (100
	// per second, 1,000 per minute): our token bucket steps the global
	// key "" of such a limit by one compare-and-swap.
	wholeSpec = spec{limit: 1 << 30, period: (1 << 30) * 4 * time.Microsecond}
	// denySpec allows one event per hour; benchmarks spend it first, so
	// every timed call is denied.
	denySpec = spec{limit: 1, period: time.Hour}
	// keyedSpec is never reached within a keyed benchmark either. Each event
	// takes 10 s to refill, so no key comes back to rest between two visits
	// (a limiter that drops keys at rest would otherwise drop and re-create
	// them mid-run, which is not the existing-key path being measured), and
	// the burst of 2²⁴ events per key outlasts any run.
	keyedSpec = spec{limit: 1 << 24, period: (1 << 24) * 10 * time.Second}
)

// idleAfter is how far the memory benchmark moves time to make every key
// idle: past any key's refill, and two whole windows for window counters.
func (s spec) idleAfter() time.Duration { return 3 * s.period }

// limiter is one instance under test, reduced to what the scenarios call.
// Every call goes through the allow func value, so every implementation
// pays the same indirect call (see BenchmarkFloor/op=func-call).
type limiter struct {
	// allow decides one event for key and reports whether it was allowed.
	allow func(key string) bool
	// idle moves the instance's time past every key's refill and lets it
	// drop what it can. Nil when its time cannot be moved: whether its
	// memory comes back is then not measurable without real sleeps.
	idle func()
	// close releases goroutines and the like; may be nil.
	close func()
}

// impl is one limiter implementation: ours or a peer's.
type impl struct {
	name   string
	oneKey bool // runs the one-key scenarios
	keyed  bool // runs the keyed and memory scenarios
	// outOfOrder marks a limiter that refuses an event stamped before one
	// it has already let through (a shaper, an exact log). In the one-key
	// parallel run on the allow path each goroutine reads the clock before
	// taking the key's lock, so some calls arrive out of order and are
	// refused: that run reports their share as denied-% instead of failing.
	outOfOrder bool
	build      func(s spec) limiter
}

// impls is every rate limiter under test, ours first. Adding an algorithm
// is one entry here.
var impls = []impl{
	{name: "ours-tokenbucket", oneKey: true, keyed: true, build: buildTokenBucket},
	{name: "ours-leakybucket", oneKey: true, keyed: true, outOfOrder: true, build: buildLeakyBucket},
	{name: "ours-fixedwindow", oneKey: true, keyed: true, build: buildFixedWindow},
	{name: "ours-slidingcounter", oneKey: true, keyed: true, build: buildSlidingCounter},
	// The sliding log keeps 8 bytes per event of its limit for every key:
	// a limit that is never reached over many keys (2²⁴ events) is over its
	// maximum of 2²⁰ and would take 128 MiB per key, so it runs on one key
	// only, with a limit a one-key run cannot reach within its window.
	{name: "ours-slidinglog", oneKey: true, outOfOrder: true, build: buildSlidingLog},

	{name: "xrate", oneKey: true, build: buildXRate},
	{name: "xrate-map", keyed: true, build: buildXRateMap},
	{name: "xrate-syncmap", keyed: true, build: buildXRateSyncMap},
	{name: "uber", oneKey: true, build: buildUber},
	{name: "failsafe", oneKey: true, build: buildFailsafe},
	{name: "juju", oneKey: true, build: buildJuju},
	{name: "mutex-tokenbucket", oneKey: true, build: buildMutexBucket},
	{name: "sethvargo", oneKey: true, keyed: true, build: buildSethvargo},
	{name: "throttled", oneKey: true, keyed: true, build: buildThrottled},
	{name: "httprate", oneKey: true, keyed: true, build: buildHTTPRate},
	{name: "ulule", oneKey: true, keyed: true, build: buildUlule},
}

// must turns a constructor's error into a panic: the specs are constants,
// so an error is a bug in this file.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ours

// ourOptions gives our limiters the spec's clock, if any.
func ourOptions(s spec) []ratelimit.Option {
	if s.clock == nil {
		return nil
	}
	return []ratelimit.Option{ratelimit.WithClock(s.clock)}
}

// ourIdle moves the manual clock and sweeps, as a service would with
// WithSweepInterval.
func ourIdle(s spec, sweep func()) func() {
	if s.clock == nil {
		return nil
	}
	return func() {
		s.clock.Advance(s.idleAfter())
		sweep()
	}
}

func buildTokenBucket(s spec) limiter {
	tb := must(ratelimit.NewTokenBucket(ratelimit.Per(int64(s.limit), s.period), s.limit, ourOptions(s)...))
	return limiter{allow: tb.Allow, idle: ourIdle(s, tb.Sweep), close: func() { tb.Close() }}
}

// buildLeakyBucket is our shaper. Its Allow succeeds only when the key's
// queue is empty, so a limit that is never reached means a slot of 1ns:
// every call finds the queue drained since the last. The deny path is a
// queue of one event per hour, booked.
//
// Over many keys this leaves every key at rest between two visits: when a
// shard is about to grow, the store drops its keys at rest, and those come
// back as new keys (an allocation each) on their next visit. The keyed
// rows include that cost (after the keys are populated no shard grows, so
// it is small); with a frozen clock (the memory benchmark) no key comes to
// rest during the flood.
func buildLeakyBucket(s spec) limiter {
	rate, capacity := ratelimit.PerSecond(1e9), 1
	if s.limit == 1 {
		rate = ratelimit.Per(1, s.period)
	}
	lb := must(ratelimit.NewLeakyBucket(rate, capacity, ourOptions(s)...))
	return limiter{allow: lb.Allow, idle: ourIdle(s, lb.Sweep), close: func() { lb.Close() }}
}

func buildFixedWindow(s spec) limiter {
	fw := must(ratelimit.NewFixedWindow(ratelimit.Per(int64(s.limit), s.period), ourOptions(s)...))
	return limiter{allow: fw.Allow, idle: ourIdle(s, fw.Sweep), close: func() { fw.Close() }}
}

func buildSlidingCounter(s spec) limiter {
	sc := must(ratelimit.NewSlidingWindowCounter(ratelimit.Per(int64(s.limit), s.period), ourOptions(s)...))
	return limiter{allow: sc.Allow, idle: ourIdle(s, sc.Sweep), close: func() { sc.Close() }}
}

// buildSlidingLog is our exact sliding log. On the allow path its limit is
// its maximum, 2²⁰ events per 10ms (an 8 MiB log), more than one key can
// be called in 10ms, so every call is allowed while old entries leave the
// window at the rate new ones come in: its steady state.
func buildSlidingLog(s spec) limiter {
	rate := ratelimit.Per(1<<20, 10*time.Millisecond)
	if s.limit == 1 {
		rate = ratelimit.Per(1, s.period)
	}
	sl := must(ratelimit.NewSlidingLog(rate, ourOptions(s)...))
	return limiter{allow: sl.Allow, idle: ourIdle(s, sl.Sweep), close: func() { sl.Close() }}
}

// golang.org/x/time/rate

func xrateLimit(s spec) rate.Limit { return rate.Limit(float64(s.limit) / s.period.Seconds()) }

// buildXRate is one rate.Limiter; the key is ignored.
func buildXRate(s spec) limiter {
	l := rate.NewLimiter(xrateLimit(s), s.limit)
	return limiter{allow: func(string) bool { return l.Allow() }}
}

// buildXRateMap is the usual keyed pattern: a map of limiters behind one
// mutex. It never drops a key: idle does nothing, and the memory benchmark
// shows that nothing comes back.
func buildXRateMap(s spec) limiter {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	lim, burst := xrateLimit(s), s.limit
	return limiter{
		allow: func(key string) bool {
			mu.Lock()
			l, ok := m[key]
			if !ok {
				l = rate.NewLimiter(lim, burst)
				m[key] = l
			}
			mu.Unlock()
			return l.Allow()
		},
		idle: func() {},
	}
}

// buildXRateSyncMap is the other usual pattern: a sync.Map of limiters.
// Like the map, it never drops a key.
func buildXRateSyncMap(s spec) limiter {
	var m sync.Map
	lim, burst := xrateLimit(s), s.limit
	return limiter{
		allow: func(key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(lim, burst))
			}
			return v.(*rate.Limiter).Allow()
		},
		idle: func() {},
	}
}

// go.uber.org/ratelimit

// noSleepClock is go.uber.org/ratelimit's Clock with the real time and a
// Sleep that returns at once.
type noSleepClock struct{}

func (noSleepClock) Now() time.Time      { return time.Now() }
func (noSleepClock) Sleep(time.Duration) {}

// buildUber measures the bookkeeping of go.uber.org/ratelimit's Take: a
// time.Now read (its default clock's cost) and a CAS loop on the next
// permission time. Take never refuses: it sleeps until the event conforms,
// so it is not an Allow. Its clock here never sleeps. On the allow path
// (one event per nanosecond) no wait is ever owed; on the deny path (one
// per millisecond, short enough that its schedule, which moves one period
// per Take, cannot overflow int64 in a benchmark) every Take owes a wait and
// calls the no-op Sleep. allow reports that outcome, known by construction.
func buildUber(s spec) limiter {
	owesWait := s.limit == 1
	l := newUber(owesWait, noSleepClock{})
	return limiter{allow: func(string) bool { l.Take(); return !owesWait }}
}

// newUber builds go.uber.org/ratelimit's limiter for the deny path (a wait
// owed on every Take) or the allow path (none owed) on clock.
func newUber(owesWait bool, clock uber.Clock) uber.Limiter {
	if owesWait {
		return uber.New(1, uber.Per(time.Millisecond), uber.WithClock(clock))
	}
	return uber.New(1e9, uber.WithClock(clock))
}

// github.com/failsafe-go/failsafe-go

// buildFailsafe is failsafe-go's bursty rate limiter (permits per period,
// the nearest to a token bucket with a burst); the key is ignored.
func buildFailsafe(s spec) limiter {
	l := failsafe.NewBursty[any](uint(s.limit), s.period)
	return limiter{allow: func(string) bool { return l.TryAcquirePermit() }}
}

// github.com/juju/ratelimit

// buildJuju is juju/ratelimit's token bucket (one token every period/limit,
// capacity limit); the key is ignored. It reads time.Now under its mutex.
func buildJuju(s spec) limiter {
	tb := juju.NewBucket(s.period/time.Duration(s.limit), int64(s.limit))
	return limiter{allow: func(string) bool { return tb.TakeAvailable(1) == 1 }}
}

// A naive baseline

// mutexBucket is the token bucket anyone would write first: a
// theoretical arrival time in integer nanoseconds behind a sync.Mutex, the
// monotonic clock read before the lock. It is the yardstick for a hot key
// under contention: a limiter that spins must not do worse than this
// mutex, which parks.
type mutexBucket struct {
	mu       sync.Mutex
	tat      int64 // guarded by mu
	start    time.Time
	interval int64 // ns per event
	burst    int64 // ns of credit: limit × interval
}

func buildMutexBucket(s spec) limiter {
	interval := int64(s.period) / int64(s.limit)
	b := &mutexBucket{start: time.Now(), interval: interval, burst: interval * int64(s.limit)}
	return limiter{allow: func(string) bool { return b.allow() }}
}

func (b *mutexBucket) allow() bool {
	now := int64(time.Since(b.start))
	b.mu.Lock()
	defer b.mu.Unlock()
	next := max(b.tat, now) + b.interval
	if next-now > b.burst {
		return false
	}
	b.tat = next
	return true
}

// github.com/sethvargo/go-limiter

// buildSethvargo is go-limiter's memorystore. Its sweeper reads the real
// clock (there is no clock to inject), so whether memory comes back is not
// measurable here without sleeping for its TTL.
func buildSethvargo(s spec) limiter {
	st := must(memorystore.New(&memorystore.Config{Tokens: uint64(s.limit), Interval: s.period}))
	ctx := context.Background()
	return limiter{
		allow: func(key string) bool {
			_, _, _, ok, err := st.Take(ctx, key)
			return ok && err == nil
		},
		close: func() { st.Close(ctx) },
	}
}

// github.com/throttled/throttled/v2

// buildThrottled is throttled's GCRA over its memstore (no key cap: a plain
// map). The store takes a clock, but never drops a key: it ignores TTLs.
func buildThrottled(s spec) limiter {
	st := must(memstore.New(0))
	if s.clock != nil {
		st.SetTimeNow(s.clock.Now)
	}
	quota := throttled.RateQuota{MaxRate: throttled.PerDuration(s.limit, s.period), MaxBurst: s.limit - 1}
	rl := must(throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), quota))
	// Its default of 10 CAS attempts fails some calls with an error when
	// goroutines contend for one key on a busy machine; raised so that
	// every call gets a decision.
	rl.SetMaxCASAttemptsLimit(1 << 20)
	ctx := context.Background()
	l := limiter{allow: func(key string) bool {
		limited, _, err := rl.RateLimitCtx(ctx, key, 1)
		return !limited && err == nil
	}}
	if s.clock != nil {
		l.idle = func() { s.clock.Advance(s.idleAfter()) }
	}
	return l
}

// github.com/go-chi/httprate

// httprateLimiter is what httprate.RateLimiter.OnLimit does for one
// request over the library's LimitCounter, minus the response headers:
// OnLimit needs an http.ResponseWriter and an *http.Request, whose cost is
// not the limiter's. Like OnLimit it reads the clock twice (once for the
// window, once in its rate calculation), holds one limiter-wide mutex over
// the read and the increment, and weights the previous window's count.
type httprateLimiter struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
	now     func() time.Time
}

func (h *httprateLimiter) allow(key string) bool {
	window := h.now().UTC().Truncate(h.window)
	h.mu.Lock()
	now := h.now().UTC()
	cur := now.Truncate(h.window)
	curCount, prevCount, err := h.counter.Get(key, cur, cur.Add(-h.window))
	if err != nil {
		h.mu.Unlock()
		return false
	}
	w := float64(h.window)
	rate := int(math.Round(float64(prevCount)*(w-float64(now.Sub(cur)))/w + float64(curCount)))
	if rate+1 > h.limit {
		h.mu.Unlock()
		return false
	}
	err = h.counter.IncrementBy(key, window, 1)
	h.mu.Unlock()
	return err == nil
}

// buildHTTPRate is httprate's sliding window counter over its local
// LimitCounter, which keeps a hash of each key, not the key. Time is a
// parameter of the counter, so the memory benchmark can make keys idle.
func buildHTTPRate(s spec) limiter {
	h := &httprateLimiter{
		counter: httprate.NewLocalLimitCounter(s.period),
		limit:   s.limit,
		window:  s.period,
		now:     time.Now,
	}
	l := limiter{allow: h.allow}
	if s.clock != nil {
		h.now = s.clock.Now
		l.idle = func() {
			s.clock.Advance(s.idleAfter())
			h.allow("idle") // the counter drops old windows on its next increment
		}
	}
	return l
}

// github.com/ulule/limiter/v3

// buildUlule is ulule's fixed window over its memory store, without the
// cleaner goroutine so that it cannot perturb other rows (the cleaner
// costs nothing on the Get path). Its expiry reads the real clock, so
// whether memory comes back is not measurable here without real sleeps.
func buildUlule(s spec) limiter {
	st := ulmemory.NewStoreWithOptions(ulule.StoreOptions{Prefix: ulule.DefaultPrefix})
	l := ulule.New(st, ulule.Rate{Period: s.period, Limit: int64(s.limit)})
	ctx := context.Background()
	return limiter{allow: func(key string) bool {
		c, err := l.Get(ctx, key)
		return !c.Reached && err == nil
	}}
}

// Bulkheads

// bulkhead is one concurrency limiter under test.
type bulkhead struct {
	tryAcquire func() bool
	release    func()
}

type bulkheadImpl struct {
	name  string
	build func(permits int) bulkhead
}

// bulkheadImpls is every bulkhead under test, ours first.
var bulkheadImpls = []bulkheadImpl{
	{name: "ours-bulkhead", build: func(n int) bulkhead {
		bh := must(ratelimit.NewBulkhead(n))
		return bulkhead{tryAcquire: bh.TryAcquire, release: bh.Release}
	}},
	{name: "xsync-semaphore", build: func(n int) bulkhead {
		s := semaphore.NewWeighted(int64(n))
		return bulkhead{tryAcquire: func() bool { return s.TryAcquire(1) }, release: func() { s.Release(1) }}
	}},
	{name: "failsafe-bulkhead", build: func(n int) bulkhead {
		bh := failsafebulkhead.New[any](uint(n))
		return bulkhead{tryAcquire: bh.TryAcquirePermit, release: bh.ReleasePermit}
	}},
}
