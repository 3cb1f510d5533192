package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimitkit/ratelimit"
)

// penaltyCounters counts a PenaltyBox's blocks on ratelimit.penalty.blocks
// {block} and the ends of blocks on ratelimit.penalty.unblocks {block},
// with the attribute ratelimit.limiter, and for unblocks
// ratelimit.penalty.early (true for a block dropped before its end to
// make room).
type penaltyCounters struct{ blocks, unblocks metric.Int64Counter }

func newPenaltyCounters(meter metric.Meter) (penaltyCounters, error) {
	b, err := meter.Int64Counter("ratelimit.penalty.blocks", metric.WithUnit("{block}"),
		metric.WithDescription("Keys blocked by a penalty box, by limiter."))
	if err != nil {
		return penaltyCounters{}, err
	}
	u, err := meter.Int64Counter("ratelimit.penalty.unblocks", metric.WithUnit("{block}"),
		metric.WithDescription("Blocks of a penalty box that ended, by limiter; early if dropped before their end to make room."))
	return penaltyCounters{b, u}, err
}

// observe counts e under name if it is a penalty box event.
func (p penaltyCounters) observe(name string, e ratelimit.Event) {
	switch {
	case e.Kind == ratelimit.EventBlocked && p.blocks != nil:
		p.blocks.Add(context.Background(), 1, metric.WithAttributes(LimiterKey.String(name)))
	case e.Kind == ratelimit.EventUnblocked && p.unblocks != nil:
		p.unblocks.Add(context.Background(), 1, metric.WithAttributes(LimiterKey.String(name),
			attribute.Bool("ratelimit.penalty.early", e.RetryAfter > 0)))
	}
}
