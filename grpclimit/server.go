// Package grpclimit puts ratelimit's limiters in front of gRPC: server
// interceptors that limit calls per key, by one limiter, by a set of rules
// or by a bound on calls in flight, answering a denial with
// codes.ResourceExhausted and the standard google.rpc.RetryInfo and
// QuotaFailure details; and client interceptors that pace outbound calls
// and hold them after a server's RetryInfo.
//
// Most servers want a ServerLimit from RateLimit or RulesLimit, with its
// Unary and Stream methods as interceptors:
//
//	lim, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20)
//	l := grpclimit.RateLimit(lim) // per client address
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream))
//
// A denied call gets codes.ResourceExhausted with a RetryInfo whose delay
// is the Decision's RetryAfter (retrying then succeeds if nothing else
// consumed in between), a QuotaFailure naming the violated policies, and
// the rate-limit fields in the response header metadata: "ratelimit-policy"
// and "ratelimit" with the syntax of the HTTP fields of
// draft-ietf-httpapi-ratelimit-headers, as httplimit writes them, plus
// "retry-after" in whole seconds.
package grpclimit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/charge"
	"github.com/ratelimitkit/ratelimit/internal/field"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Concurrency bounds how many calls are in flight at once: a semaphore.
// It is httplimit.Concurrency; *ratelimit.Bulkhead and
// *ratelimit.AdaptiveBulkhead implement it.
type Concurrency = httplimit.Concurrency

var (
	_ Concurrency = (*ratelimit.Bulkhead)(nil)
	_ Concurrency = (*ratelimit.AdaptiveBulkhead)(nil)
)

// Response metadata keys written by the server interceptors.
const (
	MDRateLimitPolicy = "ratelimit-policy"
	MDRateLimit       = "ratelimit"
	MDRetryAfter      = "retry-after"
)

// An Option configures a ServerLimit. Each says which constructors read
// it; given to another, it panics, rather than be silently ignored.
type Option func(*config)

// The constructors, as a set of bits: which ones read an option.
const (
	forRate = 1 << iota
	forRules
	forConcurrency
	forAll = forRate | forRules | forConcurrency
)

// use records that the option name was given, and which constructors read
// it (withMessages: also any, if WithMessages is given).
func (c *config) use(name string, readers int, withMessages bool) {
	c.uses = append(c.uses, optionUse{name, readers, withMessages})
}

type optionUse struct {
	name         string
	readers      int
	withMessages bool
}

// config holds every option with its default, in one place.
type config struct {
	key       KeyFunc                                                   // RateLimit, messages: ByPeer()
	user      KeyFunc                                                   // RulesLimit: none
	ip        KeyFunc                                                   // RulesLimit: ByPeer()
	name      string                                                    // RateLimit: "default"
	window    time.Duration                                             // RateLimit: 0, no w
	metadata  bool                                                      // true
	onError   func(ctx context.Context, method string, err error) error // PermissionDenied / Unavailable
	failOpen  bool                                                      // false: fail closed
	report    func(ctx context.Context, method string, err error)       // with failOpen
	messages  ratelimit.Limiter                                         // none
	busyCode  codes.Code                                                // ConcurrencyLimit: ResourceExhausted
	busyFor   time.Duration                                             // ConcurrencyLimit: 1s
	busyWait  bool                                                      // ConcurrencyLimit: TryAcquire
	cost      func(ctx context.Context, fullMethod string) int          // RateLimit, RulesLimit: 1 a call
	optErrors []string
	uses      []optionUse

	priority func(ctx context.Context, fullMethod string) ratelimit.Priority // RateLimit: none
}

func newConfig(kind int, constructor string, opts []Option) *config {
	c := &config{name: "default", metadata: true, busyCode: codes.ResourceExhausted, busyFor: time.Second}
	for _, o := range opts {
		o(c)
	}
	for _, u := range c.uses {
		if u.readers&kind == 0 && !(u.withMessages && c.messages != nil) {
			msg := u.name + " does not apply to " + constructor
			if u.withMessages {
				msg += " without WithMessages"
			}
			c.optErrors = append(c.optErrors, msg)
		}
	}
	if c.key == nil {
		c.key = ByPeer()
	}
	if c.ip == nil {
		c.ip = ByPeer()
	}
	if c.onError == nil {
		c.onError = defaultError
	}
	if len(c.optErrors) > 0 {
		panic("grpclimit: " + strings.Join(c.optErrors, "; "))
	}
	return c
}

// WithKey sets the key function of RateLimit, and of WithMessages for any
// constructor (default ByPeer()).
func WithKey(f KeyFunc) Option {
	return func(c *config) { c.key = f; c.use("WithKey", forRate, true) }
}

// WithUser sets RulesLimit's key function for per-user rules, such as
// ByIdentity(f). Rules with per-user limits require it.
func WithUser(f KeyFunc) Option {
	return func(c *config) { c.user = f; c.use("WithUser", forRules, false) }
}

// WithClientIP sets RulesLimit's key function for per-IP rules (default
// ByPeer()).
func WithClientIP(f KeyFunc) Option {
	return func(c *config) { c.ip = f; c.use("WithClientIP", forRules, false) }
}

// WithPolicy names RateLimit's limit in the metadata and the QuotaFailure
// (default "default") and gives its window, the w of ratelimit-policy,
// rounded up to whole seconds (default 0: no w).
func WithPolicy(name string, window time.Duration) Option {
	return func(c *config) { c.name, c.window = name, window; c.use("WithPolicy", forRate, false) }
}

// WithoutMetadata stops RateLimit and RulesLimit writing the rate-limit
// fields into the header metadata of allowed calls; denials still carry
// them.
func WithoutMetadata() Option {
	return func(c *config) { c.metadata = false; c.use("WithoutMetadata", forRate|forRules, false) }
}

// WithErrorHandler replaces the error returned for a call that could not
// be decided: its key function failed (an error matching ErrNoKey), its
// cost cannot be charged (ErrInvalidCost, see WithCost) or the limiter
// failed while failing closed. The default returns codes.PermissionDenied
// for a call without a key, codes.Internal for a negative cost,
// codes.ResourceExhausted without RetryInfo for a cost above the limit,
// and codes.Unavailable for a limiter failure. f should return a status
// error. RateLimit and RulesLimit read it, and any constructor with
// WithMessages.
func WithErrorHandler(f func(ctx context.Context, fullMethod string, err error) error) Option {
	return func(c *config) { c.onError = f; c.use("WithErrorHandler", forRate|forRules, true) }
}

// WithFailOpen lets calls through, without rate-limit metadata, when the
// limiter fails (a remote backend unreachable), after calling report (if
// not nil) with the error: the policy of httplimit.WithFailOpen. The
// default fails closed. A call without a key is refused either way.
// RateLimit and RulesLimit read it, and any constructor with WithMessages.
func WithFailOpen(report func(ctx context.Context, fullMethod string, err error)) Option {
	return func(c *config) { c.failOpen, c.report = true, report; c.use("WithFailOpen", forRate|forRules, true) }
}

// WithCost makes RateLimit and RulesLimit charge f(ctx, fullMethod)
// events for a call, and for a stream when it opens, instead of one: a
// call charged by the rows it asks for, by the size of what it fetches.
// RulesLimit charges the one cost under every rule of the method, all or
// nothing. The metadata describes the key's state after the charge.
// WithMessages still takes one event per message.
//
// f is called once per call that is not exempt and has a key; it must
// not block, and it runs before the handler, so it may read the incoming
// metadata but not the request message. The interceptor charges exactly
// what f returns, so f must bound any cost the client can name (as
// metadata). What each value does:
//
//   - 1 or more, up to the limit (for rules, the smallest Burst of the
//     method's rules): charged, all or nothing; a denial is the usual
//     ResourceExhausted with RetryInfo.
//   - 0: the call is free, even when the key is exhausted; the metadata
//     shows the key's state as it stands. A client that can make f return
//     0 is not limited at all: return at least 1 unless the call really
//     costs nothing.
//   - More than the limit: the call could never be allowed. It is refused
//     through the error handler with an error matching ErrInvalidCost and
//     ratelimit.ErrExceedsLimit, by default codes.ResourceExhausted
//     without RetryInfo (retrying cannot help).
//   - Negative: f is wrong. The call is refused through the error handler
//     with an error matching ErrInvalidCost and ratelimit.ErrNegativeN, by
//     default codes.Internal.
//
// A refused cost is never let through by WithFailOpen.
//
// With a limiter that implements ratelimit.Taker, the charge is a booking
// that the handler may settle at the actual cost with Settle. A nil f
// charges one event a call, as without the option.
func WithCost(f func(ctx context.Context, fullMethod string) int) Option {
	return func(c *config) { c.cost = f; c.use("WithCost", forRate|forRules, false) }
}

// ErrInvalidCost means the WithCost function gave a call a cost the limit
// cannot charge: a negative one (the error also matches
// ratelimit.ErrNegativeN) or one more than the limit allows at once
// (ratelimit.ErrExceedsLimit). The call is refused through the error
// handler; WithFailOpen does not apply to it.
var ErrInvalidCost = errors.New("grpclimit: the call's cost cannot be charged")

// costs makes the errors of calls whose cost cannot be charged.
var costs = charge.Costs{Pkg: "grpclimit", Unit: "call", Invalid: ErrInvalidCost}

// WithMessages limits the messages a client sends on a stream, in
// addition to the stream's opening: each message the handler receives
// takes one event of lim under the stream's key (WithKey's, for every
// constructor). RecvMsg waits for it, so a client sending too fast is
// slowed by flow control rather than cut off; if the wait cannot finish
// within the stream's deadline, or the limiter fails, RecvMsg returns the
// denial or error status and the message is lost to the handler, which
// should return that error. lim must not be nil.
func WithMessages(lim ratelimit.Limiter) Option {
	return func(c *config) {
		if lim == nil {
			c.optErrors = append(c.optErrors, "WithMessages with a nil limiter")
		}
		c.messages = lim
	}
}

// WithBusyCode sets the code ConcurrencyLimit answers when no permit is
// free: codes.ResourceExhausted (the default) or codes.Unavailable, which
// gRPC clients with a retry policy commonly retry. Other codes panic.
func WithBusyCode(code codes.Code) Option {
	return func(c *config) {
		if code != codes.ResourceExhausted && code != codes.Unavailable {
			c.optErrors = append(c.optErrors, "WithBusyCode takes ResourceExhausted or Unavailable, got "+code.String())
		}
		c.busyCode = code
		c.use("WithBusyCode", forConcurrency, false)
	}
}

// WithBusyRetryAfter sets the RetryInfo delay of ConcurrencyLimit's
// refusal (default 1s); 0 sends no RetryInfo. A negative d panics.
func WithBusyRetryAfter(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.optErrors = append(c.optErrors, "WithBusyRetryAfter with a negative duration "+d.String())
		}
		c.busyFor = d
		c.use("WithBusyRetryAfter", forConcurrency, false)
	}
}

// WithWait makes ConcurrencyLimit wait for a permit with Acquire, as far
// as the bulkhead's own bounds on waiting and the call's context allow,
// instead of refusing at once when none is free.
func WithWait() Option {
	return func(c *config) { c.busyWait = true; c.use("WithWait", forConcurrency, false) }
}

// ServerLimit limits the calls of a gRPC server. Its methods Unary and
// Stream are a grpc.UnaryServerInterceptor and a
// grpc.StreamServerInterceptor. Build it with RateLimit, RulesLimit or
// ConcurrencyLimit; it is safe for concurrent use.
type ServerLimit struct {
	cfg *config
	// Exactly one of the three is set.
	lim   ratelimit.Limiter
	rules *ratelimit.Rules
	conc  Concurrency

	// RateLimit
	taker  ratelimit.Taker // lim, if WithCost is given and lim can book for Settle
	names  []string
	item   string
	policy atomic.Pointer[cachedPolicy]
	// RulesLimit
	view atomic.Pointer[rulesView] // of the rules' last snapshot seen
}

// rulesView is what RulesLimit derives from one snapshot of its rules,
// built once per configuration: a call reads its class from the one view,
// so it never mixes two configurations.
type rulesView struct {
	snap    *ratelimit.Rules
	classes map[string]*classView
	every   *classView
	// the rules exempt some addresses, some users: read them for every call
	exemptIP, exemptUser bool
	// err: why a reloaded configuration cannot be served (a per-user rule
	// or user exemption without WithUser); every call gets it.
	err error
}

func newRulesView(snap *ratelimit.Rules, c *config) *rulesView {
	v := &rulesView{snap: snap, classes: make(map[string]*classView)}
	v.every = newClassView(snap.For("*"))
	needUser := v.every.needUser
	for _, class := range snap.Classes() {
		cv := newClassView(snap.For(class))
		v.classes[class] = cv
		needUser = needUser || cv.needUser
	}
	if needUser && c.user == nil {
		v.err = errors.New("grpclimit: rules count per user but no WithUser key function was given")
		return v
	}
	v.exemptIP, v.exemptUser = snap.HasExemptions()
	if v.exemptUser && c.user == nil {
		v.err = errors.New("grpclimit: rules exempt users but no WithUser key function was given")
	}
	return v
}

// currentView returns the view of the rules' configuration now: one
// atomic load and a compare, unless a reload happened.
func (s *ServerLimit) currentView() *rulesView {
	snap := s.rules.Snapshot()
	if v := s.view.Load(); v.snap == snap {
		return v
	}
	v := newRulesView(snap, s.cfg)
	s.view.Store(v)
	return v
}

type cachedPolicy struct {
	limit int
	value string
}

// classView is what the metadata says about one class, built once.
type classView struct {
	set              *ratelimit.RuleSet // looked up once; decision i is rule i
	rules            []ratelimit.Rule
	items            []string // names as sf-strings
	policy           string   // ratelimit-policy value
	needUser, needIP bool
	// limits holds rule i's limiter as a Taker (its Key to fill in), for
	// WithCost's bookings; nil if some rule's limiter is no Taker.
	limits    []charge.Limit
	allShadow bool // every rule is a shadow rule
}

// RateLimit returns a ServerLimit that takes one event of lim (WithCost:
// the call's cost) for each call, and for each stream when it opens,
// under the key of WithKey (default: the client's address). A denied call gets
// codes.ResourceExhausted with RetryInfo and QuotaFailure details. A call
// whose key cannot be determined, and, unless WithFailOpen, one whose
// limiter fails, gets the error handler's error (WithErrorHandler). It
// panics if lim is nil.
func RateLimit(lim ratelimit.Limiter, opts ...Option) *ServerLimit {
	if lim == nil {
		panic("grpclimit: RateLimit with a nil limiter")
	}
	c := newConfig(forRate, "RateLimit", opts)
	s := &ServerLimit{cfg: c, lim: lim, names: []string{c.name}, item: field.String(c.name)}
	if c.cost != nil {
		s.taker, _ = lim.(ratelimit.Taker)
	}
	return s
}

// RulesLimit returns a ServerLimit that checks each call against rules,
// all or nothing (ratelimit.Rules.Check), with the call's full method name
// ("/pkg.Service/Method") as its class; WithUser and WithClientIP give the
// keys of per-user and per-IP rules. A call of a method no rule applies to
// goes through untouched. The metadata describes every rule of the class
// in ratelimit-policy and the strictest in ratelimit, as
// httplimit.RulesMiddleware's headers do; a denial's QuotaFailure lists the
// rules that denied.
//
// A call exempt by the rules ("exempt" lines, see ratelimit.ParseRules)
// goes through with nothing recorded and no metadata; its address and user
// are read by the WithClientIP and WithUser functions, as the keys are.
//
// It follows rules.Reload: each call is decided under the configuration
// current when it arrives, whole. A reload to rules that need WithUser
// when it was not given makes every call fail with codes.Internal until a
// good configuration is loaded.
//
// It panics if rules is nil, or if some rule counts per user, or a user is
// exempt, and WithUser is not given: such a limit would otherwise refuse
// or pass every call.
func RulesLimit(rules *ratelimit.Rules, opts ...Option) *ServerLimit {
	if rules == nil {
		panic("grpclimit: RulesLimit with nil rules")
	}
	c := newConfig(forRules, "RulesLimit", opts)
	s := &ServerLimit{cfg: c, rules: rules}
	v := newRulesView(rules.Snapshot(), c)
	if v.err != nil {
		panic(v.err.Error())
	}
	s.view.Store(v)
	return s
}

// ConcurrencyLimit returns a ServerLimit that holds a permit of c while a
// call's handler runs, and for the whole life of a stream. When none is
// free it refuses at once (or, with WithWait, when Acquire fails) with
// codes.ResourceExhausted (WithBusyCode: or codes.Unavailable) and a
// RetryInfo of WithBusyRetryAfter (default 1s). c may be a
// *ratelimit.Bulkhead or a *ratelimit.AdaptiveBulkhead. It panics if c is
// nil.
func ConcurrencyLimit(c Concurrency, opts ...Option) *ServerLimit {
	if c == nil {
		panic("grpclimit: ConcurrencyLimit with a nil Concurrency")
	}
	return &ServerLimit{cfg: newConfig(forConcurrency, "ConcurrencyLimit", opts), conc: c}
}

func newClassView(set *ratelimit.RuleSet) *classView {
	cv := &classView{set: set, rules: set.Rules()}
	var policy []string
	limits, canTake := charge.LimitsOf(cv.rules)
	cv.limits = limits
	cv.allShadow = len(cv.rules) > 0
	for _, r := range cv.rules {
		cv.allShadow = cv.allShadow && r.Shadow
		item := field.String(r.Name)
		cv.items = append(cv.items, item)
		policy = append(policy, field.PolicyItem(item, r.Burst, r.Window()))
		cv.needUser = cv.needUser || r.KeyScope() == ratelimit.PerUser
		cv.needIP = cv.needIP || r.KeyScope() == ratelimit.PerIP
	}
	cv.policy = strings.Join(policy, ", ")
	if !canTake {
		cv.limits = nil
	}
	return cv
}

// Unary is a grpc.UnaryServerInterceptor.
func (s *ServerLimit) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	release, ch, err := s.admit(ctx, info.FullMethod, func(md metadata.MD) { grpc.SetHeader(ctx, md) },
		func(md metadata.MD) { grpc.SetTrailer(ctx, md) })
	if err != nil {
		return nil, err
	}
	if release != nil {
		defer release()
	}
	if ch != nil {
		defer ch.Done()
		ctx = context.WithValue(ctx, chargeKey{}, ch)
	}
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor. The stream is limited when it
// opens; with WithMessages, each message received too.
func (s *ServerLimit) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	release, ch, err := s.admit(ctx, info.FullMethod, func(md metadata.MD) { ss.SetHeader(md) }, ss.SetTrailer)
	if err != nil {
		return err
	}
	if release != nil {
		defer release()
	}
	if ch != nil {
		defer ch.Done()
		ss = &chargedStream{ServerStream: ss, ctx: context.WithValue(ctx, chargeKey{}, ch)}
	}
	if s.cfg.messages != nil {
		key, err := s.cfg.key(ctx, info.FullMethod)
		if err != nil {
			return s.cfg.onError(ctx, info.FullMethod, err)
		}
		ss = &limitedStream{ServerStream: ss, s: s, key: key, method: info.FullMethod}
	}
	return handler(srv, ss)
}

// admit decides one call. It returns the status error to answer with, or
// nil and, for a concurrency limit, the function that releases the permit,
// and with WithCost the call's charge, for Settle. header writes response
// header metadata; trailer, trailer metadata (Settle's).
func (s *ServerLimit) admit(ctx context.Context, method string, header, trailer func(metadata.MD)) (release func(), ch *charge.Charge, err error) {
	switch {
	case s.conc != nil:
		release, err = s.acquire(ctx)
		return release, nil, err
	case s.rules != nil:
		ch, err = s.checkRules(ctx, method, header, trailer)
	default:
		ch, err = s.checkLimiter(ctx, method, header, trailer)
	}
	return nil, ch, err
}

func (s *ServerLimit) acquire(ctx context.Context) (func(), error) {
	c := s.cfg
	var err error
	if c.busyWait {
		err = s.conc.Acquire(ctx)
	} else if !s.conc.TryAcquire() {
		err = ratelimit.ErrBulkheadFull
	}
	if err == nil {
		return s.conc.Release, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return nil, status.FromContextError(ctxErr).Err()
	}
	st := status.New(c.busyCode, "grpclimit: too many calls in flight")
	if c.busyFor > 0 {
		if d, e := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(c.busyFor)}); e == nil {
			st = d
		}
	}
	return nil, st.Err()
}

func (s *ServerLimit) checkLimiter(ctx context.Context, method string, header, trailer func(metadata.MD)) (*charge.Charge, error) {
	c := s.cfg
	key, err := c.key(ctx, method)
	if err != nil {
		return nil, c.onError(ctx, method, err)
	}
	if c.cost != nil {
		return s.chargeLimiter(ctx, method, key, header, trailer)
	}
	d, err := s.lim.AllowN(c.limiterContext(ctx, method), key, 1)
	if err != nil {
		return nil, s.failed(ctx, method, err)
	}
	if !d.Allowed || c.metadata {
		header(rateMetadata(s.policyFor(d.Limit), s.item, d, d.RetryAfter))
	}
	if d.Allowed {
		return nil, nil
	}
	return nil, denial(d.RetryAfter, []violation{{name: s.names[0], limit: d.Limit, window: c.window}})
}

// failed handles a limiter's error: a key missing for a rule is refused,
// a backend failure follows the fail-open policy.
func (s *ServerLimit) failed(ctx context.Context, method string, err error) error {
	c := s.cfg
	if c.failOpen && !errors.Is(err, ErrNoKey) {
		if c.report != nil {
			c.report(ctx, method, err)
		}
		return nil
	}
	return c.onError(ctx, method, err)
}

func (s *ServerLimit) policyFor(limit int) string {
	if p := s.policy.Load(); p != nil && p.limit == limit {
		return p.value
	}
	p := &cachedPolicy{limit: limit, value: field.PolicyItem(s.item, limit, s.cfg.window)}
	s.policy.Store(p)
	return p.value
}

func (s *ServerLimit) checkRules(ctx context.Context, method string, header, trailer func(metadata.MD)) (*charge.Charge, error) {
	c := s.cfg
	rv := s.currentView()
	if rv.err != nil {
		return nil, status.Error(codes.Internal, rv.err.Error())
	}
	cv, ok := rv.classes[method]
	if !ok {
		cv = rv.every
	}
	if len(cv.rules) == 0 {
		return nil, nil
	}
	var who ratelimit.Subject
	var err error
	if cv.needUser || rv.exemptUser {
		if who.User, err = c.user(ctx, method); err != nil {
			if cv.needUser {
				return nil, c.onError(ctx, method, err)
			}
			who.User = "" // only an exemption asked: not exempt
		}
	}
	if cv.needIP || rv.exemptIP {
		if who.IP, err = c.ip(ctx, method); err != nil {
			if cv.needIP {
				return nil, c.onError(ctx, method, err)
			}
			who.IP = ""
		}
	}
	if (rv.exemptIP || rv.exemptUser) && cv.set.Exempt(who) {
		return nil, nil // exempt: nothing recorded, no metadata
	}
	if c.cost != nil {
		return s.chargeRules(ctx, method, cv, who, header, trailer)
	}
	d, err := cv.set.Check(c.limiterContext(ctx, method), who, 1)
	if err != nil {
		return nil, s.failed(ctx, method, err)
	}
	i := d.Strictest()
	if !d.Allowed || c.metadata {
		header(rateMetadata(cv.policy, cv.items[i], d.At(i), d.RetryAfter))
	}
	if d.Allowed {
		return nil, nil
	}
	return nil, denial(d.RetryAfter, violations(cv, d.Len(), d.At))
}

// violations lists the rules of cv whose decision, of n, denied.
func violations(cv *classView, n int, at func(int) ratelimit.Decision) []violation {
	var vs []violation
	for j := range n {
		if !at(j).Allowed {
			r := cv.rules[j]
			vs = append(vs, violation{name: r.Name, limit: r.Burst, window: r.Window()})
		}
	}
	return vs
}

// violation is one policy that denied a call.
type violation struct {
	name   string
	limit  int
	window time.Duration
}

// denial builds the status of a denied call: ResourceExhausted with a
// RetryInfo of retry and a QuotaFailure listing vs.
func denial(retry time.Duration, vs []violation) error {
	st := status.New(codes.ResourceExhausted, "grpclimit: rate limited, retry after "+readable(retry))
	qf := &errdetails.QuotaFailure{}
	for _, v := range vs {
		desc := "quota"
		if v.limit > 0 {
			desc += " of " + strconv.Itoa(v.limit)
		}
		if v.window > 0 {
			desc += " per " + readable(v.window)
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + v.name,
			Description: desc + " exhausted",
			QuotaId:     v.name,
			QuotaValue:  int64(v.limit),
		})
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}, qf); err == nil {
		st = d
	}
	return st.Err()
}

// readable formats d for a person: rounded to the millisecond above a
// millisecond, to the second above a minute.
func readable(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.String()
}

// rateMetadata is the response metadata of a decided call.
func rateMetadata(policy, item string, d ratelimit.Decision, retry time.Duration) metadata.MD {
	t := field.CeilSeconds(d.ResetAfter)
	if !d.Allowed {
		t = field.CeilSeconds(d.RetryAfter)
	}
	md := metadata.MD{
		MDRateLimitPolicy: {policy},
		MDRateLimit:       {item + ";r=" + strconv.Itoa(d.Remaining) + ";t=" + strconv.FormatInt(t, 10)},
	}
	if !d.Allowed {
		md[MDRetryAfter] = []string{strconv.FormatInt(field.CeilSeconds(retry), 10)}
	}
	return md
}

func defaultError(_ context.Context, _ string, err error) error {
	switch {
	case errors.Is(err, ErrNoKey):
		return status.Error(codes.PermissionDenied, "grpclimit: the call has no rate-limit key")
	case errors.Is(err, ErrInvalidCost) && errors.Is(err, ratelimit.ErrExceedsLimit):
		return status.Error(codes.ResourceExhausted, err.Error()) // no RetryInfo: it can never pass
	case errors.Is(err, ErrInvalidCost):
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(codes.Unavailable, "grpclimit: rate limiter unavailable")
}

// limitedStream takes one event of the message limiter for each message
// the handler receives.
type limitedStream struct {
	grpc.ServerStream
	s      *ServerLimit
	key    string
	method string
}

func (l *limitedStream) RecvMsg(m any) error {
	if err := l.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx := l.ServerStream.Context()
	err := l.s.cfg.messages.Wait(ctx, l.key)
	if err == nil {
		return nil
	}
	var le *ratelimit.LimitError
	switch {
	case errors.As(err, &le):
		return denial(le.RetryAfter, []violation{{name: "messages"}})
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return l.s.failed(ctx, l.method, err) // nil when failing open: the message passes
}
