package ratelimit

import (
	"errors"
	"fmt"
	"strings"
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

// validFair checks the rule's fair modifier; nil for a rule without one.
func validFair(r Rule) error {
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
// of opts, or l if the rule is not fair.
func wrapFair(r Rule, l Limiter, opts []Option) (Limiter, error) {
	if r.Fair == 0 {
		return l, nil
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	fo := []FairOption{WithFairName(r.Name)}
	if cfg.clock != nil {
		fo = append(fo, WithFairClock(cfg.clock))
	}
	return NewFair(l, r.Rate, fo...)
}
