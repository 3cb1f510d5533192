package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratelimitkit/ratelimit"
	rlredis "github.com/ratelimitkit/ratelimit/redis"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkRedis measures decisions per second against a real Redis on
// loopback: our redis TokenBucket next to github.com/go-redis/redis_rate/v10,
// both GCRA, with the same parameters (10⁶ events per second, burst 1000)
// over 1024 keys, on the allow path (the limit is never reached); and a
// bare PING on the same client, the floor of any one-round-trip decision.
// Each runs serially (one caller, one round trip at a time) and with
// b.RunParallel at parallelism 4 (4×GOMAXPROCS callers sharing the
// client's connection pool).
//
// Redis is RATELIMIT_REDIS_ADDR if set, else a redis-server started on a
// free loopback port for this benchmark and stopped at its end. Without a
// redis-server binary the benchmark skips. It is a benchmark only: plain
// `go test` never starts Redis. `make bench-redis` runs it.
//
// How each is called: ours through Limiter.Allow, which bounds each call
// by its own timeout (a context.WithTimeout per call: part of what ours
// costs) and runs its script by EVALSHA; redis_rate through
// Limiter.Allow(context.Background(), key, limit), the way its README calls
// it. A call that errs, or that is denied, fails the run: a figure off the
// allow path, or from a failure policy's local answer, would not be a
// Redis decision.
func BenchmarkRedis(b *testing.B) {
	addr := benchRedisAddr(b)
	client := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("PING %s: %v", addr, err)
	}

	// Keys of this run's own, so that a shared Redis (RATELIMIT_REDIS_ADDR)
	// holds no state from an earlier run under them.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "rlbench:" + run + ":user:" + strconv.Itoa(i)
	}

	var errs atomic.Int64
	ours, err := rlredis.NewTokenBucket(client, ratelimit.PerSecond(1_000_000), 1000,
		rlredis.WithFailurePolicy(rlredis.FailClosed),
		rlredis.WithTimeout(time.Second), // a loaded machine must not turn a slow answer into a policy answer
		rlredis.WithOnError(func(string, error) { errs.Add(1) }))
	if err != nil {
		b.Fatal(err)
	}
	peer := redis_rate.NewLimiter(client)
	limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1000, Period: time.Second}

	impls := []struct {
		name  string
		allow func(key string) bool // true when Redis allowed the call
	}{
		{"ping", func(string) bool { return client.Ping(context.Background()).Err() == nil }},
		{"ours-tokenbucket", func(key string) bool { return ours.Allow(key) }},
		{"redis_rate", func(key string) bool {
			res, err := peer.Allow(context.Background(), key, limit)
			if err != nil {
				errs.Add(1)
				return false
			}
			return res.Allowed == 1
		}},
	}
	for _, im := range impls {
		b.Run("path=allow/impl="+im.name, func(b *testing.B) {
			b.Run("run=serial", func(b *testing.B) {
				errs.Store(0)
				b.ReportAllocs()
				wrong := 0
				for i := 0; b.Loop(); i++ {
					if !im.allow(keys[i&1023]) {
						wrong++
					}
				}
				reportRedis(b, wrong, errs.Load())
			})
			b.Run("run=parallel", func(b *testing.B) {
				errs.Store(0)
				b.ReportAllocs()
				b.SetParallelism(4)
				var next, wrong atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i, w := int(next.Add(1))*7919, 0
					for pb.Next() {
						if !im.allow(keys[i&1023]) {
							w++
						}
						i++
					}
					wrong.Add(int64(w))
				})
				reportRedis(b, int(wrong.Load()), errs.Load())
			})
		})
	}
}

// reportRedis reports decisions per second, or fails the run if any call
// was denied or failed.
func reportRedis(b *testing.B, wrong int, errs int64) {
	b.Helper()
	if wrong > 0 || errs > 0 {
		b.Fatalf("%d of %d calls off the allow path (%d errors from Redis)", wrong, b.N, errs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// The helpers below start a redis-server for BenchmarkRedis, after the
// redis module's test helper (redis/server_test.go).

// benchRedisAddr returns RATELIMIT_REDIS_ADDR if set, else the address of
// a redis-server it starts on a free loopback port, stopped when b ends.
// It skips b when there is no redis-server binary.
func benchRedisAddr(b *testing.B) string {
	b.Helper()
	if a := os.Getenv("RATELIMIT_REDIS_ADDR"); a != "" {
		return a
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("skipping BenchmarkRedis: no redis-server binary in PATH (install redis-server or set RATELIMIT_REDIS_ADDR)")
	}
	dir := b.TempDir()
	for try := 0; ; try++ { // a free port may be taken before the server binds it
		srv, err := startRedis(bin, dir)
		if err == nil {
			b.Cleanup(srv.stop)
			return srv.addr
		}
		if try == 4 {
			b.Fatalf("start redis-server: %v", err)
		}
	}
}

// redisServer is a redis-server process on loopback.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free loopback port, without
// persistence, and waits until it answers PING.
func startRedis(bin, dir string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port)}
	var out bytes.Buffer
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if redisPing(s.addr) == nil {
			return s, nil
		}
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING: %s", s.addr, out.String())
}

// redisPing sends PING on a fresh connection and expects +PONG.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}
