package httplimit

import (
	"context"
	"net/http"

	"github.com/ratelimitkit/ratelimit"
)

// WithPriority gives each request a priority class, carried to the
// limiter in the context of its AllowN (ratelimit.ContextWithPriority). A
// ratelimit.Fair with classes (ratelimit.WithClasses) decides the request
// in that class; other limiters ignore it. A priority that names no class
// of the Fair is an error of the limiter (ratelimit.ErrUnknownClass),
// handled as WithErrorHandler says. WithCost's requests are not given a
// priority.
func WithPriority(f func(r *http.Request) ratelimit.Priority) LimitOption {
	return limitOption(func(c *limitConfig) { c.priority = f })
}

// limiterContext is the context AllowN is called with for r.
func (c *limitConfig) limiterContext(r *http.Request) context.Context {
	if c.priority == nil {
		return r.Context()
	}
	return ratelimit.ContextWithPriority(r.Context(), c.priority(r))
}
