package ratelimit

import (
	"context"
	"testing"
)

// BenchmarkBulkheadFairAcquireRelease is BenchmarkBulkheadAcquireRelease on
// a fair bulkhead with classes: every call takes the mutex.
func BenchmarkBulkheadFairAcquireRelease(b *testing.B) {
	bh, err := NewBulkhead(4, WithBulkheadFairQueue(64, 4096), WithBulkheadClasses(Class{"critical", 1}, Class{"batch", 0}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bh.AcquireFor(ctx, "tenant"); err != nil {
			b.Fatal(err)
		}
		bh.Release()
	}
}
