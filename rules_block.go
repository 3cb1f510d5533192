package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Penalty is a rule's penalty box (see PenaltyBox): a key the rule refuses
// After times within Within is blocked for Block. The zero Penalty is
// none. In the rules syntax it is written after the scope as
// "block D after N" or "block D after N within W", D and W as
// time.ParseDuration reads them:
//
//	POST /login: 5/m per ip block 15m after 5
type Penalty struct {
	// Block is how long a key is blocked; it must be positive when After
	// is set.
	Block time.Duration
	// After is how many refusals within Within block a key, at least 1.
	After int
	// Within is the window the refusals are counted in. Default: the
	// rule's Rate.Period.
	Within time.Duration
}

// parsePenalty takes "block D after N [within W]" out of a rule line's
// fields (after the class) and returns the rest.
func parsePenalty(f []string) ([]string, Penalty, error) {
	var p Penalty
	i := -1
	for j, w := range f {
		if strings.EqualFold(w, "block") {
			i = j
			break
		}
	}
	if i < 0 {
		return f, p, nil
	}
	const want = `want "block D after N" or "block D after N within W", e.g. "block 15m after 5"`
	if i+3 >= len(f) || !strings.EqualFold(f[i+2], "after") {
		return f, p, errors.New(want)
	}
	d, err := time.ParseDuration(f[i+1])
	if err != nil || d <= 0 {
		return f, p, fmt.Errorf("block duration %q is not a positive duration such as 15m", f[i+1])
	}
	n, err := strconv.Atoi(f[i+3])
	if err != nil || n < 1 {
		return f, p, fmt.Errorf("block after %q: want a count of refusals of at least 1", f[i+3])
	}
	p.Block, p.After = d, n
	end := i + 4
	if end < len(f) && strings.EqualFold(f[end], "within") {
		if end+1 >= len(f) {
			return f, p, errors.New(`"within" without a duration`)
		}
		w, err := time.ParseDuration(f[end+1])
		if err != nil || w <= 0 {
			return f, p, fmt.Errorf("block within %q is not a positive duration such as 1m", f[end+1])
		}
		p.Within, end = w, end+2
	}
	rest := append(f[:i:i], f[end:]...)
	return rest, p, nil
}

// text writes the penalty as ParseRules reads it, with a leading space;
// "" for none.
func (p Penalty) text() string {
	if p == (Penalty{}) {
		return ""
	}
	t := " block " + p.Block.String() + " after " + strconv.Itoa(p.After)
	if p.Within != 0 {
		t += " within " + p.Within.String()
	}
	return t
}

// wrapPenalty returns l inside the rule's penalty box, or l if the rule
// has none. A penalty half set fails: it would silently not block.
func wrapPenalty(r Rule, l Limiter, opts []Option) (Limiter, error) {
	p := r.Penalty
	if p == (Penalty{}) {
		return l, nil
	}
	switch {
	case p.After < 1:
		return nil, fmt.Errorf("%w: penalty After must be at least 1, got %d", ErrInvalidOption, p.After)
	case p.Block <= 0:
		return nil, fmt.Errorf("%w: penalty Block must be positive, got %s", ErrInvalidOption, p.Block)
	case p.Within < 0:
		return nil, fmt.Errorf("%w: penalty Within must not be negative, got %s", ErrInvalidOption, p.Within)
	}
	w := p.Within
	if w == 0 {
		w = r.Rate.Period
	}
	own := append(opts[:len(opts):len(opts)], withoutExempt, WithName(r.Name))
	if r.Shadow {
		own = append(own, withoutObserver) // the shadow reports its would-denies
	}
	return NewPenaltyBox(l, p.After, w, p.Block, own...)
}
