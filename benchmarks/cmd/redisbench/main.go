// Command redisbench measures the redis backend's limiters against
// go-redis/redis_rate on one redis-server, interleaved so that a burst of
// load on this shared machine falls on every implementation alike, and
// prints the table with the targets checked.
//
//   - serial: ROUNDS rounds; in each, CALLS iterations call every
//     implementation once, in a random order per iteration, on the same
//     key index; the latency of each call is summed per implementation.
//   - parallel, at 8 and at 64 goroutines (one connection each): in each
//     round, BLOCK per implementation cut into SLICES blocks, alternated
//     between the implementations in a new random order each time;
//     decisions per second over each implementation's blocks.
//   - per decision at 64 goroutines, over the same blocks: the server's
//     CPU time (INFO cpu, used_cpu_sys plus used_cpu_user, before and
//     after each block) and the Go heap allocations and bytes of this
//     process (runtime.MemStats Mallocs and TotalAlloc), with their
//     ratios to redis_rate's and the targets checked.
//   - two limiters per request, at 64 goroutines, over alternating blocks
//     as above: each request calls a token bucket per IP and a fixed
//     window per user, both on the one client; ours with the two limiters
//     sharing the client's coalescing queue (the default), ours with a
//     queue per limiter (coalescing limits that differ by one byte), and
//     redis_rate making the same two calls, on a client of their own:
//     requests per second, the server's CPU time per request and the
//     round trips per request (commands and pipelines the client sent,
//     counted by a go-redis hook).
//   - server side: per implementation, CONFIG RESETSTAT, CALLS serial
//     calls, then INFO commandstats: the script's usec_per_call and the
//     commands Redis ran per decision; and the Go heap allocations per
//     decision over the same calls.
//
// Ratios are taken round by round against redis_rate in the same round and
// shown as the median with the spread (min-max) across rounds. The control
// row is a second, independent instance of our token bucket (its own
// prefix): how far it is from the first shows the harness's noise.
//
// With -only NAME, it runs that implementation alone at 64 goroutines for
// -block (over the 1,024 keys, or with -hot all on one key) and prints its
// throughput, the figures per decision and the commands Redis ran (INFO
// commandstats): with -cpuprofile or -memprofile, a profile of the client
// on that load.
//
// Redis is RATELIMIT_REDIS_ADDR if set, else a redis-server started on a
// free loopback port and stopped at the end.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratelimitkit/ratelimit"
	rlredis "github.com/ratelimitkit/ratelimit/redis"
	goredis "github.com/redis/go-redis/v9"
)

var (
	rounds = flag.Int("rounds", 5, "interleaved rounds")
	calls  = flag.Int("calls", 2000, "serial iterations per round (each calls every implementation once)")
	block  = flag.Duration("block", 250*time.Millisecond, "parallel time per implementation per round, at each parallelism")
	cuts   = flag.Int("slices", 10, "blocks the parallel time is cut into, alternated between implementations")
	cpuout = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memout = flag.String("memprofile", "", "with -only: write an allocation profile of the run to this file")
	only   = flag.String("only", "", "run only this implementation, at 64 goroutines over 1,024 keys, for -block (for a CPU profile with -cpuprofile)")
	hotkey = flag.Bool("hot", false, "with -only: every goroutine on one key")
)

type impl struct {
	name  string
	allow func(ctx context.Context, key string) bool
	// script is the command INFO commandstats counts the decision under.
	script string
}

func main() {
	flag.Parse()
	if *cpuout != "" {
		f, err := os.Create(*cpuout)
		if err != nil {
			fatal("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	addr, stop := redisAddr()
	stopRedis = stop
	defer stop()
	client := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 80})
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		fatal("PING %s: %v", addr, err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	var errs, wrong atomic.Int64
	opts := func(name string) []rlredis.Option {
		return []rlredis.Option{rlredis.WithPrefix("rlbench:" + run + ":" + name + ":"),
			rlredis.WithFailurePolicy(rlredis.FailClosed), rlredis.WithTimeout(time.Second),
			rlredis.WithOnError(func(string, error) { errs.Add(1) })}
	}
	must := func(l ratelimit.Limiter, err error) ratelimit.Limiter {
		if err != nil {
			fatal("%v", err)
		}
		return l
	}
	rate := ratelimit.PerSecond(1_000_000)
	limiters := []struct {
		name string
		lim  ratelimit.Limiter
	}{
		{"tokenbucket", must(rlredis.NewTokenBucket(client, rate, 1000, opts("tb")...))},
		{"tokenbucket-control", must(rlredis.NewTokenBucket(client, rate, 1000, opts("tb2")...))},
		{"leakybucket", must(rlredis.NewLeakyBucket(client, rate, 1000, opts("lb")...))},
		{"fixedwindow", must(rlredis.NewFixedWindow(client, rate, opts("fw")...))},
		{"slidingcounter", must(rlredis.NewSlidingWindowCounter(client, rate, opts("swc")...))},
		// A small log: 100 per second per key, never reached (the run
		// sends a key some 10 to 30 a second), so logs of a few entries.
		{"slidinglog", must(rlredis.NewSlidingLog(client, ratelimit.PerSecond(100), opts("sl")...))},
	}
	peer := redis_rate.NewLimiter(client)
	limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1000, Period: time.Second}
	// The two-limiter requests use a client of their own, which counts
	// its round trips (a command or a pipeline each).
	pairClient := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 80})
	defer pairClient.Close()
	var trips atomic.Int64
	pairClient.AddHook(tripCounter{&trips})
	pairs := pairImpls(pairClient, run, rate, opts, must, &errs)
	impls := []impl{{name: "redis_rate", script: "evalsha", allow: func(ctx context.Context, key string) bool {
		res, err := peer.Allow(ctx, "rlbench:"+run+":rr:"+key, limit)
		if err != nil {
			errs.Add(1)
			return false
		}
		return res.Allowed == 1
	}}}
	for _, l := range limiters {
		lim := l.lim
		impls = append(impls, impl{name: l.name, script: "fcall", allow: func(ctx context.Context, key string) bool {
			d, err := lim.AllowN(ctx, key, 1)
			return err == nil && d.Allowed
		}})
	}
	// Warm up: load scripts and functions, open connections.
	for _, im := range impls {
		for i := range 200 {
			im.allow(ctx, keys[i&1023])
		}
	}
	if *only != "" {
		i := slices.IndexFunc(impls, func(im impl) bool { return im.name == *only })
		if i < 0 {
			fatal("-only %q: no such implementation", *only)
		}
		if *memout != "" {
			runtime.MemProfileRate = 512
		}
		runOnly(ctx, client, impls[i], keys, &wrong)
		if *memout != "" {
			f, err := os.Create(*memout)
			if err != nil {
				fatal("%v", err)
			}
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fatal("%v", err)
			}
			f.Close()
		}
		return
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	names := make([]string, len(impls))
	for i, im := range impls {
		names[i] = im.name
	}
	serial := map[string][]float64{} // ns per decision, per round
	par := map[int]map[string][]float64{8: {}, 64: {}}
	usec := map[string][]float64{}   // server usec per call of the script
	cmds := map[string][]float64{}   // commands per decision
	allocs := map[string][]float64{} // Go heap allocations per decision
	hot := map[string][]float64{}    // decisions/s on one key, 64 goroutines
	// Two limiters per request, 64 goroutines: requests/s and the
	// server's CPU µs per request.
	pairRate, pairCPU, pairTrips := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	// At 64 goroutines, per decision: the server's CPU time (µs) and the
	// Go heap allocations and bytes of the whole process.
	cpu64, alloc64, bytes64 := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	order := make([]int, len(impls))
	for i := range order {
		order[i] = i
	}
	for r := range *rounds {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", r+1, *rounds)
		// Serial, call by call in a random order.
		tot := make([]time.Duration, len(impls))
		for i := range *calls {
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			k := keys[i&1023]
			for _, j := range order {
				t0 := time.Now()
				if !impls[j].allow(ctx, k) {
					wrong.Add(1)
				}
				tot[j] += time.Since(t0)
			}
		}
		for j, im := range impls {
			serial[im.name] = append(serial[im.name], float64(tot[j])/float64(*calls))
		}
		// Parallel: alternating blocks, in a new random order each time;
		// each implementation's figure sums its blocks of the round, so
		// that a burst of load on the machine (longer than a block) falls
		// on all of them alike.
		for _, g := range []int{8, 64} {
			sum := make([]int64, len(impls))
			took := make([]time.Duration, len(impls))
			cpus := make([]float64, len(impls))
			mallocs, allocBytes := make([]uint64, len(impls)), make([]uint64, len(impls))
			for range *cuts {
				rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
				for _, j := range order {
					var n atomic.Int64
					var wg sync.WaitGroup
					var m0, m1 runtime.MemStats
					var c0 float64
					if g == 64 {
						c0 = serverCPU(ctx, client)
						runtime.ReadMemStats(&m0)
					}
					deadline := time.Now().Add(*block / time.Duration(*cuts))
					t0 := time.Now()
					for w := range g {
						wg.Add(1)
						go func() {
							defer wg.Done()
							c, i := int64(0), w*7919
							for time.Now().Before(deadline) {
								if !impls[j].allow(ctx, keys[i&1023]) {
									wrong.Add(1)
								}
								i++
								c++
							}
							n.Add(c)
						}()
					}
					wg.Wait()
					sum[j] += n.Load()
					took[j] += time.Since(t0)
					if g == 64 {
						runtime.ReadMemStats(&m1)
						cpus[j] += serverCPU(ctx, client) - c0
						mallocs[j] += m1.Mallocs - m0.Mallocs
						allocBytes[j] += m1.TotalAlloc - m0.TotalAlloc
					}
				}
			}
			for j, im := range impls {
				par[g][im.name] = append(par[g][im.name], float64(sum[j])/took[j].Seconds())
				if g == 64 {
					d := float64(sum[j])
					cpu64[im.name] = append(cpu64[im.name], cpus[j]*1e6/d)
					alloc64[im.name] = append(alloc64[im.name], float64(mallocs[j])/d)
					bytes64[im.name] = append(bytes64[im.name], float64(allocBytes[j])/d)
				}
			}
		}
		// One hot key: every goroutine on the same key, token bucket and
		// redis_rate in a random order: what one node sustains for it.
		for _, j := range rng.Perm(2) {
			im := impls[[]int{0, 1}[j]]
			var n atomic.Int64
			var wg sync.WaitGroup
			deadline := time.Now().Add(*block)
			t0 := time.Now()
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := int64(0)
					for time.Now().Before(deadline) {
						if !im.allow(ctx, "hot") {
							wrong.Add(1)
						}
						c++
					}
					n.Add(c)
				}()
			}
			wg.Wait()
			hot[im.name] = append(hot[im.name], float64(n.Load())/time.Since(t0).Seconds())
		}
		// Two limiters per request: alternating blocks at 64 goroutines.
		{
			sum := make([]int64, len(pairs))
			took := make([]time.Duration, len(pairs))
			cpus := make([]float64, len(pairs))
			rts := make([]int64, len(pairs))
			for range *cuts {
				for _, j := range rng.Perm(len(pairs)) {
					var n atomic.Int64
					var wg sync.WaitGroup
					c0, rt0 := serverCPU(ctx, client), trips.Load()
					deadline := time.Now().Add(*block / time.Duration(*cuts))
					t0 := time.Now()
					for w := range 64 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							c, i := int64(0), w*7919
							for time.Now().Before(deadline) {
								if !pairs[j].request(ctx, keys[i&1023], keys[(i*31)&255]) {
									wrong.Add(1)
								}
								i++
								c++
							}
							n.Add(c)
						}()
					}
					wg.Wait()
					sum[j] += n.Load()
					took[j] += time.Since(t0)
					cpus[j] += serverCPU(ctx, client) - c0
					rts[j] += trips.Load() - rt0
				}
			}
			for j, p := range pairs {
				pairRate[p.name] = append(pairRate[p.name], float64(sum[j])/took[j].Seconds())
				pairCPU[p.name] = append(pairCPU[p.name], cpus[j]*1e6/float64(sum[j]))
				pairTrips[p.name] = append(pairTrips[p.name], float64(rts[j])/float64(sum[j]))
			}
		}
		// Server side and allocations, one implementation at a time.
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, j := range order {
			im := impls[j]
			if err := client.ConfigResetStat(ctx).Err(); err != nil {
				fatal("CONFIG RESETSTAT: %v", err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for i := range *calls {
				im.allow(ctx, keys[i&1023])
			}
			runtime.ReadMemStats(&m1)
			allocs[im.name] = append(allocs[im.name], float64(m1.Mallocs-m0.Mallocs)/float64(*calls))
			stats := commandStats(ctx, client)
			s := stats[im.script]
			usec[im.name] = append(usec[im.name], s.usecPerCall)
			var total int64
			for name, st := range stats {
				if !strings.HasPrefix(name, "config") && !strings.HasPrefix(name, "info") {
					total += st.calls
				}
			}
			cmds[im.name] = append(cmds[im.name], float64(total)/float64(*calls))
		}
	}
	if wrong.Load() > 0 || errs.Load() > 0 {
		fatal("%d calls off the allow path, %d errors: the figures would not be Redis decisions", wrong.Load(), errs.Load())
	}
	report(names, serial, par, usec, cmds, allocs)
	report64(names, par[64], cpu64, alloc64, bytes64)
	hm, hlo, hhi := spread(hot["tokenbucket"])
	pm, _, _ := spread(hot["redis_rate"])
	rm, rlo, rhi := spread(ratios(hot["tokenbucket"], hot["redis_rate"]))
	fmt.Printf("\nOne hot key, 64 goroutines: token bucket %.0f decisions/s (%.0f–%.0f), redis_rate %.0f; ratio %.2f× (%.2f–%.2f)\n",
		hm, hlo, hhi, pm, rm, rlo, rhi)
	reportPairs(pairs, pairRate, pairCPU, pairTrips)
}

// pairImpl is a request that calls two limiters on one client: a token
// bucket per IP and a fixed window per user.
type pairImpl struct {
	name    string
	request func(ctx context.Context, ip, user string) bool
}

// pairImpls returns the two-limiter requests: ours with the limiters
// sharing the client's coalescing queue (the default), ours with a queue
// per limiter (their coalescing limits differ by one byte, which is what
// keeps queues apart), and redis_rate making the same two calls.
func pairImpls(client *goredis.Client, run string, rate ratelimit.Rate, opts func(string) []rlredis.Option,
	must func(ratelimit.Limiter, error) ratelimit.Limiter, errs *atomic.Int64) []pairImpl {
	peer := redis_rate.NewLimiter(client)
	ours := func(name string, own bool) pairImpl {
		var tbOpts, fwOpts []rlredis.Option
		if own {
			tbOpts = []rlredis.Option{rlredis.WithCoalescingLimits(128, 64<<10, 2)}
			fwOpts = []rlredis.Option{rlredis.WithCoalescingLimits(128, 64<<10+1, 2)}
		}
		tb := must(rlredis.NewTokenBucket(client, rate, 1000, append(opts(name+"-ip"), tbOpts...)...))
		fw := must(rlredis.NewFixedWindow(client, rate, append(opts(name+"-user"), fwOpts...)...))
		return pairImpl{name: name, request: func(ctx context.Context, ip, user string) bool {
			d, err := tb.AllowN(ctx, ip, 1)
			if err != nil || !d.Allowed {
				return false
			}
			d, err = fw.AllowN(ctx, user, 1)
			return err == nil && d.Allowed
		}}
	}
	ipLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1000, Period: time.Second}
	userLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	return []pairImpl{
		{name: "redis_rate", request: func(ctx context.Context, ip, user string) bool {
			res, err := peer.Allow(ctx, "rlbench:"+run+":rr-ip:"+ip, ipLimit)
			if err != nil {
				errs.Add(1)
				return false
			}
			if res.Allowed != 1 {
				return false
			}
			res, err = peer.Allow(ctx, "rlbench:"+run+":rr-user:"+user, userLimit)
			if err != nil {
				errs.Add(1)
				return false
			}
			return res.Allowed == 1
		}},
		ours("ours-shared-queue", false),
		ours("ours-queue-per-limiter", true),
	}
}

// reportPairs prints the two-limiter requests' figures.
func reportPairs(pairs []pairImpl, rate, cpu, trips map[string][]float64) {
	const base = "redis_rate"
	fmt.Printf("\nTwo limiters per request (a token bucket per IP, a fixed window per user, one client; each request calls both), 64 goroutines: median (min-max) over rounds.\n\n")
	fmt.Printf("| implementation | requests/s | ratio to redis_rate | Redis CPU µs/request | ratio | round trips/request |\n")
	fmt.Printf("|---|---|---|---|---|---|\n")
	for _, p := range pairs {
		m, lo, hi := spread(rate[p.name])
		rm, rlo, rhi := spread(ratios(rate[p.name], rate[base]))
		cm, _, _ := spread(cpu[p.name])
		cr, clo, chi := spread(ratios(cpu[p.name], cpu[base]))
		tm, tlo, thi := spread(trips[p.name])
		fmt.Printf("| %s | %.0f (%.0f–%.0f) | %.2f× (%.2f–%.2f) | %.2f | %.2f× (%.2f–%.2f) | %.3f (%.3f–%.3f) |\n",
			p.name, m, lo, hi, rm, rlo, rhi, cm, cr, clo, chi, tm, tlo, thi)
	}
	rm, lo, hi := spread(ratios(rate["ours-shared-queue"], rate["ours-queue-per-limiter"]))
	fmt.Printf("\n  %-54s %.2f× (%.2f–%.2f)\n", "shared queue ÷ queue per limiter, requests/s", rm, lo, hi)
	rm, lo, hi = spread(ratios(cpu["ours-shared-queue"], cpu["ours-queue-per-limiter"]))
	fmt.Printf("  %-54s %.2f× (%.2f–%.2f)\n", "shared queue ÷ queue per limiter, Redis CPU/request", rm, lo, hi)
	rm, lo, hi = spread(ratios(trips["ours-shared-queue"], trips["ours-queue-per-limiter"]))
	fmt.Printf("  %-54s %.2f× (%.2f–%.2f)\n", "shared queue ÷ queue per limiter, round trips/request", rm, lo, hi)
}

// tripCounter is a go-redis hook that counts round trips: each command
// and each pipeline sent.
type tripCounter struct{ n *atomic.Int64 }

func (h tripCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h tripCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

type cmdStat struct {
	calls       int64
	usecPerCall float64
}

// commandStats parses INFO commandstats.
func commandStats(ctx context.Context, c *goredis.Client) map[string]cmdStat {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		fatal("INFO commandstats: %v", err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				s.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out
}

// ratios returns, round by round, a[i]/b[i]: ours over the peer's of the
// measure itself (for latency, below 1 is faster; for throughput, above).
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

func spread(xs []float64) (med, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func report(names []string, serial map[string][]float64, par map[int]map[string][]float64,
	usec, cmds, allocs map[string][]float64) {
	const base = "redis_rate"
	fmt.Printf("\nInterleaved, %d rounds; ratios against redis_rate in the same round: median (min-max).\n", *rounds)
	fmt.Printf("Figures: median across rounds. A shared, noisy machine: read the control row's spread as the noise.\n\n")
	fmt.Printf("| implementation | serial ns/decision | ratio | 8 goroutines dec/s | ratio | 64 goroutines dec/s | ratio | script µs in Redis | ratio | commands/decision | allocs/decision |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	cell := func(xs []float64, bs []float64, f string) (string, string) {
		m, _, _ := spread(xs)
		rm, rlo, rhi := spread(ratios(xs, bs))
		return fmt.Sprintf(f, m), fmt.Sprintf("%.2f× (%.2f–%.2f)", rm, rlo, rhi)
	}
	for _, n := range names {
		s, sr := cell(serial[n], serial[base], "%.0f")
		p8, p8r := cell(par[8][n], par[8][base], "%.0f")
		p64, p64r := cell(par[64][n], par[64][base], "%.0f")
		u, ur := cell(usec[n], usec[base], "%.2f")
		c, _, _ := spread(cmds[n])
		a, _, _ := spread(allocs[n])
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.1f |\n", n, s, sr, p8, p8r, p64, p64r, u, ur, c, a)
	}
	fmt.Printf("\nNoise: the control (a second token bucket) against the first, same rounds:\n")
	for _, m := range []struct {
		what   string
		xs, bs []float64
	}{
		{"serial latency", serial["tokenbucket-control"], serial["tokenbucket"]},
		{"throughput at 8 goroutines", par[8]["tokenbucket-control"], par[8]["tokenbucket"]},
		{"throughput at 64 goroutines", par[64]["tokenbucket-control"], par[64]["tokenbucket"]},
		{"script time in Redis", usec["tokenbucket-control"], usec["tokenbucket"]},
	} {
		rm, lo, hi := spread(ratios(m.xs, m.bs))
		fmt.Printf("  %-52s %.2f× (%.2f–%.2f)\n", m.what, rm, lo, hi)
	}
	fmt.Printf("\nTargets (median ratio; the spread says how sure):\n")
	check := func(what string, xs, bs []float64, bound float64, atMost bool) {
		m, lo, hi := spread(ratios(xs, bs))
		ok := m <= bound
		op := "≤"
		if !atMost {
			ok, op = m >= bound, "≥"
		}
		verdict := "met"
		if !ok {
			verdict = "MISSED"
		}
		fmt.Printf("  %-52s %s %.2f: %.2f× (%.2f–%.2f) %s\n", what, op, bound, m, lo, hi, verdict)
	}
	check("serial latency, token bucket", serial["tokenbucket"], serial[base], 1.0, true)
	check("serial latency, leaky bucket", serial["leakybucket"], serial[base], 1.05, true)
	check("serial latency, fixed window", serial["fixedwindow"], serial[base], 1.05, true)
	check("serial latency, sliding window counter", serial["slidingcounter"], serial[base], 1.05, true)
	check("serial latency, sliding log", serial["slidinglog"], serial[base], 1.05, true)
	check("throughput at 8 goroutines, token bucket", par[8]["tokenbucket"], par[8][base], 1.0, false)
	check("throughput at 64 goroutines, token bucket", par[64]["tokenbucket"], par[64][base], 1.0, false)
	check("script time in Redis, token bucket", usec["tokenbucket"], usec[base], 1.1, true)
	for _, n := range []string{"tokenbucket", "leakybucket", "fixedwindow", "slidingcounter"} {
		c, _, _ := spread(cmds[n])
		verdict := "met"
		if c > 4.0001 {
			verdict = "MISSED"
		}
		fmt.Printf("  %-52s ≤ 4: %.2f %s\n", "commands per decision, "+n, c, verdict)
	}
	for _, n := range names[1:] {
		a, _, _ := spread(allocs[n])
		b, _, _ := spread(allocs[base])
		verdict := "met"
		if a > b+0.05 {
			verdict = "MISSED"
		}
		fmt.Printf("  %-52s ≤ %.1f: %.1f %s\n", "Go allocations per decision, "+n, b, a, verdict)
	}
}

// stopRedis stops the redis-server this run started, if any.
var stopRedis = func() {}

func fatal(f string, args ...any) {
	fmt.Fprintf(os.Stderr, "redisbench: "+f+"\n", args...)
	stopRedis()
	os.Exit(1)
}

// redisAddr returns RATELIMIT_REDIS_ADDR, or starts a redis-server on a
// free loopback port and returns its address and how to stop it.
func redisAddr() (string, func()) {
	if a := os.Getenv("RATELIMIT_REDIS_ADDR"); a != "" {
		return a, func() {}
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fatal("no redis-server in PATH (install it or set RATELIMIT_REDIS_ADDR)")
	}
	dir, err := os.MkdirTemp("", "redisbench-")
	if err != nil {
		fatal("%v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal("%v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// Descriptors this process inherited (such as the lock of a caller's
	// flock) would pass on to redis-server and outlive this run: mark
	// them close-on-exec (Go opens its own so already).
	for fd := 3; fd < 1024; fd++ {
		syscall.CloseOnExec(fd)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		fatal("%v", err)
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ping(addr) == nil {
			return addr, stop
		}
	}
	stop()
	fatal("redis-server on %s did not answer PING: %s", addr, out.String())
	return "", nil
}

func ping(addr string) error {
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

// serverCPU returns the CPU time redis-server has used, in seconds
// (INFO cpu: used_cpu_sys plus used_cpu_user).
func serverCPU(ctx context.Context, c *goredis.Client) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		fatal("INFO cpu: %v", err)
	}
	var t float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				fatal("INFO cpu: %s: %v", line, err)
			}
			t += x
		}
	}
	return t
}

// report64 prints, at 64 goroutines over 1,024 keys, the server's CPU time
// and the Go allocations per decision, with their ratios to redis_rate's
// round by round, and checks them against the targets.
func report64(names []string, tput, cpu, allocs, bytes map[string][]float64) {
	const base = "redis_rate"
	fmt.Printf("\nAt 64 goroutines over 1,024 keys, per decision (same blocks as the throughput): median (min-max) ratio to redis_rate.\n\n")
	fmt.Printf("| implementation | dec/s | Redis CPU µs/decision | ratio | Go allocs/decision | ratio | Go bytes/decision | ratio |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|\n")
	cell := func(xs, bs []float64, f string) string {
		m, _, _ := spread(xs)
		rm, lo, hi := spread(ratios(xs, bs))
		return fmt.Sprintf(f+" | %.2f× (%.2f–%.2f)", m, rm, lo, hi)
	}
	for _, n := range names {
		t, _, _ := spread(tput[n])
		fmt.Printf("| %s | %.0f | %s | %s | %s |\n", n, t, cell(cpu[n], cpu[base], "%.2f"),
			cell(allocs[n], allocs[base], "%.1f"), cell(bytes[n], bytes[base], "%.0f"))
	}
	fmt.Printf("\nTargets at 64 goroutines (median ratio; the spread says how sure):\n")
	for _, n := range names[1:] {
		bound := 1.5
		if strings.HasPrefix(n, "tokenbucket") {
			bound = 2.5
		}
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		m, lo, hi := spread(ratios(tput[n], tput[base]))
		fmt.Printf("  %-52s ≥ %.2f: %.2f× (%.2f–%.2f) %s\n", "throughput, "+n, bound, m, lo, hi, verdict(m >= bound))
		m, lo, hi = spread(ratios(cpu[n], cpu[base]))
		fmt.Printf("  %-52s ≤ 0.60: %.2f× (%.2f–%.2f) %s\n", "Redis CPU per decision, "+n, m, lo, hi, verdict(m <= 0.6))
		m, lo, hi = spread(ratios(allocs[n], allocs[base]))
		fmt.Printf("  %-52s ≤ 1.00: %.2f× (%.2f–%.2f) %s\n", "Go allocations per decision, "+n, m, lo, hi, verdict(m <= 1))
	}
}

// runOnly runs im alone at 64 goroutines over keys for -block, and prints
// its throughput and its figures per decision.
func runOnly(ctx context.Context, client *goredis.Client, im impl, keys []string, wrong *atomic.Int64) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var m0, m1 runtime.MemStats
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		fatal("CONFIG RESETSTAT: %v", err)
	}
	c0 := serverCPU(ctx, client)
	runtime.ReadMemStats(&m0)
	deadline := time.Now().Add(*block)
	t0 := time.Now()
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, i, step := int64(0), w*7919, 1
			if *hotkey {
				i, step = 0, 0
			}
			for time.Now().Before(deadline) {
				if !im.allow(ctx, keys[i&1023]) {
					wrong.Add(1)
				}
				i += step
				c++
			}
			n.Add(c)
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	runtime.ReadMemStats(&m1)
	d := float64(n.Load())
	on := "over 1,024 keys"
	if *hotkey {
		on = "on one key"
	}
	fmt.Printf("%s at 64 goroutines %s: %.0f decisions/s; per decision: Redis CPU %.2f µs, Go %.1f allocations, %.0f bytes; %d off the allow path\n",
		im.name, on, d/took.Seconds(), (serverCPU(ctx, client)-c0)*1e6/d,
		float64(m1.Mallocs-m0.Mallocs)/d, float64(m1.TotalAlloc-m0.TotalAlloc)/d, wrong.Load())
	for name, st := range commandStats(ctx, client) {
		if st.calls > 0 && !strings.HasPrefix(name, "config") && !strings.HasPrefix(name, "info") {
			fmt.Printf("  %s: %.2f decisions per call, %.2f µs per call in Redis (%.2f per decision)\n",
				name, d/float64(st.calls), st.usecPerCall, st.usecPerCall*float64(st.calls)/d)
		}
	}
}
