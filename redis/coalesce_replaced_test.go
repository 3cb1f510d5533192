package redis

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchReadsReplacedValue: what a batch knows of a key (its numbers,
// kept while the batch runs) does not outlive the batch. Here another
// client copies key b's state onto key a between batches, each call a
// batch: from then on a and b decide alike, whatever a held before.
func TestBatchReadsReplacedValue(t *testing.T) {
	client := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	for _, a := range testAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(t)
			l, err := a.redis(client, ratelimit.PerHour(10), 10, WithClock(mc), WithPrefix(prefix), withClockTime(60_000),
				withBatchAlways(), WithTimeout(5*time.Second), WithOnError(func(key string, err error) { t.Errorf("redis error for %q: %v", key, err) }))
			if err != nil {
				t.Fatal(err)
			}
			base := l.(interface{ base() *limiter }).base()
			for range 6 {
				l.Allow("a")
				mc.Advance(time.Minute)
			}
			l.Allow("b")
			mc.Advance(time.Second)
			ka := make([]string, len(base.suffix))
			kb := make([]string, len(base.suffix))
			redisKeys(ka, prefix, "a", base.suffix)
			redisKeys(kb, prefix, "b", base.suffix)
			differ := false
			for i := range ka {
				va, _ := client.Get(ctx, ka[i]).Result()
				vb, _ := client.Get(ctx, kb[i]).Result()
				differ = differ || va != vb
			}
			if !differ {
				t.Fatal("a and b hold the same state before the copy: the test shows nothing")
			}
			for i := range ka {
				if err := client.Copy(ctx, kb[i], ka[i], 0, true).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 4 {
				da, err := l.AllowN(ctx, "a", 1)
				if err != nil {
					t.Fatal(err)
				}
				db, err := l.AllowN(ctx, "b", 1)
				if err != nil {
					t.Fatal(err)
				}
				if da != db {
					t.Fatalf("call %d after the copy: a decided %+v, b %+v", i, da, db)
				}
			}
		})
	}
}
