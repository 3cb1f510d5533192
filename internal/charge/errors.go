package charge

import (
	"errors"
	"strconv"

	"github.com/ratelimitkit/ratelimit"
)

// CostError is the error of a request (or call) whose cost cannot be
// charged: a negative one, or one more than the limit allows at once. It
// matches its package's ErrInvalidCost and the limiter's error, without
// the stutter of wrapping one in the other's text.
type CostError struct {
	Pkg     string // "httplimit"
	Unit    string // "request"
	Invalid error  // the package's ErrInvalidCost
	Cost    int
	Err     error // ratelimit.ErrNegativeN or ratelimit.ErrExceedsLimit
}

func (e *CostError) Error() string {
	n := strconv.Itoa(e.Cost)
	if errors.Is(e.Err, ratelimit.ErrNegativeN) {
		return e.Pkg + ": the cost function returned a negative cost, " + n
	}
	return e.Pkg + ": a " + e.Unit + " cost of " + n + " is more than the limit allows at once"
}

func (e *CostError) Unwrap() []error { return []error{e.Invalid, e.Err} }

// Costs makes the CostErrors of one package.
type Costs struct {
	Pkg, Unit string
	Invalid   error
}

// Error is the CostError of a cost n refused for err.
func (c Costs) Error(n int, err error) error {
	return &CostError{Pkg: c.Pkg, Unit: c.Unit, Invalid: c.Invalid, Cost: n, Err: err}
}

// Of returns the error a charge of n got from the limiter as a CostError
// if it says the cost cannot be charged, and nil otherwise. The cost is
// the only n the middleware passes, so the limiter's ErrNegativeN or
// ErrExceedsLimit is about it.
func (c Costs) Of(n int, err error) error {
	switch {
	case errors.Is(err, ratelimit.ErrNegativeN):
		return c.Error(n, ratelimit.ErrNegativeN)
	case errors.Is(err, ratelimit.ErrExceedsLimit):
		return c.Error(n, ratelimit.ErrExceedsLimit)
	}
	return nil
}

// LimitsOf returns the limits a class of rules charges, one a rule, in
// order, each without its key: a shadow rule is charged and never
// settled. canTake reports whether every enforced rule's limiter can book
// for a settlement (is a ratelimit.Taker).
func LimitsOf(rules []ratelimit.Rule) (limits []Limit, canTake bool) {
	canTake = true
	for _, r := range rules {
		l := Limit{Shadow: r.Limiter}
		if !r.Shadow {
			t, ok := r.Limiter.(ratelimit.Taker)
			l = Limit{Taker: t}
			canTake = canTake && ok
		}
		limits = append(limits, l)
	}
	return limits, canTake
}
