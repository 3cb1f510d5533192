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

// parseExempt reads what follows "exempt" on a rules line: "user ID", or
// "ip" and then addresses or prefixes, or addresses and prefixes alone.
func (e *exemptions) parse(f []string) error {
	if len(f) == 0 {
		return errors.New(`"exempt" without an address, prefix or user, e.g. "exempt 10.0.0.0/8" or "exempt user alice"`)
	}
	if strings.EqualFold(f[0], "user") {
		if len(f) != 2 {
			return errors.New(`want "exempt user ID", one user id without spaces`)
		}
		if e.users == nil {
			e.users = make(map[string]bool)
		}
		e.users[f[1]] = true
		return nil
	}
	if strings.EqualFold(f[0], "ip") {
		f = f[1:]
		if len(f) == 0 {
			return errors.New(`"exempt ip" without an address or prefix`)
		}
	}
	for _, v := range f {
		v = strings.TrimSuffix(v, ",")
		if strings.IndexByte(v, '/') >= 0 {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return fmt.Errorf("exempt prefix %q is not a CIDR prefix such as 10.0.0.0/8", v)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() < 96 {
				return fmt.Errorf("exempt prefix %q is an IPv4-mapped prefix shorter than /96", v)
			}
			// Bits past the length are a typo for another prefix or one
			// address, and a prefix of length 0 turns every rule off:
			// both would exempt far more than was meant, without a word.
			if m := p.Masked(); m != p {
				return fmt.Errorf("exempt prefix %q has address bits past its length: write %s for the network, or %s for the one address", v, m, p.Addr())
			}
			u := netmatch.Unmap(p)
			if u.Bits() == 0 {
				return fmt.Errorf("exempt prefix %q holds every %s address: it would turn every rule off for them", v, map[bool]string{true: "IPv4", false: "IPv6"}[u.Addr().Is4()])
			}
			e.prefixes = append(e.prefixes, u)
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("exempt address %q is not an IP address or CIDR prefix", v)
		}
		a = a.Unmap().WithZone("")
		e.prefixes = append(e.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return nil
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
// are an empty class, a scope that is not PerUser, PerIP or Global, and a
// duplicate name.
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

// text writes the rule as ParseRules reads it.
func (r Rule) text() string {
	t := r.Class + ": " + r.Rate.String()
	if r.Burst != 0 {
		t += " burst " + strconv.Itoa(r.Burst)
	}
	t += " " + r.Scope.String()
	if r.Shadow {
		t += " shadow"
	}
	if r.Name != "" {
		t += " as " + r.Name
	}
	return t
}

// quoteRule quotes a rule's text for an error, cut to a readable length.
func quoteRule(t string) string {
	const most = 80
	if r := []rune(t); len(r) > most {
		t = string(r[:most]) + "…"
	}
	return strconv.Quote(t)
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
		if r.Name == "" {
			r.Name = r.Class + " " + r.Rate.String() + " " + r.Scope.String()
		}
		if names[r.Name] {
			return fail(fmt.Errorf("duplicate name %q", r.Name))
		}
		names[r.Name] = true
		id := ruleIdentity{class: r.Class, name: r.Name, rate: r.Rate, burst: r.Burst, scope: r.Scope, shadow: r.Shadow}
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
			if r.Shadow {
				sh, err := NewShadow(tb, WithName(r.Name), WithObserver(cfg.observer))
				if err != nil {
					return fail(err)
				}
				k.final = sh
			}
			r.Limiter = k.final
			rs.kept[id] = k
		} else if r.Shadow {
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

// ParseRules reads rules from a small configuration, one rule a line:
//
//	# class:       rate      [burst N]  scope     [as name]
//	POST /posts:   1/s                  per user
//	POST /likes:   5/s                  per user
//	POST /friends: 150/day              per user
//	GET /search:   30/m      burst 10   per ip    as search
//	GET /export:   5/m                  per user  shadow
//	*:             10,000/s             global
//
// The class ends at the first colon followed by a space or tab; the rate
// is as ParseRate reads it, and its count may group digits with "," or "_";
// the scope is "per user", "per ip" or "global"; "shadow" after the scope
// tries the rule without enforcing it (Rule.Shadow); "as" names the rule
// (the rest of the line). Blank lines and text after "#" are ignored.
//
// A line "exempt" followed by addresses or CIDR prefixes ("exempt
// 10.0.0.0/8 192.0.2.7", or "exempt ip ...") or by "user" and one user id
// ("exempt user healthcheck") exempts those subjects from every rule:
// Check allows them without recording anything. An address matches a
// prefix if it lies inside it, an IPv4-mapped IPv6 address (::ffff:10.1.2.3)
// as the IPv4 address it maps; a Subject.IP that is an address group
// ("2001:db8:1:2::/64", as httplimit.ClientIP keys IPv6) matches only a
// prefix that holds the whole group. The exemption trusts Subject as the
// caller fills it: take the address from the connection or trusted
// proxies only, and the user from an authenticated identity only, never
// from something the client writes. The rules
// are then built as by NewRules with opts. Errors name the line, quote
// it, and match ErrInvalidRule (and ErrInvalidRate for a bad rate,
// ErrInvalidCapacity for a burst the token bucket refuses).
func ParseRules(config string, opts ...Option) (*Rules, error) {
	t, err := parseRuleTable(config, opts, nil)
	if err != nil {
		return nil, err
	}
	return newRulesOf(t, opts), nil
}

func parseRuleTable(config string, opts []Option, old *ruleTable) (*ruleTable, error) {
	var rules []Rule
	var ex *exemptions
	var lines []int // lines[i]: the line of rules[i], from 0
	text := strings.Split(config, "\n")
	where := func(n int) string { return fmt.Sprintf("on line %d (%s)", n+1, quoteRule(text[n])) }
	for n, line := range text {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		text[n] = line
		if line == "" {
			continue
		}
		// A line that starts with the word is an exemption unless it reads
		// as a rule and not as an exemption ("exempt /x: 1/s global"): an
		// IPv6 address that ends in "::" before another looks like a class.
		if f := strings.Fields(line); strings.EqualFold(f[0], "exempt") && (classEnd(line) < 0 || new(exemptions).parse(f[1:]) == nil) {
			if ex == nil {
				ex = &exemptions{}
			}
			if err := ex.parse(f[1:]); err != nil {
				return nil, &ruleError{where: where(n), err: err}
			}
			continue
		}
		r, err := parseRule(line)
		if err != nil {
			return nil, &ruleError{where: where(n), err: err}
		}
		rules = append(rules, r)
		lines = append(lines, n)
	}
	return newRuleTable(rules, ex, opts, old, func(i int) string { return where(lines[i]) })
}

func parseRule(line string) (Rule, error) {
	var r Rule
	sep := classEnd(line)
	if sep < 0 {
		return r, errors.New(`want "class: rate scope", e.g. "POST /posts: 1/s per user"`)
	}
	r.Class = strings.TrimSpace(line[:sep])
	f := strings.Fields(line[sep+1:])
	if i := slices.Index(f, "as"); i >= 0 {
		if i == len(f)-1 {
			return r, errors.New(`"as" without a name`)
		}
		r.Name = strings.Join(f[i+1:], " ")
		f = f[:i]
	}
	if len(f) >= 1 && strings.EqualFold(f[len(f)-1], "shadow") {
		r.Shadow, f = true, f[:len(f)-1]
	}
	switch {
	case len(f) >= 1 && strings.EqualFold(f[len(f)-1], "global"):
		r.Scope, f = Global, f[:len(f)-1]
	case len(f) >= 2 && strings.EqualFold(f[len(f)-2], "per") && strings.EqualFold(f[len(f)-1], "user"):
		r.Scope, f = PerUser, f[:len(f)-2]
	case len(f) >= 2 && strings.EqualFold(f[len(f)-2], "per") && strings.EqualFold(f[len(f)-1], "ip"):
		r.Scope, f = PerIP, f[:len(f)-2]
	default:
		return r, errors.New(`the rate must be followed by a scope: "per user", "per ip" or "global"`)
	}
	if len(f) >= 2 && strings.EqualFold(f[len(f)-2], "burst") {
		b, err := strconv.Atoi(f[len(f)-1])
		if err != nil || b <= 0 {
			return r, fmt.Errorf("burst %q is not a positive integer", f[len(f)-1])
		}
		r.Burst, f = b, f[:len(f)-2]
	}
	if len(f) == 0 {
		return r, errors.New("no rate")
	}
	f[0] = ungroup(f[0])
	rate, err := ParseRate(strings.Join(f, " "))
	if err != nil {
		return r, err
	}
	r.Rate = rate
	return r, nil
}

// classEnd returns the index of the colon that ends a rule line's class:
// the first followed by a space or tab; -1 if there is none.
func classEnd(line string) int {
	for i := 0; i+1 < len(line); i++ {
		if line[i] == ':' && (line[i+1] == ' ' || line[i+1] == '\t') {
			return i
		}
	}
	return -1
}

// ungroup removes digit-group separators from the count that leads s:
// "10,000/s" becomes "10000/s".
func ungroup(s string) string {
	end := strings.IndexFunc(s, func(c rune) bool { return (c < '0' || c > '9') && c != ',' && c != '_' })
	if end < 0 {
		end = len(s)
	}
	return strings.NewReplacer(",", "", "_", "").Replace(s[:end]) + s[end:]
}

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
// A per-user rule with who.User == "" or a per-IP rule with who.IP == ""
// returns an error matching ErrNoKey, and nothing is recorded. Check does
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
		switch r.Scope {
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

// Snapshot returns the configuration rs serves now, as a Rules that later
// reloads of rs do not change (and that cannot itself be reloaded). It
// does not allocate: a caller that derives something from the rules (as
// the httplimit middleware does, per class) compares snapshots to see
// that a reload happened, and reads every class from the same one, so
// that no request mixes two configurations.
func (rs *Rules) Snapshot() *Rules {
	if t := rs.cur.Load(); t != nil {
		return t.fixed
	}
	return rs
}

// ErrFrozenRules means Reload or Replace was called on a Snapshot.
var ErrFrozenRules = errors.New("ratelimit: a snapshot of rules cannot be reloaded")

// Reload replaces the rules with those of config, read as ParseRules reads
// it, atomically: every Check from then on decides under the new rules,
// and one in flight finishes under the old. A rule whose class, name,
// rate, burst, scope and shadow flag are unchanged keeps its limiter, so
// its keys keep their state (a key exhausted before stays exhausted);
// every other rule starts afresh, and the limiters of rules that are gone
// are closed. The limiters are built with the options the rules were
// first built with.
//
// A configuration with any fault is refused whole, with ParseRules' error
// naming the line, and rs keeps serving its old rules. Reloads are
// serialised; Check never waits for one.
func (rs *Rules) Reload(config string) error {
	if rs.frozen {
		return ErrFrozenRules
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t, err := parseRuleTable(config, rs.opts, rs.cur.Load())
	if err != nil {
		return err
	}
	rs.swap(t)
	return nil
}

// Replace is Reload for rules given as values, as NewRules takes them.
// Exemptions stated by the text of an earlier Reload or ParseRules are
// dropped; those given by WithExempt stay.
func (rs *Rules) Replace(rules []Rule) error {
	if rs.frozen {
		return ErrFrozenRules
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t, err := newRuleTable(rules, nil, rs.opts, rs.cur.Load(), ruleWhere(rules))
	if err != nil {
		return err
	}
	rs.swap(t)
	return nil
}

// swap installs t and closes the old table's limiters t does not keep.
// Requires mu held.
func (rs *Rules) swap(t *ruleTable) {
	old := rs.cur.Swap(t)
	if old == nil {
		return
	}
	for _, l := range old.built {
		if !slices.Contains(t.built, l) {
			closeLimiter(l)
		}
	}
}
