package ratelimit

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit/internal/netmatch"
)

// parse reads what follows "exempt" on a rules line: "user ID", or
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

// text writes the rule as ParseRules reads it.
func (r Rule) text() string {
	t := r.Class + ": " + r.Rate.String()
	if r.Burst != 0 {
		t += " burst " + strconv.Itoa(r.Burst)
	}
	t += " " + r.Scope.String() + r.fairText() + r.classesText() + r.Penalty.text()
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

// ParseRules reads rules from a small configuration, one rule a line:
//
//	# class:       rate      [burst N]  scope     [as name]
//	POST /posts:   1/s                  per user
//	POST /likes:   5/s                  per user
//	POST /friends: 150/day              per user
//	GET /search:   30/m      burst 10   per ip    as search
//	GET /export:   5/m                  per user  shadow
//	*:             10,000/s             global    fair per user
//
// The class ends at the first colon followed by a space or tab; the rate
// is as ParseRate reads it, and its count may group digits with "," or "_";
// the scope is "per user", "per ip" or "global"; "fair per user" or "fair
// per ip" after "global" splits the global limit fairly among the users or
// client addresses that use it (Rule.Fair); "shadow" after the scope
// tries the rule without enforcing it (Rule.Shadow); "as" names the rule
// (the rest of the line: classes or "block" after it are refused, as they
// would name the rule rather than apply). Blank lines and text after "#"
// are ignored.
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
	var err error
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
		if err := modifierInName(f[i+1:]); err != nil {
			return r, err
		}
		f = f[:i]
	}
	if f, r.Penalty, err = parsePenalty(f); err != nil {
		return r, err
	}
	if f, r.Fair, err = parseFair(f); err != nil {
		return r, err
	}
	if f, r.Classes, err = parseClasses(f); err != nil {
		return r, err
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

// modifierInName refuses a name, the words after "as", that holds a
// classes list or a penalty ("block D after N"): the name runs to the end
// of the line, so those words would only name the rule, and the classes'
// reserves or the penalty box would be lost without a word.
func modifierInName(words []string) error {
	if _, cs, err := parseClasses(slices.Clone(words)); err == nil && cs != nil {
		return errors.New(`"classes" after "as" would be part of the rule's name, not its classes: put the modifiers before "as"`)
	}
	if _, p, err := parsePenalty(slices.Clone(words)); err == nil && p != (Penalty{}) {
		return errors.New(`"block" after "as" would be part of the rule's name, not its penalty: put the modifiers before "as"`)
	}
	return nil
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
