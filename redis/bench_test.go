package redis

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// Benchmarks against the local redis-server (loopback), in decisions per
// second, serial (one caller, so one round trip at a time), parallel
// (GOMAXPROCS×4 callers sharing the client's pool) and with a client per
// caller (BenchmarkReplicas). The baseline is a bare PING: the floor any
// decision pays for its round trip.
//
//	go test -run '^$' -bench . -benchtime 200ms ./redis

var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

func benchLimiter(b *testing.B, lim ratelimit.Limiter) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			lim.Allow(benchKeys[i&1023])
		}
		reportRate(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1) * 7919
			for pb.Next() {
				lim.Allow(benchKeys[i&1023])
				i++
			}
		})
		reportRate(b)
	})
}

func BenchmarkPingBaseline(b *testing.B) {
	c := newClient(b, redisAddr(b), true)
	ctx := bg
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Ping(ctx)
		}
		reportRate(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Ping(ctx)
			}
		})
		reportRate(b)
	})
}

// BenchmarkAlgorithms measures Allow on 1024 keys per algorithm, with a
// client that bounds I/O by the context (the direct path).
func BenchmarkAlgorithms(b *testing.B) {
	c := newClient(b, redisAddr(b), true)
	for _, a := range testAlgorithms {
		b.Run(a.name, func(b *testing.B) {
			lim, err := a.builder(a.bench)(c, WithPrefix(testPrefix(b)), WithFailurePolicy(FailClosed))
			if err != nil {
				b.Fatal(err)
			}
			benchLimiter(b, lim)
		})
	}
}

// BenchmarkReplicas: GOMAXPROCS×4 callers, each with a client and a
// limiter of its own, as as many service replicas sharing one Redis.
func BenchmarkReplicas(b *testing.B) {
	addr := redisAddr(b)
	prefix := testPrefix(b)
	b.ReportAllocs()
	b.SetParallelism(4)
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		lim, err := NewTokenBucket(c, ratelimit.PerSecond(1_000_000), 1000, WithPrefix(prefix), WithFailurePolicy(FailClosed))
		if err != nil {
			b.Error(err)
			return
		}
		i := next.Add(1) * 7919
		for pb.Next() {
			lim.Allow(benchKeys[i&1023])
			i++
		}
	})
	reportRate(b)
}

// BenchmarkTokenBucket compares the direct path with the helper goroutine
// used for clients that ignore contexts.
func BenchmarkTokenBucket(b *testing.B) {
	for _, mode := range []struct {
		name       string
		ctxTimeout bool
	}{{"ContextTimeoutEnabled", true}, {"helperGoroutine", false}} {
		b.Run(mode.name, func(b *testing.B) {
			c := newClient(b, redisAddr(b), mode.ctxTimeout)
			lim, err := NewTokenBucket(c, ratelimit.PerSecond(1_000_000), 1000, WithPrefix(testPrefix(b)), WithFailurePolicy(FailClosed))
			if err != nil {
				b.Fatal(err)
			}
			benchLimiter(b, lim)
		})
	}
}

// BenchmarkTokenBucketDenyCache: a flood on one key that Redis denies,
// answered locally by the deny-cache after the first denial.
func BenchmarkTokenBucketDenyCache(b *testing.B) {
	c := newClient(b, redisAddr(b), true)
	lim, err := NewTokenBucket(c, ratelimit.PerHour(1), 1, WithPrefix(testPrefix(b)), WithDenyCache(1024))
	if err != nil {
		b.Fatal(err)
	}
	lim.Allow("flood")
	b.ReportAllocs()
	for b.Loop() {
		if lim.Allow("flood") {
			b.Fatal("allowed")
		}
	}
	reportRate(b)
}
