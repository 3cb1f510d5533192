package ratelimit

import (
	"errors"
	"slices"
)

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
// rate, burst, scope, shadow flag, penalty and fair modifier are unchanged
// keeps its limiter (a fair rule its Fair and its bucket), so
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
