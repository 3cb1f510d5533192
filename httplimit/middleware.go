// Package httplimit puts ratelimit's limiters in front of net/http: server
// middleware that limits requests per key and writes the standard
// rate-limit headers, middleware that bounds requests in flight, and a
// client Transport that paces outbound requests and honours a server's
// Retry-After. It uses the standard library only.
//
// Most servers want Middleware with a key function:
//
//	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20)
//	http.ListenAndServe(addr, httplimit.Middleware(lim)(mux)) // per client IP
//
// or RulesMiddleware for several limits per request (per user, per
// address, global). Every denial is a 429 with Retry-After, in whole
// seconds rounded up, so a client retrying then is allowed if nothing else
// consumed in between.
package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/netmatch"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/charge"
	"github.com/ratelimitkit/ratelimit/internal/field"
	"github.com/ratelimitkit/ratelimit/internal/route"
)

// Denial describes a request the middleware refused.
type Denial struct {
	// Decision is the combined decision: RetryAfter is when to retry.
	ratelimit.Decision
	// Policies names the limits that denied the request. It is shared
	// between requests: do not modify it.
	Policies []string
}

// DeniedFunc writes the response to a request refused by a limit. The
// rate-limit headers and Retry-After are already set on w.
type DeniedFunc func(w http.ResponseWriter, r *http.Request, d Denial)

// ErrorFunc writes the response to a request the middleware could not
// decide: its key function failed (an error matching ErrNoKey), its cost
// cannot be charged (ErrInvalidCost), or the limiter failed (a remote
// backend unreachable) while failing closed.
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// The options of this package say, by their type, which middleware reads
// them: a LimitOption configures Middleware, a RulesOption
// RulesMiddleware, a ConcurrencyOption ConcurrencyMiddleware. A
// ResponseOption, how a limited request is answered, configures both
// Middleware and RulesMiddleware; WithProblemJSON configures all three.
// Passing an option to a middleware that does not read it does not
// compile.

// A LimitOption configures Middleware.
type LimitOption interface{ applyLimit(*limitConfig) }

// A RulesOption configures RulesMiddleware.
type RulesOption interface{ applyRules(*rulesConfig) }

// A ConcurrencyOption configures ConcurrencyMiddleware.
type ConcurrencyOption interface {
	applyConcurrency(*concurrencyConfig)
}

// A ResponseOption configures what Middleware and RulesMiddleware share:
// how they answer (the headers, the denied and error responses, the
// failure policy), whom they exempt, and what a request costs.
type ResponseOption interface {
	LimitOption
	RulesOption
}

// A CommonOption configures every middleware of this package.
type CommonOption interface {
	LimitOption
	RulesOption
	ConcurrencyOption
}

// response is what Middleware and RulesMiddleware read alike: how they
// answer. The defaults are set by newResponse and finish.
type response struct {
	headers  Headers                                // IETFHeaders
	denied   DeniedFunc                             // 429, text or problem+json
	onError  ErrorFunc                              // defaultError
	problem  bool                                   // false: text/plain bodies
	failOpen bool                                   // false: fail closed
	report   func(*http.Request, error)             // with failOpen: none
	priority func(*http.Request) ratelimit.Priority // WithPriority; nil: none
	logf     func(string)                           // defaultError's log: log.Print
	ip       KeyFunc                                // ByIP()
	user     KeyFunc                                // none
	exempt   exempt                                 // none
	cost     func(*http.Request) int                // none: 1 event a request
}

func newResponse() response { return response{headers: IETFHeaders} }

// finish fills in the defaults that depend on other options.
func (c *response) finish() {
	if c.ip == nil {
		c.ip = ByIP()
	}
	if c.denied == nil {
		c.denied = deniedText
		if c.problem {
			c.denied = deniedProblem
		}
	}
	if c.logf == nil {
		c.logf = func(s string) { log.Print(s) }
	}
	if c.onError == nil {
		c.onError = defaultError(c.logf)
	}
}

// undecided answers a request the middleware could not decide, the one
// error path of Middleware and RulesMiddleware. If the limiter failed
// (limiterFailed, and err is not a missing key) and WithFailOpen is set,
// the request goes on to next, after report; otherwise the error handler
// answers.
func (c *response) undecided(w http.ResponseWriter, r *http.Request, next http.Handler, err error, limiterFailed bool) {
	if limiterFailed && c.failOpen && !errors.Is(err, ErrNoKey) {
		if c.report != nil {
			c.report(r, err)
		}
		next.ServeHTTP(w, r)
		return
	}
	c.onError(w, r, err)
}

// limitConfig is what Middleware reads.
type limitConfig struct {
	response
	key    KeyFunc       // ByIP()
	name   string        // "default"
	window time.Duration // 0: the limiter's Window
}

func newLimitConfig(opts []LimitOption) *limitConfig {
	c := &limitConfig{response: newResponse(), name: "default"}
	for _, o := range opts {
		o.applyLimit(c)
	}
	if c.key == nil {
		c.key = ByIP()
	}
	c.finish()
	return c
}

// rulesConfig is what RulesMiddleware reads.
type rulesConfig struct {
	response
	class func(*http.Request) string // nil: the rule classes are patterns
}

func newRulesConfig(opts []RulesOption) *rulesConfig {
	c := &rulesConfig{response: newResponse()}
	for _, o := range opts {
		o.applyRules(c)
	}
	c.finish()
	return c
}

// concurrencyConfig is what ConcurrencyMiddleware reads.
type concurrencyConfig struct {
	busy       http.HandlerFunc // 503, text or problem+json
	problem    bool             // false: a text/plain body
	wait       bool             // false: TryAcquire
	retryAfter time.Duration    // 1s
}

func newConcurrencyConfig(opts []ConcurrencyOption) *concurrencyConfig {
	c := &concurrencyConfig{retryAfter: time.Second}
	for _, o := range opts {
		o.applyConcurrency(c)
	}
	if c.busy == nil {
		c.busy = busyText
		if c.problem {
			c.busy = busyProblem
		}
	}
	return c
}

type limitOption func(*limitConfig)

func (f limitOption) applyLimit(c *limitConfig) { f(c) }

type rulesOption func(*rulesConfig)

func (f rulesOption) applyRules(c *rulesConfig) { f(c) }

type concurrencyOption func(*concurrencyConfig)

func (f concurrencyOption) applyConcurrency(c *concurrencyConfig) { f(c) }

type responseOption func(*response)

func (f responseOption) applyLimit(c *limitConfig) { f(&c.response) }
func (f responseOption) applyRules(c *rulesConfig) { f(&c.response) }

type problemOption struct{}

func (problemOption) applyLimit(c *limitConfig)             { c.problem = true }
func (problemOption) applyRules(c *rulesConfig)             { c.problem = true }
func (problemOption) applyConcurrency(c *concurrencyConfig) { c.problem = true }

// withLog replaces the default error handler's log (tests).
func withLog(f func(string)) ResponseOption {
	return responseOption(func(c *response) { c.logf = f })
}

// WithKey sets Middleware's key function (default ByIP()).
func WithKey(f KeyFunc) LimitOption { return limitOption(func(c *limitConfig) { c.key = f }) }

// WithPolicy names Middleware's limit in the RateLimit headers (default
// "default") and gives its window, the w of RateLimit-Policy, rounded up to
// whole seconds. A window of 0 (the default) takes the limiter's own, if it
// has a Window method as the limiters of package ratelimit do (how long an
// empty allowance takes to refill); a negative window writes no w. The
// quota q is the Decision's Limit.
func WithPolicy(name string, window time.Duration) LimitOption {
	return limitOption(func(c *limitConfig) { c.name, c.window = name, window })
}

// WithUser sets how a request's authenticated user is found, such as
// ByUser(f): RulesMiddleware's key for per-user rules, and for both
// middlewares the user that user exemptions (WithExemptUsers, an "exempt
// user" rule) compare. A request it finds no user for gets the error
// handler when a per-user rule applies, and is not exempt as a user.
// Rules with per-user limits or user exemptions require it, as does
// WithExemptUsers. It must return only an identity the request has proved
// (a verified session or token), never one the client merely names.
func WithUser(f KeyFunc) ResponseOption { return responseOption(func(c *response) { c.user = f }) }

// WithClientIP sets how a request's client address is found (default
// ByIP()): RulesMiddleware's key for per-IP rules, and for both
// middlewares the address that address exemptions (WithExempt, an
// "exempt" rule) compare. Behind proxies, give ClientIP with your trusted
// proxies, the same function that keys the limit: an exemption then
// believes a forwarded header exactly as far as the key does.
func WithClientIP(f KeyFunc) ResponseOption { return responseOption(func(c *response) { c.ip = f }) }

// WithExempt exempts client addresses in prefixes from the limits: such a
// request goes on to the next handler without consuming anything and
// without rate-limit headers. The address is the one WithClientIP finds
// (default: RemoteAddr, no forwarded header believed); an IPv4-mapped
// IPv6 address counts as the IPv4 address, and an address group, such as
// the /64 ClientIP keys IPv6 by, only if a prefix holds it whole. A
// request whose address cannot be found is not exempt. IPv4-mapped
// prefixes are read as IPv4; zones are dropped.
func WithExempt(prefixes ...netip.Prefix) ResponseOption {
	ps := make([]netip.Prefix, len(prefixes))
	for i, p := range prefixes {
		ps[i] = netmatch.Unmap(p)
	}
	return responseOption(func(c *response) { c.exempt.prefixes = append(c.exempt.prefixes, ps...) })
}

// WithExemptUsers exempts the given users from the limits, as WithExempt
// does addresses. The user is the one WithUser finds, which must then be
// given: the middleware panics without it.
func WithExemptUsers(ids ...string) ResponseOption {
	ids = slices.Clone(ids)
	return responseOption(func(c *response) {
		if c.exempt.users == nil {
			c.exempt.users = make(map[string]bool, len(ids))
		}
		for _, id := range ids {
			c.exempt.users[id] = true
		}
	})
}

// WithClass sets how RulesMiddleware names a request's class, for classes
// that are not ServeMux patterns (default: the rule classes are patterns,
// matched against the request as a ServeMux matches them). f must name a
// class for every request: a class no rule has gets only the "*" rules,
// and "" means f could not tell, which the middleware refuses with an
// error matching ErrNoClass (by default 500 Internal Server Error, logged)
// rather than let the request through unlimited.
func WithClass(f func(r *http.Request) string) RulesOption {
	return rulesOption(func(c *rulesConfig) { c.class = f })
}

// ErrNoClass means RulesMiddleware could not tell a request's class: its
// WithClass function returned "". The request is refused through the
// error handler, by default with 500 Internal Server Error.
var ErrNoClass = errors.New("httplimit: the class function named no class for the request")

// WithHeaders selects the rate-limit headers written on every response
// (default IETFHeaders; 0 writes none but Retry-After on denials).
func WithHeaders(h Headers) ResponseOption {
	return responseOption(func(c *response) { c.headers = h })
}

// WithDeniedHandler replaces the response to a denied request (default: 429
// Too Many Requests with a one-line text body, or problem+json with
// WithProblemJSON).
func WithDeniedHandler(f DeniedFunc) ResponseOption {
	return responseOption(func(c *response) { c.denied = f })
}

// WithProblemJSON makes the default denied response an RFC 9457
// application/problem+json body of the draft's "quota-exceeded" type,
// listing the violated policies; and the default busy response one of
// its "temporary-reduced-capacity" type.
func WithProblemJSON() CommonOption { return problemOption{} }

// WithErrorHandler replaces the response to a request the middleware could
// not decide. The default answers 403 Forbidden to a request without a key
// (ErrNoKey), 500 Internal Server Error to one without a class
// (ErrNoClass) or with a negative cost (ErrInvalidCost), 429 Too Many
// Requests without Retry-After to one that costs more than the limit
// allows at once (ErrInvalidCost and ratelimit.ErrExceedsLimit; see
// WithCost), and 503 Service Unavailable with Retry-After: 1 to a limiter
// error.
func WithErrorHandler(f ErrorFunc) ResponseOption {
	return responseOption(func(c *response) { c.onError = f })
}

// WithFailOpen lets requests through, without rate-limit headers, when the
// limiter fails (a remote backend unreachable), after calling report (if
// not nil) with the error. The default fails closed: the error handler
// answers. A request without a key is refused either way.
func WithFailOpen(report func(r *http.Request, err error)) ResponseOption {
	return responseOption(func(c *response) { c.failOpen, c.report = true, report })
}

// WithBusyHandler replaces ConcurrencyMiddleware's response when no permit
// is free (default: 503 Service Unavailable with a one-line body).
// Retry-After is already set.
func WithBusyHandler(f http.HandlerFunc) ConcurrencyOption {
	return concurrencyOption(func(c *concurrencyConfig) { c.busy = f })
}

// WithWait makes ConcurrencyMiddleware wait for a permit with Acquire, as
// far as the bulkhead's own bounds on waiting and the request's context
// allow, instead of answering at once when none is free.
func WithWait() ConcurrencyOption {
	return concurrencyOption(func(c *concurrencyConfig) { c.wait = true })
}

// WithRetryAfter sets the Retry-After of ConcurrencyMiddleware's 503,
// rounded up to whole seconds (default 1s).
func WithRetryAfter(d time.Duration) ConcurrencyOption {
	return concurrencyOption(func(c *concurrencyConfig) { c.retryAfter = d })
}

// Middleware returns middleware that limits each request by lim under the
// key of WithKey (default: the client's IP address), one event a request
// or, with WithCost, the request's cost.
//
// An allowed request gets the rate-limit headers (WithHeaders) and goes on
// to the next handler. A denied one gets them, Retry-After (the Decision's
// RetryAfter rounded up to whole seconds, so retrying then succeeds if
// nothing else consumed meanwhile) and the denied handler: by default 429
// Too Many Requests. A request whose key cannot be determined, and, unless
// WithFailOpen, one whose limiter fails, gets the error handler.
//
// The RateLimit-Policy quota q is the Decision's Limit; to say more about
// several limits use RulesMiddleware, or a ratelimit.Multi as lim (its
// headers describe the strictest part under one policy name).
//
// A ratelimit.Shadow as lim tries a limit out: every request goes on, and
// no rate-limit header is written (the shadow's decisions go to its
// observer).
//
// A request exempt by WithExempt (its client address, as WithClientIP
// reads it) or WithExemptUsers (its user, as WithUser finds it) goes on
// before the key is asked for: nothing consumed, no header written. It
// panics if WithExemptUsers is given without WithUser.
//
// With WithCost, a request costs what its function says, and, when lim
// is a ratelimit.Taker, the charge is a booking the handler can Settle;
// the handler then gets a copy of the request carrying it (a dozen
// allocations more, on that path only).
//
// On the allowed path it allocates nothing but the headers it writes (two
// allocations) and what lim and the key function do (ByIP: nothing for
// IPv4). It panics if lim is nil.
func Middleware(lim ratelimit.Limiter, opts ...LimitOption) func(http.Handler) http.Handler {
	if lim == nil {
		panic("httplimit: Middleware with a nil limiter")
	}
	c := newLimitConfig(opts)
	if c.exempt.user() && c.user == nil {
		panic("httplimit: WithExemptUsers without a WithUser function to find the user")
	}
	m := &limitMiddleware{cfg: c, lim: lim, item: field.String(c.name), names: []string{c.name}, window: c.window}
	_, m.shadow = lim.(*ratelimit.Shadow)
	if c.cost != nil {
		m.taker, _ = lim.(ratelimit.Taker)
	}
	if w, ok := lim.(interface{ Window() time.Duration }); ok && m.window == 0 {
		m.window = w.Window()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

type limitMiddleware struct {
	cfg    *limitConfig
	lim    ratelimit.Limiter
	item   string
	names  []string
	window time.Duration // RateLimit-Policy's w; <= 0: none
	policy atomic.Pointer[cachedPolicy]
	shadow bool            // lim is a ratelimit.Shadow: it never denies, and gets no headers
	taker  ratelimit.Taker // lim, if WithCost is given and lim can book for Settle
}

// cachedPolicy is the RateLimit-Policy value for the last Limit seen: a
// limiter's Limit does not change, so it is built once.
type cachedPolicy struct {
	limit int
	value string
}

func (m *limitMiddleware) policyFor(limit int) string {
	if p := m.policy.Load(); p != nil && p.limit == limit {
		return p.value
	}
	p := &cachedPolicy{limit: limit, value: field.PolicyItem(m.item, limit, m.window)}
	m.policy.Store(p)
	return p.value
}

func (m *limitMiddleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := m.cfg
	if c.exempt.any() && c.exempt.covers(c.subject(r, c.exempt.ip(), c.exempt.user())) {
		next.ServeHTTP(w, r)
		return
	}
	key, err := c.key(r)
	if err != nil {
		c.undecided(w, r, next, err, false)
		return
	}
	if c.cost != nil {
		m.serveCost(w, r, next, key)
		return
	}
	d, err := m.lim.AllowN(c.limiterContext(r), key, 1)
	if err != nil {
		c.undecided(w, r, next, err, true)
		return
	}
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	v := view{item: m.item, d: d, retry: d.RetryAfter, denied: !d.Allowed}
	if c.headers&IETFHeaders != 0 {
		v.policy = m.policyFor(d.Limit)
	}
	write(w.Header(), c.headers, &v)
	if !d.Allowed {
		c.denied(w, r, Denial{Decision: d, Policies: m.names})
		return
	}
	next.ServeHTTP(w, r)
}

// RulesMiddleware returns middleware that checks each request against
// rules, all or nothing (see ratelimit.Rules.Check): the request's class
// picks the rules, WithUser and WithClientIP give the keys of per-user and
// per-IP rules. A request of a class no rule applies to goes through
// untouched.
//
// The rule classes are net/http ServeMux patterns ("POST /login",
// "GET /items/{id}", "/files/", "api.example.com/"), and the middleware
// matches them against the request itself, with ServeMux's own rules: the
// most specific pattern wins, HEAD matches GET patterns, a pattern without
// a method matches every method, a host pattern matches that host only,
// and a path ServeMux would redirect (a missing trailing slash, an unclean
// path) counts as the pattern it is redirected to. So the rule applies
// wherever the middleware is mounted and whatever is between it and the
// handler:
//
//	http.ListenAndServe(addr, httplimit.RulesMiddleware(rules)(mux))
//	mux.Handle("POST /login", httplimit.RulesMiddleware(rules)(login))
//	root.Handle("/api/", http.StripPrefix("/api", httplimit.RulesMiddleware(rules)(apiMux)))
//
// The pattern matches the path as the middleware receives it: under
// StripPrefix, the path without the prefix, like the patterns of the mux
// it protects. A request that matches no rule there, but whose path was
// rewritten on its way, is matched once more as the client sent it
// (Request.RequestURI), so that rules written with the full path apply
// too. The patterns the application's mux routes by do not matter: a rule
// on "GET /items/{id}" limits "GET /items/new" even if the mux has a route
// of its own for it. A host pattern matches the Host header, which the
// client writes: it protects what a mux routes by that host, not a handler
// served under every host. Behind a router that matches paths otherwise
// than ServeMux (case, escapes, trailing slashes), write the rules to
// cover what it routes, or name classes with WithClass from inside it.
//
// It panics if a rule class is not a valid pattern, or two classes are
// patterns ServeMux would refuse to register together (equal, or
// conflicting): such a rule could never apply. With WithClass, the classes
// are the caller's names and none of this applies.
//
// The headers describe every rule of the class in RateLimit-Policy, each
// as "name";q=burst;w=window, where the window is how long an empty
// allowance takes to refill (ratelimit.Rule.Window, rounded up to whole
// seconds): a client sending at most q requests in any w seconds is never
// limited. RateLimit reports the strictest rule (ratelimit.Strictest) with
// its own remaining quota and effective window. A denial lists the rules
// that denied in Denial.Policies, and Retry-After covers them all.
//
// A request exempt by the rules ("exempt" lines, see ratelimit.ParseRules)
// or by WithExempt or WithExemptUsers goes on with nothing consumed and no
// header written. Its address and user are read by the WithClientIP and
// WithUser functions, as the keys are; when only an exemption needs one
// and the function finds none, the request is simply not exempt.
//
// The middleware follows rules.Reload: each request is decided under one
// whole configuration, the one current when it arrives. A reload to rules
// it could not have been built with (a per-user rule without WithUser, a
// class that is not a pattern) is logged once, and requests then get the
// error handler (by default 503) until a good configuration is loaded.
//
// With WithCost, a request is charged its cost under every rule of its
// class. When every rule's limiter is a ratelimit.Taker (shadow rules
// aside), the charge is a booking under each rule that the handler can
// Settle; with more than one rule, each is peeked at before anything is
// booked, so that a request one rule denies books nothing under the
// others. A shadow rule is charged as usual and never settled.
//
// Errors are handled as by Middleware. It panics if rules is nil, or if
// some rule counts per user, or a user is exempt, and WithUser is not
// given.
func RulesMiddleware(rules *ratelimit.Rules, opts ...RulesOption) func(http.Handler) http.Handler {
	if rules == nil {
		panic("httplimit: RulesMiddleware with nil rules")
	}
	c := newRulesConfig(opts)
	m := &rulesMiddleware{cfg: c, rules: rules}
	v := m.newView(rules.Snapshot())
	if v.err != nil {
		panic(v.err.Error())
	}
	m.view.Store(v)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

// patternMux returns a ServeMux that routes to the rule classes, each a
// pattern, so that it names the class of a request as ServeMux would (see
// internal/route, which the replay command matches with too). It panics
// on a class ServeMux refuses.
func patternMux(classes []string) *http.ServeMux {
	mux, err := route.Mux(classes)
	if err != nil {
		var pe *route.PatternError
		if errors.As(err, &pe) {
			panic(fmt.Sprintf("httplimit: rule class %q is not a ServeMux pattern the middleware can match (%v); name classes yourself with WithClass", pe.Class, pe.Reason))
		}
		panic(err.Error())
	}
	return mux
}

type rulesMiddleware struct {
	cfg   *rulesConfig
	rules *ratelimit.Rules
	view  atomic.Pointer[rulesView] // of the rules' last snapshot seen
}

// rulesView is what the middleware derives from one snapshot of the
// rules, built once per configuration: a request reads every class from
// the one view, so it never mixes two configurations.
type rulesView struct {
	snap     *ratelimit.Rules
	classes  map[string]*classView
	every    *classView     // classes without rules of their own
	patterns *http.ServeMux // the rule classes as patterns; nil with WithClass
	// exemptIP, exemptUser: exemptions (the rules' or the options') need
	// the address, the user read of every request.
	exemptIP, exemptUser bool
	// err is why a reloaded configuration cannot be served (a per-user
	// rule without WithUser, a class that is no pattern): every request
	// gets the error handler rather than pass unlimited.
	err error
}

// newView derives the view of snap; a configuration it cannot serve gets
// a view whose err says why.
func (m *rulesMiddleware) newView(snap *ratelimit.Rules) (v *rulesView) {
	c := m.cfg
	v = &rulesView{snap: snap, classes: make(map[string]*classView)}
	v.every = newClassView(snap.For("*"))
	needUser := v.every.needUser
	for _, class := range snap.Classes() {
		cv := newClassView(snap.For(class))
		v.classes[class] = cv
		needUser = needUser || cv.needUser
	}
	if needUser && c.user == nil {
		v.err = errors.New("httplimit: rules count per user but no WithUser key function was given")
		return v
	}
	rulesIP, rulesUser := snap.HasExemptions()
	if (rulesUser || c.exempt.user()) && c.user == nil {
		v.err = errors.New("httplimit: user exemptions without a WithUser function to find the user")
		return v
	}
	v.exemptIP = rulesIP || c.exempt.ip()
	v.exemptUser = rulesUser || c.exempt.user()
	if c.class == nil {
		defer func() {
			if e := recover(); e != nil {
				v.err = fmt.Errorf("%v", e)
			}
		}()
		v.patterns = patternMux(snap.Classes())
	}
	return v
}

// current returns the view of the rules' configuration now: one atomic
// load and a compare, unless a reload happened, when the first request to
// see it builds the new view.
func (m *rulesMiddleware) current() *rulesView {
	snap := m.rules.Snapshot()
	if v := m.view.Load(); v.snap == snap {
		return v
	}
	v := m.newView(snap)
	if v.err != nil {
		m.cfg.logf(v.err.Error() + " (after a reload of the rules): requests are refused")
	}
	m.view.Store(v)
	return v
}

// classView is one class's rules, looked up once, and what the headers say
// about them, built once: index i of names and items is rule i of set, and
// decision i of set.Check.
type classView struct {
	set              *ratelimit.RuleSet
	names            []string
	items            []string // names as sf-strings
	policy           string   // RateLimit-Policy value, shadow rules left out
	shadows          int      // how many rules are shadow rules
	needUser, needIP bool
	// limits holds rule i's limiter as a Taker (its Key to fill in), and
	// scopes its scope, for WithCost's bookings; limits is nil if some
	// rule's limiter is no Taker.
	limits []charge.Limit
	scopes []ratelimit.Scope
}

func newClassView(set *ratelimit.RuleSet) *classView {
	cv := &classView{set: set}
	rules := set.Rules()
	limits, canTake := charge.LimitsOf(rules)
	cv.limits = limits
	for _, r := range rules {
		cv.scopes = append(cv.scopes, r.KeyScope())
		item := field.String(r.Name)
		cv.names = append(cv.names, r.Name)
		cv.items = append(cv.items, item)
		cv.needUser = cv.needUser || r.KeyScope() == ratelimit.PerUser
		cv.needIP = cv.needIP || r.KeyScope() == ratelimit.PerIP
		if r.Shadow {
			cv.shadows++
			continue
		}
		if cv.policy != "" {
			cv.policy += ", "
		}
		cv.policy += field.PolicyItem(item, r.Burst, r.Window())
	}
	if !canTake {
		cv.limits = nil
	}
	return cv
}

func (m *rulesMiddleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := m.cfg
	rv := m.current()
	if rv.err != nil {
		c.undecided(w, r, next, rv.err, false)
		return
	}
	var class string
	if c.class != nil {
		if class = c.class(r); class == "" {
			c.undecided(w, r, next, ErrNoClass, false)
			return
		}
	} else {
		class = rv.match(r)
	}
	cv, ok := rv.classes[class]
	if !ok {
		cv = rv.every
	}
	if len(cv.names) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	var who ratelimit.Subject
	var err error
	if cv.needUser || rv.exemptUser {
		if who.User, err = c.user(r); err != nil {
			if cv.needUser {
				c.undecided(w, r, next, err, false)
				return
			}
			who.User = ""
		}
	}
	if cv.needIP || rv.exemptIP {
		if who.IP, err = c.ip(r); err != nil {
			if cv.needIP {
				c.undecided(w, r, next, err, false)
				return
			}
			who.IP = ""
		}
	}
	if (rv.exemptIP || rv.exemptUser) && (c.exempt.covers(who) || cv.set.Exempt(who)) {
		next.ServeHTTP(w, r)
		return
	}
	if c.cost != nil {
		m.serveCost(w, r, next, cv, who)
		return
	}
	d, err := cv.set.Check(c.limiterContext(r), who, 1)
	if err != nil {
		c.undecided(w, r, next, err, true)
		return
	}
	if cv.shadows == len(cv.names) { // only shadow rules: nothing to tell the client
		next.ServeHTTP(w, r)
		return
	}
	i := d.Strictest() // never a shadow rule's: its Decision bounds nothing
	v := view{policy: cv.policy, item: cv.items[i], d: d.At(i), retry: d.RetryAfter, denied: !d.Allowed}
	write(w.Header(), c.headers, &v)
	if !d.Allowed {
		var violated []string
		for j := range d.Len() {
			if !d.At(j).Allowed {
				violated = append(violated, cv.names[j])
			}
		}
		c.denied(w, r, Denial{Decision: d.Decision, Policies: violated})
		return
	}
	next.ServeHTTP(w, r)
}

// match returns the rule pattern that matches r, or "" for none: first on
// the request as it is, then, if its path was rewritten on the way (by
// StripPrefix), as the client sent it.
func (m *rulesView) match(r *http.Request) string {
	if _, p := m.patterns.Handler(r); p != "" && m.classes[p] != nil {
		return p
	}
	sent := r.RequestURI
	if sent == "" || sent == "*" {
		return ""
	}
	if i := strings.IndexByte(sent, '?'); i >= 0 {
		sent = sent[:i]
	}
	if !strings.HasPrefix(sent, "/") { // absolute form: scheme://host/path
		u, err := url.ParseRequestURI(sent)
		if err != nil {
			return ""
		}
		sent = u.EscapedPath()
	}
	if sent == r.URL.EscapedPath() {
		return ""
	}
	u, err := url.ParseRequestURI(sent)
	if err != nil {
		return ""
	}
	orig := *r
	orig.URL = &url.URL{Scheme: r.URL.Scheme, Host: r.URL.Host, Path: u.Path, RawPath: u.RawPath}
	if _, p := m.patterns.Handler(&orig); p != "" && m.classes[p] != nil {
		return p
	}
	return ""
}

func deniedText(w http.ResponseWriter, r *http.Request, d Denial) {
	http.Error(w, "too many requests, retry after "+w.Header().Get(hdrRetryAfter)+"s", http.StatusTooManyRequests)
}

// problem is an RFC 9457 problem detail with the draft's extension member.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Violated []string `json:"violated-policies,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // cannot fail: strings and an int
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

func deniedProblem(w http.ResponseWriter, r *http.Request, d Denial) {
	writeProblem(w, problem{
		Type:     problemBaseURI + "quota-exceeded",
		Title:    "Too Many Requests",
		Status:   http.StatusTooManyRequests,
		Detail:   "retry after " + w.Header().Get(hdrRetryAfter) + " seconds",
		Violated: d.Policies,
	})
}

// defaultError returns the default error handler: 403 for a request
// without a key, 500 for one without a class or with a negative cost (a
// misconfiguration, logged once by logf: a flood of such requests must not
// flood the log), 429 without Retry-After for a cost above the limit
// (logged once too), 503 for a limiter that failed.
func defaultError(logf func(string)) ErrorFunc {
	var noClass, negative, tooLarge sync.Once
	logOnce := func(once *sync.Once, r *http.Request, err error, status int) {
		once.Do(func() {
			logf(fmt.Sprintf("%v (%s %.100q): refused with %d; later such requests are refused without a log line", err, r.Method, r.URL.Path, status))
		})
	}
	return func(w http.ResponseWriter, r *http.Request, err error) {
		switch {
		case errors.Is(err, ErrNoKey):
			http.Error(w, "forbidden: the request has no rate-limit key", http.StatusForbidden)
		case errors.Is(err, ErrNoClass):
			logOnce(&noClass, r, err, http.StatusInternalServerError)
			http.Error(w, "internal server error: the rate limit for this request is misconfigured", http.StatusInternalServerError)
		case errors.Is(err, ErrInvalidCost) && errors.Is(err, ratelimit.ErrExceedsLimit):
			// It can never pass: a Retry-After would only invite retries.
			logOnce(&tooLarge, r, err, http.StatusTooManyRequests)
			http.Error(w, "too many requests: this request costs more than the limit allows at once", http.StatusTooManyRequests)
		case errors.Is(err, ErrInvalidCost):
			logOnce(&negative, r, err, http.StatusInternalServerError)
			http.Error(w, "internal server error: the rate limit for this request is misconfigured", http.StatusInternalServerError)
		default:
			// A limiter that failed (a remote backend down) is an outage,
			// not a denial: ask clients to come back in a second rather
			// than at once.
			w.Header().Set(hdrRetryAfter, "1")
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		}
	}
}

// formatSeconds formats whole seconds for Retry-After.
func formatSeconds(d time.Duration) string { return strconv.FormatInt(field.CeilSeconds(d), 10) }
