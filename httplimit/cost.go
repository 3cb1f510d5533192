package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/charge"
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
// once the work is done. A nil f charges one event a request, as without
// the option.
func WithCost(f func(r *http.Request) int) ResponseOption {
	return responseOption(func(c *response) { c.cost = f })
}

// ErrInvalidCost means the WithCost function gave a request a cost the
// limit cannot charge: a negative one (the error also matches
// ratelimit.ErrNegativeN) or one more than the limit allows at once
// (ratelimit.ErrExceedsLimit). The request is refused through the error
// handler; WithFailOpen does not apply to it.
var ErrInvalidCost = errors.New("httplimit: the request's cost cannot be charged")

// costs makes the errors of requests whose cost cannot be charged.
var costs = charge.Costs{Pkg: "httplimit", Unit: "request", Invalid: ErrInvalidCost}

// Settle settles the charge of r, a request that the middleware booked
// with WithCost, at its actual cost, once the handler knows it: the
// surplus of a charge above the actual cost is given back as the
// limiter's Reservation.Settle gives it back, and an excess is booked as
// debt on the key, which later requests wait for. Under RulesMiddleware
// every rule the request was charged under is settled at the one actual
// cost; a shadow rule keeps its charge. A request that is never settled
// keeps its charge. Under several middlewares with WithCost, Settle
// settles the innermost one's charge (the one nearest the handler): each
// has its own cost function, and the others' costs may count other units.
//
// Settle rewrites the rate-limit headers (RateLimit, and the
// X-RateLimit headers if selected) in the response's header map to the
// state after the settlement; a debt shows as no quota remaining until
// the reset, never as a Retry-After on a request that was allowed.
// Settle before the first Write or WriteHeader for the response to carry
// them: after that the settlement still counts, but the response keeps
// the headers it was sent with. Once the handler has returned, Settle no
// longer touches the header map. Call it from the handler's goroutine, or
// make sure the handler does not touch the header map meanwhile, as for
// any header.
//
// Settle returns an error matching ratelimit.ErrCannotSettle, saying why,
// for a request with no charge to settle: one that went through no
// middleware with WithCost, or was exempt or let through unlimited by
// WithFailOpen; one whose limiter (or one of whose rules' limiters) is no
// ratelimit.Taker, or whose rules are all shadow rules; one that cost 0,
// so that nothing was booked. actual < 0 returns ratelimit.ErrNegativeN
// and settles nothing. A second Settle returns ratelimit.ErrSettled. An
// error of a remote limiter is returned as is.
func Settle(r *http.Request, actual int) error {
	ch, _ := r.Context().Value(chargeKey{}).(*charge.Charge)
	if ch == nil {
		return charge.CannotSettle("httplimit: nothing to settle: the request went through no middleware with WithCost, or it was exempt or let through unlimited by WithFailOpen")
	}
	return ch.Settle(actual)
}

// chargeKey is the context key of a request's *charge.Charge.
type chargeKey struct{}

const (
	whyNoTaker = "httplimit: nothing to settle: the middleware's limiter cannot book for a settlement (it is no ratelimit.Taker)"
	whyNoRules = "httplimit: nothing to settle: a limiter of the request's rules cannot book for a settlement (it is no ratelimit.Taker)"
	whyFree    = "httplimit: nothing to settle: the request cost 0, so nothing was booked"
	whyShadows = "httplimit: nothing to settle: the request's rules are all shadow rules, which do not settle"
)

// serveCost is Middleware's path for a request with WithCost: it charges
// the request's cost, as a booking when the limiter is a Taker, and hands
// the handler the request with its charge.
func (m *limitMiddleware) serveCost(w http.ResponseWriter, r *http.Request, next http.Handler, key string) {
	c := m.cfg
	n := c.cost(r)
	if n < 0 {
		c.onError(w, r, costs.Error(n, ratelimit.ErrNegativeN))
		return
	}
	var d ratelimit.Decision
	var res *ratelimit.Reservation
	var err error
	if m.taker != nil && n > 0 {
		if res, err = m.taker.Take(r.Context(), key, n); err == nil {
			d = res.Decision()
		}
	} else {
		d, err = m.lim.AllowN(r.Context(), key, n)
	}
	if err != nil {
		if cerr := costs.Of(n, err); cerr != nil {
			c.onError(w, r, cerr)
			return
		}
		c.undecided(w, r, next, err, true)
		return
	}
	h := w.Header()
	headers := func(d ratelimit.Decision, denied bool) {
		v := view{item: m.item, d: d, retry: d.RetryAfter, denied: denied}
		if c.headers&IETFHeaders != 0 {
			v.policy = m.policyFor(d.Limit)
		}
		write(h, c.headers, &v)
	}
	if !m.shadow {
		headers(d, !d.Allowed)
	}
	if !d.Allowed {
		c.denied(w, r, Denial{Decision: d, Policies: m.names})
		return
	}
	var ch *charge.Charge
	switch {
	case res != nil && res.OK():
		// The request was allowed: a debt its settlement leaves shows as
		// no quota remaining until the reset, never as a Retry-After on
		// its response.
		show := func(ds []ratelimit.Decision) { headers(ds[0], false) }
		if m.shadow {
			show = nil
		}
		ch = charge.New([]*ratelimit.Reservation{res}, []ratelimit.Decision{d}, show)
	case m.taker == nil:
		ch = charge.Unsettled(whyNoTaker)
	default:
		ch = charge.Unsettled(whyFree)
	}
	serveCharged(w, r, next, ch)
}

// serveCharged runs next with ch in the request's context, and ends ch's
// hold on the headers when next returns.
func serveCharged(w http.ResponseWriter, r *http.Request, next http.Handler, ch *charge.Charge) {
	defer ch.Done()
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chargeKey{}, ch)))
}

// serveCost is RulesMiddleware's path for a request with WithCost, past
// its exemptions: it charges the cost under every rule of cv, as bookings
// when every rule's limiter is a Taker, all or nothing.
func (m *rulesMiddleware) serveCost(w http.ResponseWriter, r *http.Request, next http.Handler, cv *classView, who ratelimit.Subject) {
	c := m.cfg
	n := c.cost(r)
	if n < 0 {
		c.onError(w, r, costs.Error(n, ratelimit.ErrNegativeN))
		return
	}
	if cv.limits == nil || n == 0 || cv.shadows == len(cv.names) {
		// Nothing to book: decide as Check does.
		d, err := cv.set.Check(r.Context(), who, n)
		if err != nil {
			m.failed(w, r, next, n, err)
			return
		}
		if cv.shadows < len(cv.names) {
			i := d.Strictest()
			v := view{policy: cv.policy, item: cv.items[i], d: d.At(i), retry: d.RetryAfter, denied: !d.Allowed}
			write(w.Header(), c.headers, &v)
		}
		if !d.Allowed {
			c.denied(w, r, Denial{Decision: d.Decision, Policies: violated(cv, d.Len(), d.At)})
			return
		}
		why := whyFree
		switch {
		case cv.limits == nil:
			why = whyNoRules
		case cv.shadows == len(cv.names):
			why = whyShadows
		}
		serveCharged(w, r, next, charge.Unsettled(why))
		return
	}
	limits := make([]charge.Limit, len(cv.limits))
	copy(limits, cv.limits)
	for i := range limits {
		switch cv.scopes[i] {
		case ratelimit.PerUser:
			if limits[i].Key = who.User; who.User == "" {
				c.undecided(w, r, next, fmt.Errorf("%w: rule %q counts per user and the request has none", ErrNoKey, cv.names[i]), false)
				return
			}
		case ratelimit.PerIP:
			if limits[i].Key = who.IP; who.IP == "" {
				c.undecided(w, r, next, fmt.Errorf("%w: rule %q counts per client address and the request has none", ErrNoKey, cv.names[i]), false)
				return
			}
		}
	}
	ds := make([]ratelimit.Decision, len(limits))
	res := make([]*ratelimit.Reservation, len(limits))
	allowed, err := charge.Take(r.Context(), n, limits, ds, res)
	if err != nil {
		m.failed(w, r, next, n, err)
		return
	}
	h := w.Header()
	i := ratelimit.Strictest(ds) // never a shadow rule's
	v := view{policy: cv.policy, item: cv.items[i], d: ds[i], retry: charge.Combine(ds).RetryAfter, denied: !allowed}
	write(h, c.headers, &v)
	// After the settlement, as for Middleware: no Retry-After on an
	// allowed request, whatever debt it left.
	show := func(ds []ratelimit.Decision) {
		i := ratelimit.Strictest(ds)
		v := view{policy: cv.policy, item: cv.items[i], d: ds[i]}
		write(h, c.headers, &v)
	}
	if !allowed {
		c.denied(w, r, Denial{Decision: charge.Combine(ds), Policies: violated(cv, len(ds), func(i int) ratelimit.Decision { return ds[i] })})
		return
	}
	serveCharged(w, r, next, charge.New(res, ds, show))
}

// failed answers a request whose charge of n failed: a cost the limits
// cannot charge, a missing key, or a limiter that failed.
func (m *rulesMiddleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, n int, err error) {
	if cerr := costs.Of(n, err); cerr != nil {
		m.cfg.onError(w, r, cerr)
		return
	}
	m.cfg.undecided(w, r, next, err, true)
}

// violated names the rules of cv whose decision, of n, denied.
func violated(cv *classView, n int, at func(int) ratelimit.Decision) []string {
	var names []string
	for j := range n {
		if !at(j).Allowed {
			names = append(names, cv.names[j])
		}
	}
	return names
}
