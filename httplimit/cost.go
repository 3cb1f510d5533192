package httplimit

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/ratelimitkit/ratelimit"
)

// WithCost makes Middleware and RulesMiddleware charge f(r) events for a
// request instead of one: a download charged by its bytes, a query by its
// rows, a model call by its tokens. RulesMiddleware charges the one cost
// under every rule the request's class has, all or nothing, as
// ratelimit.RuleSet.Check does for n events. The rate-limit headers
// describe the key's state after the charge.
//
// f is called once per request that is not exempt and has a key, before
// the limiter is asked. It must not block; it may read the request's
// headers and URL but not its body, which the handler has not read yet.
//
// The middleware charges exactly what f returns, so f is where the cost
// is bounded. A cost the client can name (a header, a query parameter)
// must be clamped by f: the middleware takes no cost on trust, but it
// cannot tell a cost f meant from one a client chose. What the middleware
// does with each value:
//
//   - 1 or more, up to the limit (the bucket's capacity, the window's
//     limit; for rules, the smallest Burst of the class's rules): charged
//     as n events, all or nothing; a denial is the usual 429.
//   - 0: the request is free. It goes on, consuming nothing, even when
//     the key is exhausted; the headers show the key's state as it
//     stands. A client that can make f return 0 is not limited at all:
//     return at least 1 unless the request really costs nothing.
//   - More than the limit: the request could never be allowed, now or
//     later. It is refused through the error handler with an error
//     matching ErrInvalidCost and ratelimit.ErrExceedsLimit, by default 429
//     Too Many Requests without Retry-After (retrying cannot help), logged
//     once.
//   - Negative: f is wrong. The request is refused through the error
//     handler with an error matching ErrInvalidCost and
//     ratelimit.ErrNegativeN, by default 500 Internal Server Error,
//     logged once.
//
// A refused cost is never let through by WithFailOpen, which is for a
// limiter that fails, not for a request that cannot be charged.
//
// With WithCost and a limiter that implements ratelimit.Taker (every
// limiter of package ratelimit and of its Redis backend), the charge is a
// booking that the handler may settle at the actual cost with Settle,
// once the work is done.
func WithCost(f func(r *http.Request) int) ResponseOption {
	return responseOption(func(c *response) { c.cost = f })
}

// ErrInvalidCost means the WithCost function gave a request a cost the
// limit cannot charge: a negative one (the error also matches
// ratelimit.ErrNegativeN) or one more than the limit allows at once
// (ratelimit.ErrExceedsLimit). The request is refused through the error
// handler; WithFailOpen does not apply to it.
var ErrInvalidCost = errors.New("httplimit: the request's cost cannot be charged")

// costError is the error of a request whose cost cannot be charged. It
// matches ErrInvalidCost and the limiter's error, without the stutter of
// wrapping one in the other's text.
type costError struct {
	cost int
	err  error // ratelimit.ErrNegativeN or ratelimit.ErrExceedsLimit
}

func (e *costError) Error() string {
	n := strconv.Itoa(e.cost)
	if errors.Is(e.err, ratelimit.ErrNegativeN) {
		return "httplimit: the cost function returned a negative cost, " + n
	}
	return "httplimit: a request cost of " + n + " is more than the limit allows at once"
}

func (e *costError) Unwrap() []error { return []error{ErrInvalidCost, e.err} }

// asCostError returns the error a charge of n got from the limiter as a
// costError if it says the cost cannot be charged, and false otherwise.
// The cost is the only n the middleware passes, so the limiter's
// ErrNegativeN or ErrExceedsLimit is about it.
func asCostError(n int, err error) (error, bool) {
	switch {
	case errors.Is(err, ratelimit.ErrNegativeN):
		return &costError{cost: n, err: ratelimit.ErrNegativeN}, true
	case errors.Is(err, ratelimit.ErrExceedsLimit):
		return &costError{cost: n, err: ratelimit.ErrExceedsLimit}, true
	}
	return err, false
}
