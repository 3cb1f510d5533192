package redis

import "github.com/ratelimitkit/ratelimit"

// WithObserver sets an observer of the limiter's backend events (default
// none): one ratelimit.EventBatch per batch that coalescing sends, with
// its size in N and the name set by WithName in Limiter, and the operator
// actions, as the in-memory limiters report them (ratelimit.EventSetRate,
// EventSetOverride, EventRemoveOverride, EventReset, EventSettle, each
// after the change succeeded, with the fields its doc names). It runs on
// the goroutine that sends the batch or makes the change, never under the
// limiter's locks, and must be quick and must not block. Decisions
// themselves are not reported to it.
func WithObserver(o ratelimit.Observer) Option { return func(c *config) { c.observer = o } }

// WithName names the limiter in the events it reports (default "").
func WithName(name string) Option { return func(c *config) { c.name = name } }

// batched reports a batch of n decisions to the observer, if any.
func (l *caller) batched(n int) {
	if l.cfg.observer != nil {
		l.cfg.observer.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: l.cfg.name, N: n})
	}
}

// operated reports an operator action of kind on key, if the limiter has
// an observer; n and remaining as ratelimit's operator events fill them.
func (l *caller) operated(kind ratelimit.EventKind, key string, n, remaining int) {
	if l.cfg.observer != nil {
		l.cfg.observer.Observe(ratelimit.Event{Kind: kind, Limiter: l.cfg.name, Key: key, N: n,
			Allowed: kind == ratelimit.EventSettle, Remaining: remaining})
	}
}
