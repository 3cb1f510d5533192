package grpclimit

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
)

// WithPriority gives each call of RateLimit or RulesLimit a priority
// class, carried to the limiter in the context of its AllowN
// (ratelimit.ContextWithPriority), or of the rules' Check. A
// ratelimit.Fair with classes (ratelimit.WithClasses), or a rule with
// Classes, decides the call in that class; other limiters and rules ignore
// it. A priority that names no class is an error of the limiter
// (ratelimit.ErrUnknownClass), handled as WithErrorHandler says. Calls
// charged with WithCost are not given a priority.
func WithPriority(f func(ctx context.Context, fullMethod string) ratelimit.Priority) Option {
	return func(c *config) { c.priority = f; c.use("WithPriority", forRate|forRules, false) }
}

// limiterContext is the context AllowN is called with for a call of method.
func (c *config) limiterContext(ctx context.Context, method string) context.Context {
	if c.priority == nil {
		return ctx
	}
	return ratelimit.ContextWithPriority(ctx, c.priority(ctx, method))
}
