package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/netmatch"
)

// ErrInvalidRule means a rule, or a line of a rules configuration, is
// malformed. Errors from NewRules and ParseRules match it and, where the
// rate or burst is at fault, ErrInvalidRate or ErrInvalidCapacity too.
var ErrInvalidRule = errors.New("ratelimit: invalid rule")

// ErrNoKey means a request lacks the key a limit needs: no user for a
// per-user rule, no client address for a per-IP one. Nothing is recorded.
// Callers decide what such a request gets; it is never let through
// unlimited by this package.
var ErrNoKey = errors.New("ratelimit: no key for the limit's scope")

// Scope says whose allowance a rule counts.
type Scope uint8

const (
	// PerUser gives each user (Subject.User) an allowance of their own.
	PerUser Scope = iota + 1
	// PerIP gives each client address (Subject.IP) an allowance of its own.
	PerIP
	// Global gives every caller together one allowance.
	Global
)

// String returns the scope as ParseRules writes it: "per user", "per ip"
// or "global".
func (s Scope) String() string {
	switch s {
	case PerUser:
		return "per user"
	case PerIP:
		return "per ip"
	case Global:
		return "global"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Subject is who makes a request, as rules see it.
type Subject struct {
	// User identifies the authenticated user; "" if there is none.
	User string
	// IP identifies the client address (or its group, such as an IPv6
	// /64); "" if unknown.
	IP string
}

// Rule is one limit on one class of requests: for example at most 1 per
// second per user on "POST /posts", or 10,000 per second for everyone on
// every request.
type Rule struct {
	// Class is the request class the rule applies to, typically a method
	// and route pattern as net/http's ServeMux writes them: "POST /posts",
	// "GET /items/{id}". "*" applies the rule to every request, in
	// addition to its class's own rules.
	Class string
	// Name identifies the rule in headers and errors; it must be unique.
	// Default: class, rate and scope, as in "POST /posts 1/s per user".
	Name string
	// Rate is the sustained rate allowed.
	Rate Rate
	// Burst is how many requests may come at once (the bucket's
	// capacity). Default: Rate.N.
	Burst int
	// Scope says whose allowance the rule counts.
	Scope Scope
	// Limiter, if not nil, enforces the rule instead of the token bucket
	// NewRules would build; Rate and Burst must then describe it, as
	// headers quote them. Rules sharing one Limiter share its keys.
	Limiter Limiter
	// Shadow tries the rule without enforcing it: its limiter is run
	// inside a Shadow, which books what the rule would but never denies,
	// and reports would-denies to the observer given to NewRules (see
	// WithObserver) under the rule's name.
	Shadow bool
	// Penalty, if set, blocks a key the rule keeps refusing (see Penalty
	// and PenaltyBox); the rule's limiter is wrapped in a PenaltyBox.
	Penalty Penalty
	// Fair, if PerUser or PerIP, splits the rule's limit fairly among the
	// users (or client addresses) that use it (see Fair): the rule's token
	// bucket is one shared limit, asked through a Fair whose tenant is
	// who.User (or who.IP). It needs a Global rule and no Limiter of its
	// own. A request without the tenant is refused with ErrNoKey, as a
	// per-user (or per-IP) rule refuses it. With Penalty the penalty box
	// wraps the Fair and blocks a tenant it keeps refusing; with Shadow
	// the Fair runs inside the Shadow. The Fair tracks at most
	// DefaultMaxTenants tenants (see WithMaxTenants). Zero: not fair.
	Fair Scope
	// Classes, if not empty, gives the rule's shared limit priority
	// classes, highest first, each with the requests per Rate.Period
	// reserved for it (see WithClasses): the rule is checked through a Fair
	// with those classes over its token bucket, and a request's class is
	// its context's priority (ContextWithPriority, which
	// httplimit.WithPriority and grpclimit.WithPriority set), the lowest
	// without one; a priority naming no class fails the check with
	// ErrUnknownClass. It needs a Global rule and no Limiter of its own.
	// With Fair, the tenants share the limit as Fair says; without it,
	// every request is of one tenant. Class names must be unique, without
	// spaces, commas or "=". The reserves of all classes but one must add
	// up to less than Burst, for each class: a request past its class's
	// reserve needs the bucket to hold more than what the others still
	// reserve, and the bucket holds at most Burst.
	Classes []Class
}

// Window returns how long the rule's allowance takes to refill from empty
// to full: Burst × Rate.Period / Rate.N, rounded up to the nanosecond (at
// most about 36.5 years, which NewRules enforces). A client that sends at
// most Burst requests in any Window is never limited by the rule.
func (r Rule) Window() time.Duration {
	if !r.Rate.Valid() || r.Burst <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(r.Burst), uint64(r.Rate.Period))
	if hi >= uint64(r.Rate.N) {
		return time.Duration(1<<63 - 1)
	}
	q, rem := bits.Div64(hi, lo, uint64(r.Rate.N))
	if rem > 0 {
		q++
	}
	return time.Duration(min(q, 1<<63-1))
}

// Rules maps request classes to their limits and checks a request against
// all of them at once, all or nothing (see AllowAll): "1 post/s, 5 likes/s,
// 150 friend requests/day per user, 10,000 requests/s in all" is four
// rules, and a post denied by the global limit costs the user nothing.
//
// A request of class c is checked against c's rules, in the order given,
// then the "*" rules. A class with no rules of its own gets only the "*"
// rules; with none of those either, it is not limited.
//
// Build it with NewRules or ParseRules. It is safe for concurrent use, and
// changes only by Reload or Replace, which swap the whole configuration
// at once. Most callers want Check, or the httplimit middleware; a caller
// that looks a class up once and checks it often wants For (whose RuleSet
// keeps the configuration it came from: such a caller follows reloads by
// comparing Snapshot).
type Rules struct {
	cur    atomic.Pointer[ruleTable] // nil: the zero Rules, no rules at all
	mu     sync.Mutex                // serialises Reload and Replace
	opts   []Option                  // what the limiters were built with
	frozen bool                      // a Snapshot: Reload and Replace refuse
}

// ruleTable is one configuration of a Rules, immutable once built: a
// reload builds a new table and swaps the pointer.
type ruleTable struct {
	exempt  *exemptions // nil: none
	classes map[string]*RuleSet
	every   *RuleSet  // the "*" rules: for classes without rules of their own
	built   []Limiter // limiters NewRules made, for Close
	kept    map[ruleIdentity]keptLimiter
	fixed   *Rules // this table alone, for Snapshot
}

// ruleIdentity is what a reload compares: a rule whose identity did not
// change keeps its limiter, and with it its keys' state.
type ruleIdentity struct {
	class, name string
	rate        Rate
	burst       int
	scope       Scope
	shadow      bool
	penalty     Penalty
	fair        Scope
	classes     string // the classes as text (see Rule.classesText)
}

// keptLimiter is a limiter NewRules built for a rule: base is the token
// bucket, final what the rule checks (base, or a Shadow of it).
type keptLimiter struct{ base, final Limiter }

var emptyTable = ruleTable{every: &noRules}

func (rs *Rules) table() *ruleTable {
	if t := rs.cur.Load(); t != nil {
		return t
	}
	return &emptyTable
}

// RuleSet is the rules one class of requests is checked against, in
// order: the class's own rules, then the "*" rules. Get it from Rules.For.
// It is immutable and safe for concurrent use.
type RuleSet struct {
	rules  []Rule      // with defaults filled in
	exempt *exemptions // the set's Rules' exemptions; nil: none
}

// exemptions are the subjects a Rules never limits: client addresses in
// one of prefixes (IPv4 unmapped, no zones), and users by id.
type exemptions struct {
	prefixes []netip.Prefix
	users    map[string]bool
}

// covers reports whether who is exempt: an exempt user, or a client
// address (or address group) inside an exempt prefix.
func (e *exemptions) covers(who Subject) bool {
	if who.User != "" && e.users[who.User] {
		return true
	}
	return who.IP != "" && len(e.prefixes) > 0 && netmatch.Covers(e.prefixes, who.IP)
}

// NewRules returns the given rules, each enforced by rule.Limiter or else
// by a new TokenBucket of rule.Rate and rule.Burst built with opts
// (WithClock, WithMaxKeys, ...).
//
// With WithObserver among opts, every token bucket NewRules builds is
// named after its rule (WithName) and reports to that observer its rule's
// part of each Check: one event per rule, Allowed saying whether that rule
// allowed (the request as a whole may still have been denied by another).
// A shadow rule reports through its Shadow, with Shadow set. A limiter
// given in Rule.Limiter reports to its own observer, under its own name.
//
// WithExempt among opts exempts addresses, prefixes and users from every
// rule, as an "exempt" line does for ParseRules.
//
// Every error matches ErrInvalidRule, names the rule (its index and its
// text, as ParseRules would read it) and also matches ErrInvalidRate for an
// invalid rate, ErrInvalidCapacity for a negative burst or one the token
// bucket refuses, and ErrInvalidOption for a bad option. The other faults
// are an empty class, a scope that is not PerUser, PerIP or Global, a
// duplicate name, and a Fair that is not PerUser or PerIP, on a rule that
// is not Global or that has a Limiter of its own.
func NewRules(rules []Rule, opts ...Option) (*Rules, error) {
	t, err := newRuleTable(rules, nil, opts, nil, ruleWhere(rules))
	if err != nil {
		return nil, err
	}
	return newRulesOf(t, opts), nil
}

func ruleWhere(rules []Rule) func(i int) string {
	return func(i int) string {
		return fmt.Sprintf("%d (%s)", i, quoteRule(rules[i].text()))
	}
}

func newRulesOf(t *ruleTable, opts []Option) *Rules {
	rs := &Rules{opts: opts}
	rs.cur.Store(t)
	return rs
}

// ruleError is a fault in one rule. It reads "ratelimit: invalid rule
// <where>: <cause>", the cause's own "ratelimit: " prefix dropped so that
// the text says it once, and matches ErrInvalidRule and what the cause
// matches.
type ruleError struct {
	where string
	err   error
}

func (e *ruleError) Error() string {
	return ErrInvalidRule.Error() + " " + e.where + ": " + strings.TrimPrefix(e.err.Error(), "ratelimit: ")
}

func (e *ruleError) Unwrap() []error { return []error{ErrInvalidRule, e.err} }

// newRuleTable implements NewRules; where(i) names rule i in errors. A
// rule whose identity is in old's kept limiters reuses that limiter
// (old may be nil).
func newRuleTable(rules []Rule, ex *exemptions, opts []Option, old *ruleTable, where func(i int) string) (*ruleTable, error) {
	var own map[string][]Rule
	var every []Rule
	var reused []Limiter // not to be closed if this build fails
	var cfg config
	for _, o := range opts { // for the observer and the exemptions; a bad option fails a bucket's build below
		o(&cfg)
	}
	if cfg.exempt != nil {
		if ex == nil {
			ex = &exemptions{}
		}
		for _, s := range cfg.exempt {
			if err := ex.parse(strings.Fields(s)); err != nil {
				return nil, fmt.Errorf("%w: WithExempt(%q): %w", ErrInvalidOption, s, err)
			}
		}
	}
	rs := &ruleTable{exempt: ex, kept: make(map[ruleIdentity]keptLimiter)}
	names := make(map[string]bool, len(rules))
	for i, r := range rules {
		fail := func(err error) (*ruleTable, error) {
			for _, l := range rs.built {
				if !slices.Contains(reused, l) {
					closeLimiter(l)
				}
			}
			return nil, &ruleError{where: where(i), err: err}
		}
		if r.Class == "" {
			return fail(errors.New("empty class"))
		}
		if r.Scope < PerUser || r.Scope > Global {
			return fail(fmt.Errorf("scope must be PerUser, PerIP or Global, got %v", r.Scope))
		}
		if err := r.Rate.validate(); err != nil {
			return fail(err)
		}
		if r.Burst < 0 {
			return fail(fmt.Errorf("%w: burst %d is negative", ErrInvalidCapacity, r.Burst))
		}
		if r.Burst == 0 {
			if r.Rate.N > int64(maxInt) {
				return fail(fmt.Errorf("%w: default burst %d does not fit an int", ErrInvalidCapacity, r.Rate.N))
			}
			r.Burst = int(r.Rate.N)
		}
		if err := validFair(r); err != nil {
			return fail(err)
		}
		if r.Name == "" {
			r.Name = r.Class + " " + r.Rate.String() + " " + r.Scope.String() + r.fairText()
		}
		if names[r.Name] {
			return fail(fmt.Errorf("duplicate name %q", r.Name))
		}
		names[r.Name] = true
		id := ruleIdentity{class: r.Class, name: r.Name, rate: r.Rate, burst: r.Burst, scope: r.Scope, shadow: r.Shadow, penalty: r.Penalty, fair: r.Fair, classes: r.classesText()}
		if k, ok := old.keptFor(id); ok && r.Limiter == nil {
			r.Limiter = k.final
			rs.kept[id] = k
			rs.built = append(rs.built, k.base)
			reused = append(reused, k.base)
		} else if r.Limiter == nil {
			own := append(opts[:len(opts):len(opts)], withoutExempt, WithName(r.Name))
			if r.Shadow { // the shadow reports; its bucket must not
				own = append(own, withoutObserver)
			}
			tb, err := NewTokenBucket(r.Rate, r.Burst, own...)
			if err != nil {
				return fail(err)
			}
			rs.built = append(rs.built, tb)
			k := keptLimiter{base: tb, final: tb}
			if k.final, err = wrapFair(r, tb, opts); err != nil {
				return fail(err)
			}
			if k.final, err = wrapPenalty(r, k.final, opts); err != nil {
				return fail(err)
			}
			if r.Shadow {
				sh, err := NewShadow(k.final, WithName(r.Name), WithObserver(cfg.observer))
				if err != nil {
					return fail(err)
				}
				k.final = sh
			}
			r.Limiter = k.final
			rs.kept[id] = k
		} else if boxed, err := wrapPenalty(r, r.Limiter, opts); err != nil {
			return fail(err)
		} else if r.Limiter = boxed; r.Shadow {
			sh, err := NewShadow(r.Limiter, WithName(r.Name), WithObserver(cfg.observer))
			if err != nil {
				return fail(err)
			}
			r.Limiter = sh
		}
		if r.Class == "*" {
			every = append(every, r)
		} else {
			if own == nil {
				own = make(map[string][]Rule)
			}
			own[r.Class] = append(own[r.Class], r)
		}
	}
	rs.every = &RuleSet{rules: every, exempt: ex}
	rs.classes = make(map[string]*RuleSet, len(own))
	for c, rules := range own {
		rs.classes[c] = &RuleSet{rules: append(rules, every...), exempt: ex}
	}
	rs.fixed = &Rules{frozen: true}
	rs.fixed.cur.Store(rs)
	return rs, nil
}

func (t *ruleTable) keptFor(id ruleIdentity) (keptLimiter, bool) {
	if t == nil {
		return keptLimiter{}, false
	}
	k, ok := t.kept[id]
	return k, ok
}

func closeLimiter(l Limiter) {
	if c, ok := l.(interface{ Close() error }); ok {
		c.Close()
	}
}

const maxInt = int(^uint(0) >> 1)

// Classes returns the classes that have rules of their own, sorted; "*"
// rules apply to these and to every other class.
func (rs *Rules) Classes() []string {
	t := rs.table()
	cs := make([]string, 0, len(t.classes))
	for c := range t.classes {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

// For returns the rules a request of class is checked against: the
// class's own rules, then the "*" rules; for a class without rules of its
// own, the "*" rules alone. It does not allocate.
func (rs *Rules) For(class string) *RuleSet {
	t := rs.table()
	if s, ok := t.classes[class]; ok {
		return s
	}
	return t.every
}

// noRules is the empty set, for the zero Rules.
var noRules RuleSet

// Check is shorthand for rs.For(class).Check(ctx, who, n).
func (rs *Rules) Check(ctx context.Context, class string, who Subject, n int) (MultiDecision, error) {
	return rs.For(class).Check(ctx, who, n)
}

// Allow reports whether one request of class by who may happen now under
// every rule, and records it if so. An error (ErrNoKey) counts as a denial.
func (rs *Rules) Allow(class string, who Subject) bool {
	d, err := rs.For(class).Check(context.Background(), who, 1)
	return err == nil && d.Allowed
}

// Rules returns the rules of the set in the order Check decides them,
// with defaults filled in: decision i of Check's result is that of rule i.
// The slice is new; changing it changes nothing.
func (s *RuleSet) Rules() []Rule { return append([]Rule(nil), s.rules...) }

// Check reports whether n requests by who may happen now under every rule
// of the set, all or nothing, and records them under every rule if so;
// the result holds the combined Decision and, at index i, the decision of
// the i-th rule of Rules (see AllowAll and MultiDecision). An empty set
// allows every request: its Decision is {Allowed: true}, with Limit 0
// saying that no limit applied. So is an exempt subject answered (see
// Rules.Exempt), before any key is asked for, and nothing is recorded.
//
// A rule keyed per user with who.User == "" or per IP with who.IP == ""
// (see Rule.KeyScope: a fair rule is keyed by its tenant) returns an error
// matching ErrNoKey, and nothing is recorded. Check does
// not allocate for up to 8 rules of in-memory limiters.
func (s *RuleSet) Check(ctx context.Context, who Subject, n int) (MultiDecision, error) {
	if s.exempt != nil && s.exempt.covers(who) {
		return MultiDecision{Decision: Decision{Allowed: true}}, nil
	}
	var buf [stackPairs]LimiterKey
	limits := buf[:0]
	if len(s.rules) > stackPairs {
		limits = make([]LimiterKey, 0, len(s.rules))
	}
	for i := range s.rules {
		r := &s.rules[i]
		var key string
		switch r.KeyScope() {
		case PerUser:
			if key = who.User; key == "" {
				return MultiDecision{}, fmt.Errorf("%w: rule %q counts per user and the request has none", ErrNoKey, r.Name)
			}
		case PerIP:
			if key = who.IP; key == "" {
				return MultiDecision{}, fmt.Errorf("%w: rule %q counts per client address and the request has none", ErrNoKey, r.Name)
			}
		}
		limits = append(limits, LimiterKey{Limiter: r.Limiter, Key: key})
	}
	return AllowAll(ctx, n, limits)
}

// Exempt reports whether who is never limited by rs: an exempt user, or a
// client address inside an exempt prefix (see ParseRules). Check answers
// an exempt request as an empty set does, recording nothing.
func (rs *Rules) Exempt(who Subject) bool {
	e := rs.table().exempt
	return e != nil && e.covers(who)
}

// Exempt reports whether who is never limited by the set (see
// Rules.Exempt).
func (s *RuleSet) Exempt(who Subject) bool { return s.exempt != nil && s.exempt.covers(who) }

// HasExemptions reports whether rs exempts any address (ip) or any user
// (user): a caller that reads a request's subject only for the rules'
// scopes must also read these to honour the exemptions.
func (rs *Rules) HasExemptions() (ip, user bool) {
	e := rs.table().exempt
	if e == nil {
		return false, false
	}
	return len(e.prefixes) > 0, len(e.users) > 0
}

// Close stops the sweepers of the limiters NewRules built, if options
// started any; limiters given in Rule.Limiter are the caller's to close.
// The rules remain usable. It always returns nil.
func (rs *Rules) Close() error {
	for _, l := range rs.table().built {
		closeLimiter(l)
	}
	return nil
}
