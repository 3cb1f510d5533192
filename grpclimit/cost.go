package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/charge"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Settle settles the charge of the call whose context is ctx (a unary
// handler's ctx, or a stream's Context()), booked by RateLimit or
// RulesLimit with WithCost, at its actual cost, once the handler knows
// it: the surplus of a charge above the actual cost is given back as the
// limiter's Reservation.Settle gives it back, and an excess is booked as
// debt on the key, which later calls wait for. Under RulesLimit every
// rule the call was charged under is settled at the one actual cost (a
// shadow rule keeps its charge). With several interceptors with WithCost
// chained, Settle settles the innermost one's charge (the last in the
// chain), since each has its own cost function. A call never settled
// keeps its charge; a stream is charged once, when it
// opens, and settled at most once, from its handler, at any time before
// the handler returns.
//
// The header metadata, sent before the handler's response, shows the
// charge at the call's admission. Settle writes the state after the
// settlement into the trailer metadata, under the same keys
// (MDRateLimitPolicy, MDRateLimit), as long as the handler has not
// returned; after that the settlement still counts, and no metadata is
// written. A debt shows as no quota remaining until the reset, never as a
// retry-after on a call that was allowed. WithoutMetadata leaves the
// trailer alone too.
//
// Settle returns an error matching ratelimit.ErrCannotSettle, saying why,
// for a call with no charge to settle: one that went through no
// interceptor with WithCost, or was exempt or let through unlimited by
// WithFailOpen; one whose limiter (or one of whose rules' limiters) is no
// ratelimit.Taker, or whose rules are all shadow rules; one that cost 0,
// so that nothing was booked. actual < 0 returns ratelimit.ErrNegativeN and
// settles nothing. A second Settle returns ratelimit.ErrSettled. An error
// of a remote limiter is returned as is.
func Settle(ctx context.Context, actual int) error {
	ch, _ := ctx.Value(chargeKey{}).(*charge.Charge)
	if ch == nil {
		return charge.CannotSettle("grpclimit: nothing to settle: the call went through no interceptor with WithCost, or it was exempt or let through unlimited by WithFailOpen")
	}
	return ch.Settle(actual)
}

// chargeKey is the context key of a call's *charge.Charge.
type chargeKey struct{}

const (
	whyNoTaker = "grpclimit: nothing to settle: the interceptor's limiter cannot book for a settlement (it is no ratelimit.Taker)"
	whyNoRules = "grpclimit: nothing to settle: a limiter of the method's rules cannot book for a settlement (it is no ratelimit.Taker)"
	whyFree    = "grpclimit: nothing to settle: the call cost 0, so nothing was booked"
	whyShadows = "grpclimit: nothing to settle: the method's rules are all shadow rules, which do not settle"
)

// chargedStream is a stream whose context carries its charge.
type chargedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *chargedStream) Context() context.Context { return c.ctx }

// costOf returns the cost of a call: WithCost's, with the error for a
// negative one.
func (c *config) costOf(ctx context.Context, method string) (int, error) {
	n := c.cost(ctx, method)
	if n < 0 {
		return n, c.onError(ctx, method, costs.Error(n, ratelimit.ErrNegativeN))
	}
	return n, nil
}

// chargeFailed returns the error for a charge of n that failed: a cost
// the limits cannot charge, or a limiter's failure.
func (s *ServerLimit) chargeFailed(ctx context.Context, method string, n int, err error) error {
	c := s.cfg
	switch {
	case errors.Is(err, ratelimit.ErrNegativeN):
		return c.onError(ctx, method, costs.Error(n, ratelimit.ErrNegativeN))
	case errors.Is(err, ratelimit.ErrExceedsLimit):
		return c.onError(ctx, method, costs.Error(n, ratelimit.ErrExceedsLimit))
	}
	return s.failed(ctx, method, err)
}

// chargeLimiter is RateLimit's path for a call with WithCost: it charges
// the call's cost, as a booking when the limiter is a Taker. A call
// allowed gets its charge (nil when failing open).
func (s *ServerLimit) chargeLimiter(ctx context.Context, method, key string, header, trailer func(metadata.MD)) (*charge.Charge, error) {
	c := s.cfg
	n, err := c.costOf(ctx, method)
	if err != nil {
		return nil, err
	}
	var d ratelimit.Decision
	var res *ratelimit.Reservation
	if s.taker != nil && n > 0 {
		if res, err = s.taker.Take(ctx, key, n); err == nil {
			d = res.Decision()
		}
	} else {
		d, err = s.lim.AllowN(ctx, key, n)
	}
	if err != nil {
		return nil, s.chargeFailed(ctx, method, n, err)
	}
	if !d.Allowed || c.metadata {
		header(rateMetadata(s.policyFor(d.Limit), s.item, d, d.RetryAfter))
	}
	if !d.Allowed {
		return nil, denial(d.RetryAfter, []violation{{name: s.names[0], limit: d.Limit, window: c.window}})
	}
	switch {
	case res != nil && res.OK():
		var show func([]ratelimit.Decision)
		if c.metadata {
			show = func(ds []ratelimit.Decision) { trailer(settledMetadata(s.policyFor(ds[0].Limit), s.item, ds[0])) }
		}
		return charge.New([]*ratelimit.Reservation{res}, []ratelimit.Decision{d}, show), nil
	case s.taker == nil:
		return charge.Unsettled(whyNoTaker), nil
	}
	return charge.Unsettled(whyFree), nil
}

// chargeRules is RulesLimit's path for a call with WithCost, past its
// exemptions: it charges the cost under every rule of cv, all or nothing,
// as bookings when every rule's limiter is a Taker.
func (s *ServerLimit) chargeRules(ctx context.Context, method string, cv *classView, who ratelimit.Subject, header, trailer func(metadata.MD)) (*charge.Charge, error) {
	c := s.cfg
	n, err := c.costOf(ctx, method)
	if err != nil {
		return nil, err
	}
	if cv.limits == nil || n == 0 || cv.allShadow {
		d, err := cv.set.Check(ctx, who, n)
		if err != nil {
			return nil, s.chargeFailed(ctx, method, n, err)
		}
		i := d.Strictest()
		if !d.Allowed || c.metadata {
			header(rateMetadata(cv.policy, cv.items[i], d.At(i), d.RetryAfter))
		}
		if !d.Allowed {
			return nil, denial(d.RetryAfter, violations(cv, d.Len(), d.At))
		}
		switch {
		case cv.limits == nil:
			return charge.Unsettled(whyNoRules), nil
		case cv.allShadow:
			return charge.Unsettled(whyShadows), nil
		}
		return charge.Unsettled(whyFree), nil
	}
	limits := make([]charge.Limit, len(cv.limits))
	copy(limits, cv.limits)
	for i := range limits {
		switch r := &cv.rules[i]; r.KeyScope() {
		case ratelimit.PerUser:
			if limits[i].Key = who.User; who.User == "" {
				return nil, c.onError(ctx, method, fmt.Errorf("%w: rule %q counts per user and the call has none", ErrNoKey, r.Name))
			}
		case ratelimit.PerIP:
			if limits[i].Key = who.IP; who.IP == "" {
				return nil, c.onError(ctx, method, fmt.Errorf("%w: rule %q counts per client address and the call has none", ErrNoKey, r.Name))
			}
		}
	}
	ds := make([]ratelimit.Decision, len(limits))
	res := make([]*ratelimit.Reservation, len(limits))
	allowed, err := charge.Take(ctx, n, limits, ds, res)
	if err != nil {
		return nil, s.chargeFailed(ctx, method, n, err)
	}
	combined := charge.Combine(ds)
	i := ratelimit.Strictest(ds)
	if !allowed || c.metadata {
		header(rateMetadata(cv.policy, cv.items[i], ds[i], combined.RetryAfter))
	}
	if !allowed {
		return nil, denial(combined.RetryAfter, violations(cv, len(ds), func(j int) ratelimit.Decision { return ds[j] }))
	}
	var show func([]ratelimit.Decision)
	if c.metadata {
		show = func(ds []ratelimit.Decision) {
			i := ratelimit.Strictest(ds)
			trailer(settledMetadata(cv.policy, cv.items[i], ds[i]))
		}
	}
	return charge.New(res, ds, show), nil
}

// settledMetadata is the trailer metadata of a settled call: the key's
// state after the settlement. The call was allowed, so a debt it left
// shows as no quota remaining until the reset, never as a retry-after.
func settledMetadata(policy, item string, d ratelimit.Decision) metadata.MD {
	d.Allowed, d.RetryAfter = true, 0
	return rateMetadata(policy, item, d, 0)
}
