package redis

import "github.com/ratelimitkit/ratelimit"

// WithObserver sets an observer of the limiter's backend events (default
// none): one ratelimit.EventBatch per batch that coalescing sends, with
// its size in N and the name set by WithName in Limiter. It runs on the
// goroutine that sends the batch, before the call, and must be quick and
// must not block. Decisions themselves are not reported to it.
func WithObserver(o ratelimit.Observer) Option { return func(c *config) { c.observer = o } }

// WithName names the limiter in the events it reports (default "").
func WithName(name string) Option { return func(c *config) { c.name = name } }

// batched reports a batch of n decisions to the observer, if any.
func (l *caller) batched(n int) {
	if l.cfg.observer != nil {
		l.cfg.observer.Observe(ratelimit.Event{Kind: ratelimit.EventBatch, Limiter: l.cfg.name, N: n})
	}
}
