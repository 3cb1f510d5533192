package otel

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// BatchBuckets are the bucket boundaries of the Redis backend's
// batch-size histogram (ratelimit.redis.batch.size): decisions per batch.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// newBatchHistogram makes the histogram of the sizes of the batches a
// Redis limiter sent (ratelimit.EventBatch), by limiter.
func newBatchHistogram(meter metric.Meter) (metric.Int64Histogram, error) {
	return meter.Int64Histogram("ratelimit.redis.batch.size", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions per batch a Redis limiter sent in one call (coalescing)."),
		metric.WithExplicitBucketBoundaries(BatchBuckets...))
}

// batch records a batch of n decisions of s's limiter.
func (b boundSeries) batch(n int) {
	b.m.batch.Record(context.Background(), int64(n), b.s.waitOpt...)
}
