package httplimit

import (
	"context"
	"net/http"

	"github.com/ratelimitkit/ratelimit"
)

// WithPriority gives each request a priority class, carried to the
// limiter in the context of its AllowN (ratelimit.ContextWithPriority), or
// of the rules' Check in RulesMiddleware. A ratelimit.Fair with classes
// (ratelimit.WithClasses), or a rule with Classes, decides the request in
// that class; other limiters and rules ignore it. A priority that names no
// class is an error of the limiter (ratelimit.ErrUnknownClass), handled as
// WithErrorHandler says. WithCost's requests are not given a priority.
func WithPriority(f func(r *http.Request) ratelimit.Priority) ResponseOption {
	return responseOption(func(c *response) { c.priority = f })
}

// limiterContext is the context AllowN (or Check) is called with for r.
func (c *response) limiterContext(r *http.Request) context.Context {
	if c.priority == nil {
		return r.Context()
	}
	return ratelimit.ContextWithPriority(r.Context(), c.priority(r))
}
