// Package redis runs the ratelimit algorithms on Redis, so that every
// instance of a service shares one limit per key: TokenBucket, LeakyBucket,
// FixedWindow, SlidingLog, SlidingWindowCounter and LeakyMeter, each a
// ratelimit.Limiter whose decisions are those of the in-memory type of the
// same name, to the nanosecond; and Bulkhead, at most n calls in flight
// per key across instances, with leases that expire when a holder dies. It
// is a module of its own, so that users of the core never download a Redis
// client.
//
// The package is named redis, like the go-redis client it takes; import one
// of them under another name:
//
//	import (
//		goredis "github.com/redis/go-redis/v9"
//		"github.com/ratelimitkit/ratelimit"
//		rlredis "github.com/ratelimitkit/ratelimit/redis"
//	)
//
//	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	lim, err := rlredis.NewTokenBucket(client, ratelimit.PerSecond(10), 20, rlredis.WithPrefix("api:"))
//	...
//	if !lim.Allow(clientIP) { ... }
//
// # One round trip per decision
//
// Each decision runs one Lua script in Redis, which reads the key's state,
// applies the algorithm's step and writes the state back, atomically:
// there is no read-then-write from the client. The scripts are one Redis
// Functions library (Redis 7.0 or later), loaded on first use on every
// master and called by FCALL, so that their helpers are built once, when
// the library loads, not at every call; where the library is missing (a
// fresh server, FUNCTION FLUSH, a new master) the first call that finds it
// so loads it again, and where Functions are unavailable (an older Redis)
// the same scripts run by EVALSHA (EVAL when Redis answers NOSCRIPT).
// State and expiry are written by one SET … PXAT where Redis says it has
// it (7.0 on; SET then PEXPIREAT before). Reservation.Cancel sends one
// more script, which gives the booking back as the in-memory limiter
// would (not after it is due; for the buckets, only while no later booking
// is held), and Reservation.Settle one more (see Costs settled after the
// fact). Reset deletes a key's Redis keys in one more script.
// Redis 3.2 or later is needed (the scripts read TIME before
// writing); the tests run against Redis 7.
//
// A decision is four commands in Redis (the call, TIME, GET, SET), the
// sliding log's too for limits up to 2,048 events (its log is one string);
// above that its log is a list, and a decision runs a few commands more
// (see SlidingLog). Redis runs
// scripts one at a time, so the decisions one key can get per second are
// bounded by the one node that holds it, whatever the number of clients
// or of nodes: about one per script time plus the call's own cost in
// Redis (make bench-redis measures this ceiling for one hot key). Keys
// spread over a cluster's nodes; a key flooded with requests that will be
// denied is better answered locally (WithDenyCache).
//
// # Clock
//
// The scripts take the time from the Redis server (TIME), so application
// servers whose clocks disagree still share one consistent limit. The
// limiter's own clock (WithClock, the system clock by default) is used only
// on the Go side: for Wait's timers, for Reservation.Delay (the time to act
// is the local time the reply arrived plus the server's delay, so never
// early and at most a round trip late), for the deny-cache and the FailLocal
// limiter, and, for the window algorithms, as a reference point near the
// server's time (see FixedWindow); a skew of days changes no decision.
//
// A failover hands the clock to the new master: decisions then follow its
// clock, and every key's state shifts by the two masters' skew. A new
// master whose clock is s behind lets each key wait s longer (a token
// bucket refills s × rate tokens late); one s ahead refills them early,
// up to s × rate extra events per key (a window opens s early). Keep the
// nodes' clocks synchronised (NTP) as for any system that shares time.
//
// # Exact arithmetic in Lua
//
// Lua in Redis computes with doubles, exact for integers below 2^53, and a
// Unix time in nanoseconds (about 1.8e18) is not. The scripts never hold
// one in a number: they split TIME, and the decimal strings of Unix
// nanoseconds that keys store, into seconds and nanoseconds, and compute
// with instants relative to now, which stay below 2^53 ns (about 104 days).
// To keep them there, spans (capacity/rate, a window) are at most 35 days
// and bookings at most 30 days ahead (35 for FixedWindow); constructors
// refuse larger spans with the core's error values, and Reserve refuses a
// later booking (the Reservation is not OK), where the in-memory limiters
// allow about 36.5 years. Fractions of a nanosecond (3 per second spaces events
// 333,333,333⅓ ns apart) are an integer numerator over the rate's count, as
// in the core, so rates do not drift; products such as n intervals are
// computed in Go (128-bit) and passed to the script, and the sliding window
// counter's products of counts and nanoseconds are formed in 26-bit limbs.
//
// The tests replay the core's test vectors (testdata/vectors) and random
// traces against Redis and the in-memory limiters side by side, and demand
// equal Decisions and Reservations field for field. For that the scripts
// can read the limiter's clock, sent with each call, instead of TIME: an
// unexported option that only this package's tests can set.
//
// # Changing the rate
//
// Each limiter's SetRate changes its parameters at run time with the
// in-memory type's semantics (see ratelimit.TokenBucket.SetRate and the
// others): every key from its next decision, a call deciding under either
// the old parameters or the new ones (read once, from an atomic pointer:
// no lock on the hot path). The parameters are the limiter's, in the
// process, not in Redis: an operator changes every instance of a service
// that shares the keys (each replica's limiter), and until all have, each
// decides under its own.
//
// A bucket's state records the parameters it was written under, as a tag
// sent with the parameters at every call (no extra argument): a
// fingerprint of the rate and capacity, a random name of the limiter
// instance, and how many changes it has made. A decision on a state
// written under the call's parameters, or by another instance under
// equal ones, is the usual single round trip. A token bucket's state
// written by the same limiter under earlier parameters is re-expressed as
// in memory, through each change at the instant it happened (up to 8
// earlier parameters are kept): the script replies with the state, the
// limiter re-expresses it in Go in exact arithmetic, and a second round
// trip decides on condition the key still holds that state. This happens
// at most once per key and change. A change's instant is placed on the
// server's clock by its age on the limiter's clock, so within a round
// trip of where it happened.
//
// A state written by another instance under parameters this one does not
// know is read soundly, never with more than this limiter's capacity and
// never letting an event act before a booking it holds: a token bucket is
// empty until the state's TAT and refills at this limiter's rate from then
// (full if the TAT has passed: the key is at rest); a leaky bucket keeps
// its queue, its end rounded up to a whole nanosecond, the places it holds
// counted against this limiter's capacity; the windows read their starts,
// counts and instants as they stand, against this limiter's limit and
// window, as in memory after a change. So while instances disagree, a
// bucket shared by them lets through no more than the largest of their
// configurations allows (often less, as each reads the others' states
// as empty).
//
// A key at rest has no state on Redis (its TTL has ended), so at a raise
// it starts with the new capacity, where an in-memory bucket still held
// keeps the tokens it had. A Cancel of a booking made before this
// limiter's change gives nothing back, as in memory; under FailLocal the
// local limiter changes too, and a deny cache forgets its denials.
//
// # Per-key overrides
//
// SetOverride gives a key (a paying customer's tier) a rate and capacity
// of its own, RemoveOverride takes it away and Override reports it, with
// the in-memory types' semantics: the key's state is re-expressed by the
// rule SetRate follows, at the instant of the change; a later SetRate
// leaves the key alone; its Decisions carry its own Limit, and n up to its
// own limit is accepted. Like SetRate, an override is the limiter's, in
// the process: every instance sharing the keys must set it. A call looks
// its key up in the limiter's table (only once the limiter has had an
// override; a map lookup beside a round trip) and sends the key's own
// parameters; a token bucket's state left under the parameters a change
// replaced is re-expressed at its next decision, as after SetRate (a
// second round trip, once). The table is copied at each change: it is
// meant for a modest number of keys.
//
// # Costs settled after the fact
//
// Every limiter is a ratelimit.Taker: Take decides like AllowN, in one
// round trip, and hands back the booking; Reservation.Settle, on a Take's
// or a Reserve's booking, settles it at its actual cost in one more round
// trip, by the in-memory algorithm's rules (see ratelimit.Reservation.Settle
// and each algorithm's doc). A surplus comes back, at any time, only while
// the booking is what the algorithm's give-back rule needs (a bucket's
// latest booking, a window still counting it, its instants still in the
// log), and only if this limiter has made no rate change and no Reset of
// the key since the booking; an excess is booked as debt on the key, with
// no admission check, in the parameters now in force. The Decision is
// the key's after the settlement. A debt is capped where the backend's
// exact arithmetic ends: a bucket's TAT or a window's carry reaches at
// most 35 days past the settlement (30 for the sliding window counter),
// where in memory the cap is 36.5 years; a debt beyond 2^52 events is cut
// to it. Under FailLocal the local limiter's booking is settled too, and
// answers when Redis fails; under FailOpen a failed Settle answers as for
// a key without history, under FailClosed with an error matching
// ErrUnavailable.
//
// # Keys and Redis Cluster
//
// A user key k is stored under prefix + "{" + k + "}" + a suffix naming the
// algorithm (":tb", ":lb", ":fw", ":slp", ":swc"; ":bh" for Bulkhead; the
// sliding log also names ":sl" and ":slf", its list and floor for limits
// above 2,048, see SlidingLog). The braces make
// k the Redis Cluster hash tag, so all the keys of one decision are in one
// slot, and the scripts work on a cluster. A key
// that is empty or holds '{', '}' or '\' is escaped ('\' as `\\`, '{' as
// `\(`, '}' as `\)`, the empty key as `\_`), so distinct keys never share a
// Redis key and every tag is non-empty. Limiters with different parameters
// must use different prefixes (WithPrefix; default "ratelimit:"); a prefix
// must not hold '{' or '}', which would take over the hash tag (every key
// in one slot, or one decision's keys in several), and the constructors
// refuse one.
//
// Every key written carries a TTL ending at most 2 ms after the key is at
// rest (back to its full allowance), so dropping it then changes no
// decision; a key at rest is deleted rather than written, and a peek
// (AllowN with n = 0) writes nothing. A key holding what the limiter could
// not have written (a value of another type, text, or a state further
// ahead than the algorithm ever books, such as a far-future instant with
// no TTL) is corrupt: the script treats the key as new and replaces or
// deletes the value, and the OnError hook hears ErrCorruptState.
//
// # Failures
//
// Each call to Redis is bounded by a timeout (WithTimeout, default 100 ms).
// When Redis is unreachable, answers with an error, or does not answer in
// time, the failure policy answers instead (WithFailurePolicy): FailLocal
// (the default) asks an in-memory limiter of the same kind and parameters,
// FailOpen allows, FailClosed returns an error matching ErrUnavailable
// (Allow returns false), so that a caller such as httplimit.Middleware
// tells an outage (503) from a denial (429); the OnError hook
// (WithOnError) hears of each failure. No method panics or blocks past the
// timeout, even with a client whose I/O ignores contexts (go-redis without
// ContextTimeoutEnabled: the call then runs on a helper goroutine; enabling
// it saves that goroutine). A call that timed out may still have been
// applied by Redis. A caller's context that ends first is not a failure:
// its error is returned.
//
// FailLocal's limiter also records what Redis booked for this instance,
// and for as long as a key takes to come to rest after a failure, AllowN
// allows only what both Redis and the local limiter allow: so one
// instance never gets more than the limit across a failure, whether Redis
// hangs, is down, or comes back without its state (a restart without
// persistence, a replica promoted before it had the latest writes). n
// instances together get up to n times the limit while Redis is down.
//
// With go-redis's defaults, a refused connection is dialled again and the
// command retried until the timeout, so while Redis is down each call takes
// the whole timeout; a client with MaxRetries: -1 and DialerRetries: 1
// fails at once, and the failure policy answers in well under a
// millisecond.
package redis
