package prometheus

import (
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"
)

// BatchBuckets are the buckets of the Redis backend's batch-size
// histogram (ratelimit_redis_batch_size): decisions per batch.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// batchSizes is the histogram of the sizes of the batches a Redis limiter
// sent (ratelimit.EventBatch), by limiter name, made at first use.
type batchSizes struct {
	once sync.Once
	vec  *prom.HistogramVec
}

func (b *batchSizes) get() *prom.HistogramVec {
	b.once.Do(func() {
		b.vec = prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "ratelimit_redis_batch_size",
			Help:    "Decisions per batch a Redis limiter sent in one call (coalescing).",
			Buckets: BatchBuckets,
		}, []string{"limiter"})
	})
	return b.vec
}

func (b *batchSizes) describe(ch chan<- *prom.Desc) { b.get().Describe(ch) }
func (b *batchSizes) collect(ch chan<- prom.Metric) { b.get().Collect(ch) }

// observe counts a batch of n decisions of the limiter name.
func (b *batchSizes) observe(name string, n int) { b.get().WithLabelValues(name).Observe(float64(n)) }
