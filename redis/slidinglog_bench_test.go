package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkSlidingLogFull: one key whose log is full (L events 1 ms
// apart), each decision admitting one event as the oldest leaves the
// window, serially, without coalescing: this version (the log as one
// string up to slPackedMax events, as a list above) against the list the
// previous versions kept (their script, from testdata), at L = 1,000,
// 2,048, 10,000, 100,000 and 1,048,576. It reports the server's time per
// decision (INFO commandstats: the FCALL or EVALSHA, with the commands it
// ran) as server-µs/decision.
//
//	go test -run '^$' -bench SlidingLogFull -benchtime 2s ./redis
func BenchmarkSlidingLogFull(b *testing.B) {
	c := newClient(b, redisAddr(b), true)
	ctx := context.Background()
	old := listScript(b)
	// fill writes a full list log under k, as the previous versions did.
	fill := func(k string, l int, w time.Duration, now int64) {
		vals := make([]any, 0, 10_000)
		for i := range l {
			vals = append(vals, strconv.FormatInt(now-int64(w)+int64(i+1)*int64(time.Millisecond), 10))
			if len(vals) == cap(vals) || i == l-1 {
				if err := c.RPush(ctx, k, vals...).Err(); err != nil {
					b.Fatal(err)
				}
				vals = vals[:0]
			}
		}
	}
	for _, l := range []int{1000, slPackedMax, 10_000, 100_000, 1 << 20} {
		w := time.Duration(l) * time.Millisecond
		rate := ratelimit.Per(int64(l), w)
		now := start.UnixNano()
		b.Run("L="+strconv.Itoa(l)+"/this", func(b *testing.B) {
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(b)
			if l > slPackedMax {
				fill(redisKey(prefix, "k", ":sl"), l, w, now)
			} else {
				entries := make([]float64, l)
				for i := range entries {
					entries[i] = float64(-w + time.Duration(i+1)*time.Millisecond)
				}
				if err := c.Set(ctx, redisKey(prefix, "k", ":slp"), packedLog(now, 0, entries...), 0).Err(); err != nil {
					b.Fatal(err)
				}
			}
			lim, err := NewSlidingLog(c, rate, WithPrefix(prefix), WithClock(mc), withClockTime(60_000), WithCoalescing(false))
			if err != nil {
				b.Fatal(err)
			}
			if d, err := lim.AllowN(ctx, "k", 0); err != nil || d.Remaining != 0 { // loads the script
				b.Fatalf("the full log's peek: %+v %v", d, err)
			}
			c.ConfigResetStat(ctx)
			for b.Loop() {
				mc.Advance(time.Millisecond)
				if !lim.Allow("k") {
					b.Fatal("refused")
				}
			}
			reportServer(b, c, "fcall")
			c.Del(ctx, redisKey(prefix, "k", ":slp"), redisKey(prefix, "k", ":sl"), redisKey(prefix, "k", ":slf"))
		})
		b.Run("L="+strconv.Itoa(l)+"/list", func(b *testing.B) {
			mc := ratelimit.NewManualClock(start)
			prefix := testPrefix(b)
			k := redisKey(prefix, "k", ":sl")
			fill(k, l, w, now)
			ll := listLimiter{c: c, s: old, prefix: prefix, mc: mc, rate: rate}
			ll.step(b, "k", 0, 0) // loads the script
			c.ConfigResetStat(ctx)
			for b.Loop() {
				mc.Advance(time.Millisecond)
				if ok, _ := ll.step(b, "k", 1, 0); !ok {
					b.Fatal("refused")
				}
			}
			reportServer(b, c, "evalsha")
			c.Del(ctx, k, redisKey(prefix, "k", ":slf"))
		})
	}
}

// reportServer reports the server's time per call of cmd since the last
// CONFIG RESETSTAT.
func reportServer(b *testing.B, c *goredis.Client, cmd string) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				us, _ := strconv.ParseFloat(v, 64)
				b.ReportMetric(us, "server-µs/decision")
				return
			}
		}
	}
	b.Fatalf("no %s in INFO commandstats", cmd)
}
