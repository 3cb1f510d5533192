package ratelimit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// A rule's fair modifier: "fair per user" or "fair per ip" after a global
// rule's scope splits the rule's one shared limit among the users (or
// client addresses) that use it, max-min fair, as a Fair does:
//
//	*: 1000/s global fair per user
//
// The rule's token bucket stays the one shared limit, so the rule's bound
// holds whatever the tenants do; the Fair over it decides which tenant's
// request the bucket is asked for (see Fair for the model and its floor).
//
// The Fair joins the rule's identity: a Reload that keeps the rule, its
// fair modifier included, keeps the Fair and the bucket with their state;
// a change of the modifier builds both afresh.

// parseFair takes "fair per user" or "fair per ip" out of a rule line's
// fields (after the class) and returns the rest.
func parseFair(f []string) ([]string, Scope, error) {
	i := -1
	for j, w := range f {
		if strings.EqualFold(w, "fair") {
			i = j
			break
		}
	}
	if i < 0 {
		return f, 0, nil
	}
	var s Scope
	switch {
	case i+1 < len(f) && strings.EqualFold(f[i+1], "global"):
		return f, 0, errors.New(`"fair global" splits nothing: want "fair per user" or "fair per ip"`)
	case i+2 < len(f) && strings.EqualFold(f[i+1], "per") && strings.EqualFold(f[i+2], "user"):
		s = PerUser
	case i+2 < len(f) && strings.EqualFold(f[i+1], "per") && strings.EqualFold(f[i+2], "ip"):
		s = PerIP
	case i+2 < len(f) && strings.EqualFold(f[i+1], "per") && strings.EqualFold(f[i+2], "global"):
		return f, 0, errors.New(`"fair per global" splits nothing: want "fair per user" or "fair per ip"`)
	default:
		return f, 0, errors.New(`"fair" must be followed by "per user" or "per ip", e.g. "*: 1000/s global fair per user"`)
	}
	return append(f[:i:i], f[i+3:]...), s, nil
}

// fairText writes the rule's fair modifier as ParseRules reads it, with a
// leading space; "" for none.
func (r Rule) fairText() string {
	if r.Fair == 0 {
		return ""
	}
	return " fair " + r.Fair.String()
}

// KeyScope returns the scope whose part of a Subject keys the rule's
// limiter: Fair for a fair rule (its tenant), Scope otherwise. Check asks
// the rule's limiter on who.User for PerUser, on who.IP for PerIP, and on
// "" for Global.
func (r Rule) KeyScope() Scope {
	if r.Fair != 0 {
		return r.Fair
	}
	return r.Scope
}

// A rule's classes modifier: "classes" and, as one word, the classes
// highest first, each as its name and, if it reserves any, "=" and the
// requests per rate period reserved:
//
//	*: 1000/s global classes critical=200,normal=100,sheddable
//	*: 1000/s global fair per user classes critical=200,normal

// parseClasses takes "classes LIST" out of a rule line's fields and
// returns the rest.
func parseClasses(f []string) ([]string, []Class, error) {
	i := slices.IndexFunc(f, func(w string) bool { return strings.EqualFold(w, "classes") })
	if i < 0 {
		return f, nil, nil
	}
	if i+1 >= len(f) {
		return f, nil, errors.New(`"classes" without a list, e.g. "classes critical=200,normal,sheddable"`)
	}
	var cs []Class
	for item := range strings.SplitSeq(f[i+1], ",") {
		name, res, has := strings.Cut(item, "=")
		c := Class{Name: name}
		if has {
			v, err := strconv.ParseInt(res, 10, 64)
			if err != nil || v < 0 {
				return f, nil, fmt.Errorf("class %q: reserve %q is not a count of requests", name, res)
			}
			c.Reserved = v
		}
		cs = append(cs, c)
	}
	return append(f[:i:i], f[i+2:]...), cs, nil
}

// classesText writes the rule's classes as ParseRules reads them, with a
// leading space; "" for none.
func (r Rule) classesText() string {
	if len(r.Classes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" classes ")
	for i, c := range r.Classes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Name)
		if c.Reserved != 0 {
			b.WriteString("=" + strconv.FormatInt(c.Reserved, 10))
		}
	}
	return b.String()
}

// validClassNames checks the rule's classes as a rule needs them (the
// reserves are checked as NewFair checks them): a Global rule without a
// Limiter of its own, and names that are unique and that the rule's text
// can write.
func validClassNames(r Rule) error {
	if len(r.Classes) == 0 {
		return nil
	}
	switch {
	case r.Scope != Global:
		return fmt.Errorf("classes share a limit: the rule's scope must be global, got %v", r.Scope)
	case r.Limiter != nil:
		return errors.New("classes build a Fair over the rule's own token bucket: with a Limiter of your own, build a Fair with WithClasses over it and give that as the Limiter of a rule without Classes")
	}
	seen := make(map[string]bool, len(r.Classes))
	for _, c := range r.Classes {
		switch {
		case c.Name == "":
			return errors.New("a class without a name")
		case strings.ContainsAny(c.Name, ",=") || strings.IndexFunc(c.Name, unicode.IsSpace) >= 0:
			return fmt.Errorf("class name %q has a space, a comma or \"=\"", c.Name)
		case seen[c.Name]:
			return fmt.Errorf("class %q named twice", c.Name)
		}
		seen[c.Name] = true
	}
	return classesFitBurst(r)
}

// classesFitBurst checks that every class of the rule can take a request
// beyond its reserve on an idle rule: a request past its class's reserve
// needs the bucket's Remaining above what the other classes have still to
// use of theirs, and Remaining is at most the burst. Reserves of the other
// classes adding up to the burst or more would leave that class refused
// forever (a class reserving nothing, the lowest by default, refused every
// request), so they are refused here. Reserves NewFair refuses (negative,
// or adding up to more than the rate's count) are left to it.
func classesFitBurst(r Rule) error {
	var sum int64
	low := r.Classes[0]
	for _, c := range r.Classes {
		if c.Reserved < 0 || c.Reserved > r.Rate.N-sum {
			return nil
		}
		sum += c.Reserved
		if c.Reserved < low.Reserved {
			low = c
		}
	}
	if others := sum - low.Reserved; others >= int64(r.Burst) {
		return fmt.Errorf("class %q could never take a request beyond its reserve: the other classes reserve %d of a burst of %d (reserve less, or raise the burst)", low.Name, others, r.Burst)
	}
	return nil
}

// validFair checks the rule's fair and classes modifiers; nil for a rule
// without them.
func validFair(r Rule) error {
	if err := validClassNames(r); err != nil {
		return err
	}
	if r.Fair == 0 {
		return nil
	}
	switch {
	case r.Fair != PerUser && r.Fair != PerIP:
		return fmt.Errorf("fair must split per user or per ip, got %v", r.Fair)
	case r.Scope != Global:
		return fmt.Errorf("fair %v splits a shared limit: the rule's scope must be global, got %v", r.Fair, r.Scope)
	case r.Limiter != nil:
		return errors.New("fair builds its own token bucket as the shared limit: with a Limiter of your own, build a Fair over it (NewFair) and give that as the Limiter of a rule without Fair")
	}
	return nil
}

// wrapFair returns a Fair over the rule's shared limiter l, on the clock
// of opts, with the rule's classes, or l if the rule is neither fair nor
// has classes.
func wrapFair(r Rule, l Limiter, opts []Option) (Limiter, error) {
	if r.Fair == 0 && len(r.Classes) == 0 {
		return l, nil
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	fo := []FairOption{WithFairName(r.Name)}
	if len(r.Classes) > 0 {
		fo = append(fo, WithClasses(r.Classes...))
	}
	if cfg.clock != nil {
		fo = append(fo, WithFairClock(cfg.clock))
	}
	return NewFair(l, r.Rate, fo...)
}
