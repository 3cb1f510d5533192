// Command leasebench measures one hot key shared by several processes on
// one redis-server: the redis backend's TokenBucket with WithLease against
// go-redis/redis_rate (and, as a reference, the TokenBucket without
// leases), each process running the same number of goroutines that call
// Allow on the one key for a fixed time. The implementations alternate
// round by round in a random order; each round gives one sample of the
// decisions per second of all processes together, and the ratio to
// redis_rate's sample of the same round. The report gives the median and
// the spread (min–max) of the ratios.
//
// A last round of the leased token bucket records the instant of every
// event admitted in every process (the wall clock, read after Allow
// returned), and checks the bound over every interval: at most
// C + r·D events in any interval of length D, across the processes. It
// reports the largest excess found (none: zero or less).
//
// Redis is RATELIMIT_REDIS_ADDR if set, else a redis-server started on a
// free loopback port for the run.
//
//	go run ./cmd/leasebench -procs 4 -goroutines 16 -rounds 5 -dur 1s
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
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
	procs      = flag.Int("procs", 4, "processes")
	goroutines = flag.Int("goroutines", 16, "goroutines per process")
	rounds     = flag.Int("rounds", 5, "samples of each implementation")
	dur        = flag.Duration("dur", time.Second, "length of one sample")
	rate       = flag.Int64("rate", 2_000_000, "the key's rate, events per second")
	burst      = flag.Int("burst", 200_000, "the key's capacity (burst)")
	share      = flag.Float64("share", 0.1, "WithLease's share")
	target     = flag.Float64("target", 20, "the ratio to redis_rate the leased token bucket should reach")

	child  = flag.String("child", "", "internal: run one process of this implementation")
	addrF  = flag.String("addr", "", "internal: the redis address")
	keyF   = flag.String("key", "", "internal: the key")
	atF    = flag.Int64("at", 0, "internal: start at this Unix ns")
	record = flag.String("record", "", "internal: write admitted instants here")
)

func main() {
	flag.Parse()
	if *child != "" {
		runChild()
		return
	}
	addr, stop := redisAddr()
	defer stop()
	impls := []string{"lease", "redis_rate", "nolease"}
	ratios := map[string][]float64{}
	rates := map[string][]float64{}
	fmt.Printf("one key, %d processes x %d goroutines, rate %d/s, burst %d, share %v, %v per sample, %d rounds\n",
		*procs, *goroutines, *rate, *burst, *share, *dur, *rounds)
	for r := range *rounds {
		order := slices.Clone(impls)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		got := map[string]float64{}
		for _, impl := range order {
			dps, _ := runRound(addr, impl, fmt.Sprintf("k%d-%s", r, impl), "")
			got[impl] = dps
			rates[impl] = append(rates[impl], dps)
		}
		for _, impl := range impls {
			ratios[impl] = append(ratios[impl], got[impl]/got["redis_rate"])
		}
		fmt.Printf("round %d: lease %.0f/s, redis_rate %.0f/s, no lease %.0f/s: lease/redis_rate %.2f, no lease/redis_rate %.2f\n",
			r+1, got["lease"], got["redis_rate"], got["nolease"], got["lease"]/got["redis_rate"], got["nolease"]/got["redis_rate"])
	}
	fmt.Println()
	for _, impl := range impls {
		med, lo, hi := stats(ratios[impl])
		mr, _, _ := stats(rates[impl])
		fmt.Printf("%-10s decisions/s median %10.0f   ÷ redis_rate: median %6.2f (spread %.2f–%.2f)\n", impl, mr, med, lo, hi)
	}

	// The bound, from the instants of a recorded round.
	dir, err := os.MkdirTemp("", "leasebench-")
	if err != nil {
		fatal("%v", err)
	}
	defer os.RemoveAll(dir)
	_, admitted := runRound(addr, "lease", "bound", dir)
	var ts []int64
	for p := range *procs {
		b, err := os.ReadFile(fmt.Sprintf("%s/%d", dir, p))
		if err != nil {
			fatal("%v", err)
		}
		for i := 0; i+8 <= len(b); i += 8 {
			ts = append(ts, int64(binary.LittleEndian.Uint64(b[i:])))
		}
	}
	slices.Sort(ts)
	excess, at := maxExcess(ts, float64(*rate)/1e9, float64(*burst))
	fmt.Printf("\nbound (recorded round): %d events admitted (%d recorded) across %d processes; the largest excess over C + r·D in any interval: %.2f events%s\n",
		admitted, len(ts), *procs, excess, at)
	med, lo, _ := stats(ratios["lease"])
	switch {
	case excess > 1:
		fmt.Printf("BOUND BROKEN: %.2f events over C + r·D\n", excess)
	case med >= *target:
		fmt.Printf("target met: lease ÷ redis_rate median %.2f >= %.0f (lowest sample %.2f)\n", med, *target, lo)
	default:
		fmt.Printf("target missed: lease ÷ redis_rate median %.2f < %.0f\n", med, *target)
	}
}

// maxExcess returns the largest (count − C − r·D) over the intervals
// [t_i, t_j] of the sorted instants ts (r in events per ns): the most the
// events exceed the token bucket's bound C + r·D, in O(n).
func maxExcess(ts []int64, r, c float64) (float64, string) {
	if len(ts) == 0 {
		return 0, ""
	}
	best, bi, bj := -c, 0, 0
	// count(i..j) = j − i + 1; maximise (j + 1 − r·t_j) + (r·t_i − i).
	t0 := ts[0]
	mi, mIdx := 0.0, 0
	for j, t := range ts {
		if v := r*float64(ts[j]-t0) - float64(j); j == 0 || v > mi {
			mi, mIdx = v, j
		}
		if e := float64(j+1) - r*float64(t-t0) + mi - c; e > best {
			best, bi, bj = e, mIdx, j
		}
	}
	return best, fmt.Sprintf(" (%d events in %v)", bj-bi+1, time.Duration(ts[bj]-ts[bi]))
}

func stats(xs []float64) (med, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0, 0
	}
	return s[len(s)/2], s[0], s[len(s)-1]
}

// runRound runs one sample of impl: every process at once, on key. It
// returns the decisions per second of all together and the events they
// admitted.
func runRound(addr, impl, key, recordDir string) (float64, int64) {
	exe, err := os.Executable()
	if err != nil {
		fatal("%v", err)
	}
	at := time.Now().Add(500 * time.Millisecond).UnixNano()
	var wg sync.WaitGroup
	var decisions, admitted atomic.Int64
	for p := range *procs {
		args := []string{"-child", impl, "-addr", addr, "-key", key, "-at", strconv.FormatInt(at, 10),
			"-dur", dur.String(), "-goroutines", strconv.Itoa(*goroutines), "-rate", strconv.FormatInt(*rate, 10),
			"-burst", strconv.Itoa(*burst), "-share", strconv.FormatFloat(*share, 'g', -1, 64)}
		if recordDir != "" {
			args = append(args, "-record", fmt.Sprintf("%s/%d", recordDir, p))
		}
		cmd := exec.Command(exe, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			fatal("%v", err)
		}
		if err := cmd.Start(); err != nil {
			fatal("%v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := io.ReadAll(out)
			if err := cmd.Wait(); err != nil {
				fatal("child %s: %v", impl, err)
			}
			var d, a int64
			if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &d, &a); err != nil {
				fatal("child %s: %q: %v", impl, b, err)
			}
			decisions.Add(d)
			admitted.Add(a)
		}()
	}
	wg.Wait()
	return float64(decisions.Load()) / dur.Seconds(), admitted.Load()
}

// runChild is one process: goroutines calling Allow on the key from the
// start instant for the sample's length; it prints its decisions and the
// events admitted.
func runChild() {
	client := goredis.NewClient(&goredis.Options{Addr: *addrF, PoolSize: *goroutines + 4})
	defer client.Close()
	ctx := context.Background()
	var allow func() bool
	switch *child {
	case "lease", "nolease":
		opts := []rlredis.Option{rlredis.WithPrefix("leasebench:")}
		if *child == "lease" {
			opts = append(opts, rlredis.WithLease(*share))
		}
		tb, err := rlredis.NewTokenBucket(client, ratelimit.PerSecond(*rate), *burst, opts...)
		if err != nil {
			fatal("%v", err)
		}
		allow = func() bool { return tb.Allow(*keyF) }
	case "redis_rate":
		peer := redis_rate.NewLimiter(client)
		limit := redis_rate.Limit{Rate: int(*rate), Burst: *burst, Period: time.Second}
		allow = func() bool {
			res, err := peer.Allow(ctx, "leasebench:"+*keyF, limit)
			return err == nil && res.Allowed > 0
		}
	default:
		fatal("unknown implementation %q", *child)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		fatal("%v", err)
	}
	time.Sleep(time.Until(time.Unix(0, *atF)))
	var stop atomic.Bool
	var decisions, admitted atomic.Int64
	recs := make([][]int64, *goroutines)
	var wg sync.WaitGroup
	for g := range *goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d, a int64
			rec := *record != ""
			for !stop.Load() {
				d++
				if allow() {
					a++
					if rec {
						recs[g] = append(recs[g], time.Now().UnixNano())
					}
				}
			}
			decisions.Add(d)
			admitted.Add(a)
		}()
	}
	time.Sleep(*dur)
	stop.Store(true)
	wg.Wait()
	if *record != "" {
		f, err := os.Create(*record)
		if err != nil {
			fatal("%v", err)
		}
		w := bufio.NewWriter(f)
		var b [8]byte
		for _, r := range recs {
			for _, t := range r {
				binary.LittleEndian.PutUint64(b[:], uint64(t))
				w.Write(b[:])
			}
		}
		if err := w.Flush(); err != nil {
			fatal("%v", err)
		}
		f.Close()
	}
	fmt.Println(decisions.Load(), admitted.Load())
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal("%v", err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// The lock of a caller's flock must not pass on to redis-server.
	for fd := 3; fd < 1024; fd++ {
		syscall.CloseOnExec(fd)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		fatal("%v", err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	addr := "127.0.0.1:" + port
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return addr, stop
		}
	}
	stop()
	fatal("redis-server on %s did not answer PING: %s", addr, out.String())
	return "", nil
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "leasebench: "+format+"\n", args...)
	os.Exit(1)
}
