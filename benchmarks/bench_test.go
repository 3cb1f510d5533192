package benchmarks

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ratelimitkit/ratelimit"
)

// Key sets. Keys are built once per process, 10 bytes each ("k:" and eight
// hex digits), as substrings of one buffer, so that neither building nor
// allocating them is measured; walked in order, they are in cache like a
// request's key. The 10k set is a prefix of the 1M set.
//
// Limiters are populated with copies (strings.Clone), as a service's would
// be with keys cut from requests, and in shuffled order: a map that keeps
// the caller's string must not find its stored keys in this sequential
// buffer, in cache, when it compares them, while a store that copies keys
// finds them scattered.
const maxKeys = 1_000_000

var (
	keysOnce sync.Once
	allKeys  []string
)

func keySet(n int) []string {
	keysOnce.Do(func() {
		const hex = "0123456789abcdef"
		buf := make([]byte, 0, maxKeys*10)
		for i := range maxKeys {
			buf = append(buf, 'k', ':')
			for shift := 28; shift >= 0; shift -= 4 {
				buf = append(buf, hex[i>>shift&0xf])
			}
		}
		all := string(buf)
		allKeys = make([]string, maxKeys)
		for i := range allKeys {
			allKeys[i] = all[i*10 : i*10+10]
		}
	})
	return allKeys[:n]
}

// shuffled returns keys in a fixed pseudo-random order. Limiters are
// populated in this order and then walked in key order, so that what they
// allocate per key (a key copy, a limiter object) is not laid out in the
// order of the walk: in a service, keys are first seen in one order and
// come back in another. Walking per-key objects in their allocation order
// would turn their cache misses into prefetched sequential reads.
func shuffled(keys []string) []string {
	out := slices.Clone(keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

var keyCounts = []struct {
	name string
	n    int
}{{"10k", 10_000}, {"1M", maxKeys}}

// Sinks keep the floors' results alive.
var (
	sinkTime     time.Time
	sinkDuration time.Duration
	sinkInt      int
	sinkBool     bool
	// nopAllow is called through a variable, so that the compiler cannot
	// inline it: the harness's indirect call, measured alone.
	nopAllow = func(string) bool { return true }
)

// BenchmarkFloor measures what a decision cannot avoid: reading the clock
// (time.Now reads the wall and the monotonic clocks, time.Since only the
// monotonic one), an uncontended CAS, a mutex, a map lookup by a 10-byte
// key (at 1M keys mostly cache misses), and the indirect call through which
// this module calls every limiter.
func BenchmarkFloor(b *testing.B) {
	b.Run("op=time.Now", func(b *testing.B) {
		var t time.Time
		for b.Loop() {
			t = time.Now()
		}
		sinkTime = t
	})
	b.Run("op=time.Since", func(b *testing.B) {
		start := time.Now()
		var d time.Duration
		for b.Loop() {
			d = time.Since(start)
		}
		sinkDuration = d
	})
	b.Run("op=CAS", func(b *testing.B) {
		var v atomic.Int64
		var x int64
		for b.Loop() {
			if v.CompareAndSwap(x, x+1) {
				x++
			}
		}
		sinkInt = int(v.Load())
	})
	b.Run("op=mutex", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			//lint:ignore SA2001 an empty critical section is the point
			mu.Unlock()
		}
	})
	for _, kc := range keyCounts {
		b.Run("op=map-"+kc.name, func(b *testing.B) {
			keys := keySet(kc.n)
			m := make(map[string]int, len(keys))
			for i, k := range shuffled(keys) {
				m[strings.Clone(k)] = i
			}
			b.ReportAllocs()
			i, sum := 0, 0
			for b.Loop() {
				sum += m[keys[i]]
				if i++; i == len(keys) {
					i = 0
				}
			}
			sinkInt = sum
		})
	}
	b.Run("op=func-call", func(b *testing.B) {
		f, ok := nopAllow, false
		for b.Loop() {
			ok = f("k")
		}
		sinkBool = ok
	})
	for _, alternate := range []bool{false, true} {
		name := "op=lines-apart-parallel"
		if alternate {
			name = "op=lines-alternate-parallel"
		}
		b.Run(name, func(b *testing.B) { linesFloor(b, alternate) })
	}
}

// lineOwners deals lines 0 to n-1 out to procs goroutines, in shuffled
// order: a block of n/procs lines each, or, if alternate, line i to
// goroutine i mod procs.
func lineOwners(n, procs int, alternate bool) [][]int32 {
	own := make([][]int32, procs)
	for i := range n {
		g := i * procs / n
		if alternate {
			g = i % procs
		}
		own[g] = append(own[g], int32(i))
	}
	for _, o := range own {
		rand.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
	}
	return own
}

// floorLine is one 64-byte cache line of linesFloor's array.
type floorLine struct {
	w uint64
	_ [56]byte
}

// linesFloor is the lines rows of BenchmarkFloor: GOMAXPROCS goroutines
// each write only lines of their own in a 1 MiB array, in random order, a
// load, a compare-and-swap and a store each, as a slot is taken and let
// go. Apart, each goroutine's lines are one block of the array; alternate,
// neighbouring lines belong to different goroutines. No line is written
// by two goroutines either way: what alternate costs beyond apart is what
// the machine charges two cores for writing lines next to each other's
// (its caches fetch a line's neighbours with it), as the slots of keys
// called from different cores are neighbours in a shared hash table.
func linesFloor(b *testing.B, alternate bool) {
	const n = 1 << 14
	lines := make([]floorLine, n) // a large allocation: page-aligned
	procs := runtime.GOMAXPROCS(0)
	own := lineOwners(n, procs, alternate)
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		mine := own[int(seq.Add(1)-1)%procs]
		i := 0
		for pb.Next() {
			l := &lines[mine[i]]
			if w := atomic.LoadUint64(&l.w); atomic.CompareAndSwapUint64(&l.w, w, w|1) {
				atomic.StoreUint64(&l.w, w+2)
			}
			if i++; i == len(mine) {
				i = 0
			}
		}
	})
}

// paths are the outcomes a one-key benchmark holds a limiter on: always
// allowed (an interval of a fraction of a nanosecond, and of whole
// nanoseconds), and always denied.
var paths = []struct {
	name  string
	spec  spec
	allow bool
}{
	{"allow", allowSpec, true},
	{"allow-whole", wholeSpec, true},
	{"deny", denySpec, false},
}

// BenchmarkOneKey measures one key's decision, on the allow path (a limit
// that is never reached) and on the deny path (a limit spent before the
// timer starts), called from one goroutine and from GOMAXPROCS goroutines
// at once (all on the same key: contended).
func BenchmarkOneKey(b *testing.B) {
	keys := []string{"k:00000000"}
	for _, p := range paths {
		b.Run("path="+p.name, func(b *testing.B) {
			for _, im := range impls {
				if !im.oneKey {
					continue
				}
				b.Run("impl="+im.name, func(b *testing.B) {
					// newLimiter builds a limiter held on path p, its
					// key created (and, on the deny path, its one event
					// spent) before the timer starts.
					newLimiter := func() limiter {
						lim := im.build(p.spec)
						lim.allow(keys[0])
						return lim
					}
					b.Run("run=serial", func(b *testing.B) {
						lim := newLimiter()
						defer closeLimiter(lim)
						runSerial(b, lim.allow, keys, p.allow)
					})
					b.Run("run=parallel", func(b *testing.B) {
						lim := newLimiter()
						defer closeLimiter(lim)
						runParallel(b, lim.allow, keys, p.allow, im.outOfOrder && p.allow)
					})
					if !strings.HasPrefix(im.name, "ours-") {
						return
					}
					// Our limiters on the global key "", the one a
					// single limiter of the peers' stands for.
					global := []string{""}
					b.Run("key=global", func(b *testing.B) {
						newGlobal := func() limiter {
							lim := im.build(p.spec)
							lim.allow("")
							return lim
						}
						b.Run("run=serial", func(b *testing.B) {
							lim := newGlobal()
							defer closeLimiter(lim)
							runSerial(b, lim.allow, global, p.allow)
						})
						b.Run("run=parallel", func(b *testing.B) {
							lim := newGlobal()
							defer closeLimiter(lim)
							runParallel(b, lim.allow, global, p.allow, im.outOfOrder && p.allow)
						})
					})
				})
			}
		})
	}
}

// BenchmarkKeys measures the allow path over many keys, 10 bytes each,
// inserted (as copies, in shuffled order) before the timer starts and
// cycled through in key order, from one goroutine and from GOMAXPROCS
// goroutines, each on its own share of the keys (see runParallel). One
// limiter per implementation and key count is populated and shared by the
// runs: 1M keys are inserted once per process.
//
// In the run=serial and run=parallel rows each call's key is built afresh,
// as a request's would be cut from its bytes: its hex digits written into
// the calling goroutine's own 10-byte buffer (see freshKey), so that the
// string a limiter is given is never one it stored. The key=prebuilt rows
// are the earlier form: the keys are substrings of one buffer built before
// the run, walked in order.
func BenchmarkKeys(b *testing.B) {
	for _, kc := range keyCounts {
		b.Run("keys="+kc.name, func(b *testing.B) {
			keys := keySet(kc.n)
			for _, im := range impls {
				if !im.keyed {
					continue
				}
				b.Run("impl="+im.name, func(b *testing.B) {
					lim := im.build(keyedSpec)
					defer closeLimiter(lim)
					for _, k := range shuffled(keys) {
						if !lim.allow(strings.Clone(k)) {
							b.Fatalf("%s denied new key %q", im.name, k)
						}
					}
					b.Run("run=serial", func(b *testing.B) {
						runSerialFresh(b, lim.allow, kc.n)
					})
					b.Run("run=parallel", func(b *testing.B) {
						runParallelFresh(b, lim.allow, kc.n)
					})
					b.Run("key=prebuilt", func(b *testing.B) {
						b.Run("run=serial", func(b *testing.B) {
							runSerial(b, lim.allow, keys, true)
						})
						b.Run("run=parallel", func(b *testing.B) {
							runParallel(b, lim.allow, keys, true, false)
						})
					})
					runtime.GC() // free this limiter before the next is built
				})
			}
		})
	}
}

// freshKey writes key i of keySet ("k:" and eight hex digits) into buf and
// returns it as a string that aliases buf: valid until buf is written
// again. Every key it is asked for is already in the limiter, which
// therefore keeps none of them.
func freshKey(buf *[10]byte, i int) string {
	const hex = "0123456789abcdef"
	buf[0], buf[1] = 'k', ':'
	for j := range 8 {
		buf[2+j] = hex[i>>(28-4*j)&0xf]
	}
	return unsafe.String(&buf[0], len(buf))
}

// runSerialFresh is runSerial over keys 0 to n-1 of keySet, each built
// afresh by freshKey for its call.
func runSerialFresh(b *testing.B, allow func(string) bool, n int) {
	b.ReportAllocs()
	var buf [10]byte
	i, wrong := 0, 0
	for b.Loop() {
		if !allow(freshKey(&buf, i)) {
			wrong++
		}
		if i++; i == n {
			i = 0
		}
	}
	if wrong > 0 {
		b.Fatalf("%d of %d calls were not on the allow path", wrong, b.N)
	}
}

// runParallelFresh is runParallel over keys 0 to n-1 of keySet, each
// built afresh by freshKey in its goroutine's own buffer.
func runParallelFresh(b *testing.B, allow func(string) bool, n int) {
	b.ReportAllocs()
	procs := runtime.GOMAXPROCS(0)
	var seq, wrong atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		g := int(seq.Add(1)-1) % procs
		lo, hi := g*n/procs, (g+1)*n/procs
		buf := new([10]byte)
		i, w := lo, 0
		for pb.Next() {
			if !allow(freshKey(buf, i)) {
				w++
			}
			if i++; i == hi {
				i = lo
			}
		}
		wrong.Add(int64(w))
	})
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d of %d calls were not on the allow path", w, b.N)
	}
}

// runSerial calls allow on keys in turn and fails if any call was not on
// the expected path.
func runSerial(b *testing.B, allow func(string) bool, keys []string, want bool) {
	b.ReportAllocs()
	i, wrong := 0, 0
	for b.Loop() {
		if allow(keys[i]) != want {
			wrong++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	if wrong > 0 {
		b.Fatalf("%d of %d calls were not on the %s path", wrong, b.N, pathName(want))
	}
}

// runParallel is runSerial from GOMAXPROCS goroutines, each on its own
// share of keys: goroutine g of P cycles through keys[g*n/P : (g+1)*n/P]
// (with one key, all of them on that key). No key is touched by two
// goroutines, so what is measured is the limiter's own contention (shared
// locks, shared cache lines), not contention for a key. If tolerate is set,
// calls off the expected path are reported as a share, denied-% (see
// impl.outOfOrder), rather than failing the run.
func runParallel(b *testing.B, allow func(string) bool, keys []string, want, tolerate bool) {
	b.ReportAllocs()
	procs := runtime.GOMAXPROCS(0) // RunParallel's goroutines, at parallelism 1
	var seq atomic.Int64
	var wrong atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		share := keys
		if len(keys) >= procs {
			g := int(seq.Add(1)-1) % procs
			share = keys[g*len(keys)/procs : (g+1)*len(keys)/procs]
		}
		i, w := 0, 0
		for pb.Next() {
			if allow(share[i]) != want {
				w++
			}
			if i++; i == len(share) {
				i = 0
			}
		}
		wrong.Add(int64(w))
	})
	switch w := wrong.Load(); {
	case tolerate:
		b.ReportMetric(100*float64(w)/float64(b.N), "denied-%")
	case w > 0:
		b.Fatalf("%d of %d calls were not on the %s path", w, b.N, pathName(want))
	}
}

func pathName(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

func closeLimiter(l limiter) {
	if l.close != nil {
		l.close()
	}
}

// liveHeap returns the live heap after a full collection. (No limiter
// here sets finalizers, so one cycle frees all garbage.)
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemory floods a limiter with 1M new keys, one event each, and
// reports the live heap it retains per key (B/key), what a new key costs
// (ns/key), and, after the keys go idle, what is still held: idle-B/key,
// and idle-% of the flood's memory (0 means all of it came back). A key goes
// idle when the limiter's clock is moved past its refill and, for ours,
// Sweep runs. Implementations that read only the real clock report no idle
// figures: they are not measurable without sleeping for their TTL.
//
// Each key is a fresh copy, as a request's would be, so a limiter that
// keeps the caller's string pays for it. Run with -benchtime 1x: each
// iteration is a whole flood.
func BenchmarkMemory(b *testing.B) {
	keys := keySet(maxKeys)
	b.Run("keys=1M", func(b *testing.B) {
		for _, im := range impls {
			if !im.keyed {
				continue
			}
			b.Run("impl="+im.name, func(b *testing.B) { memoryFlood(b, im, keys) })
		}
	})
}

// memoryFlood is one row of BenchmarkMemory.
func memoryFlood(b *testing.B, im impl, keys []string) {
	var perKey, nsPerKey, idlePerKey, idlePct float64
	measurable := true
	for range b.N {
		s := keyedSpec
		s.clock = ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
		base := liveHeap()
		start := time.Now()
		lim := im.build(s)
		for _, k := range keys {
			if !lim.allow(strings.Clone(k)) {
				b.Fatalf("%s denied new key %q", im.name, k)
			}
		}
		nsPerKey += float64(time.Since(start)) / float64(len(keys))
		flood := float64(liveHeap()) - float64(base)
		perKey += flood / float64(len(keys))
		if lim.idle == nil {
			measurable = false
		} else {
			lim.idle()
			idle := float64(liveHeap()) - float64(base)
			idlePerKey += idle / float64(len(keys))
			idlePct += 100 * idle / flood
		}
		closeLimiter(lim)
		runtime.KeepAlive(lim)
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op") // a whole flood: see ns/key
	b.ReportMetric(nsPerKey/n, "ns/key")
	b.ReportMetric(perKey/n, "B/key")
	if measurable {
		b.ReportMetric(idlePerKey/n, "idle-B/key")
		b.ReportMetric(idlePct/n, "idle-%")
	}
}

// growthKeys is how many new keys BenchmarkGrowth sends: at about 50 B a
// key, half a gigabyte of store.
const growthKeys = 10_000_000

// The machine row of BenchmarkGrowth: each call writes growthMachineBytes
// of new memory, about what our store holds per key, and lasts at least
// growthMachineCall, about what a new key costs our limiters, so that the
// row takes as long as theirs and gets as much new memory.
const (
	growthMachineBytes = 64
	growthMachineCall  = time.Microsecond
)

// BenchmarkGrowth floods our limiters with 10M new keys, one Allow each,
// timing every call, and reports the worst single call (worst-ns), the
// 99.99th percentile (p9999-ns), how many calls took longer than 200 µs
// (over200us), what a new key costs (ns/key), and the live heap retained
// per key at the end (B/key). The store grows all the way from empty, so
// the worst call is bounded by the largest pause a growing table makes its
// caller (or a reader of its shard) wait, plus what the machine adds: a
// garbage collection's stop, the process descheduled. Each call's key is
// built afresh in one buffer (see freshKey); the store keeps a copy. It is
// ours only: the peers' maps rehash whole as they grow, a pause this
// benchmark would only restate. The row impl=machine is the same flood
// with no limiter: each call writes growthMachineBytes of new memory
// (taken from the heap 64 KiB at a time) and spins until
// growthMachineCall has passed, instead of calling Allow, so its calls
// over that are the machine's alone: first touches of new memory, the
// collector, the process descheduled. Skipped with -short; run with
// -benchtime 1x: each iteration is a whole flood (about 10 s and 1 GiB).
func BenchmarkGrowth(b *testing.B) {
	if testing.Short() {
		b.Skip("a flood of 10M keys: skipped with -short")
	}
	b.Run("keys=10M", func(b *testing.B) {
		for _, im := range impls {
			if im.name != ourTB && im.name != "ours-fixedwindow" {
				continue
			}
			b.Run("impl="+im.name, func(b *testing.B) { growthFlood(b, im) })
		}
		b.Run("impl=machine", func(b *testing.B) {
			growthFlood(b, impl{name: "machine", build: buildMachineFlood})
		})
	})
}

// buildMachineFlood is the limiter of BenchmarkGrowth's machine row: it
// allows every call, writing the key into growthMachineBytes of memory it
// has not written before, and returns growthMachineCall after the call
// began, or as soon after as the machine lets it.
func buildMachineFlood(spec) limiter {
	var chunks [][]byte
	var cur []byte
	return limiter{
		allow: func(key string) bool {
			t0 := time.Now()
			for time.Since(t0) < growthMachineCall {
			}
			if len(cur) < growthMachineBytes {
				cur = make([]byte, 64<<10)
				chunks = append(chunks, cur)
			}
			copy(cur[:growthMachineBytes], key)
			cur = cur[growthMachineBytes:]
			return true
		},
		close: func() { chunks, cur = nil, nil },
	}
}

// ourTB is our token bucket, the reference of the targets.
const ourTB = "ours-tokenbucket"

// growthFlood is one row of BenchmarkGrowth.
func growthFlood(b *testing.B, im impl) {
	took := make([]int32, growthKeys) // allocated before the heap is measured
	var worst, p9999, over, nsPerKey, perKey float64
	for range b.N {
		s := keyedSpec
		s.clock = ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
		base := liveHeap()
		lim := im.build(s)
		var buf [10]byte
		start := time.Now()
		for i := range growthKeys {
			t0 := time.Since(start)
			ok := lim.allow(freshKey(&buf, i))
			took[i] = int32(min(time.Since(start)-t0, math.MaxInt32))
			if !ok {
				b.Fatalf("%s denied new key %d", im.name, i)
			}
		}
		nsPerKey += float64(time.Since(start)) / growthKeys
		perKey += (float64(liveHeap()) - float64(base)) / growthKeys
		closeLimiter(lim)
		runtime.KeepAlive(lim)
		n := 0
		for _, d := range took {
			if d > 200_000 {
				n++
			}
		}
		over += float64(n)
		slices.Sort(took)
		worst += float64(took[len(took)-1])
		p9999 += float64(took[len(took)-1-len(took)/10_000])
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op") // a whole flood: see ns/key
	b.ReportMetric(worst/n, "worst-ns")
	b.ReportMetric(p9999/n, "p9999-ns")
	b.ReportMetric(over/n, "over200us")
	b.ReportMetric(nsPerKey/n, "ns/key")
	b.ReportMetric(perKey/n, "B/key")
}

// BenchmarkBulkhead measures TryAcquire followed by Release on a bulkhead
// of 64 permits (so that every goroutine of the parallel run gets one),
// serial and from GOMAXPROCS goroutines.
func BenchmarkBulkhead(b *testing.B) {
	const permits = 64
	for _, im := range bulkheadImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.Run("run=serial", func(b *testing.B) {
				bh := im.build(permits)
				b.ReportAllocs()
				failed := 0
				for b.Loop() {
					if bh.tryAcquire() {
						bh.release()
					} else {
						failed++
					}
				}
				if failed > 0 {
					b.Fatalf("%d of %d acquires failed", failed, b.N)
				}
			})
			b.Run("run=parallel", func(b *testing.B) {
				bulkheadParallel(b, im.build(permits))
			})
		})
	}
}

// bulkheadParallel runs TryAcquire followed by Release on bh from
// GOMAXPROCS goroutines and fails if any TryAcquire was refused: bh must
// have a permit for each of them.
func bulkheadParallel(b *testing.B, bh bulkhead) {
	b.ReportAllocs()
	var failed atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		f := 0
		for pb.Next() {
			if bh.tryAcquire() {
				bh.release()
			} else {
				f++
			}
		}
		failed.Add(int64(f))
	})
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d acquires failed", f, b.N)
	}
}

// contendedImpls are the rate limiters of the contended one-key rows:
// ours, x/time/rate, a sync.Mutex-protected bucket and the fastest
// single-limiter peers.
var contendedImpls = []string{"ours-tokenbucket", "xrate", "mutex-tokenbucket", "failsafe", "juju"}

// BenchmarkContended is one shared key (a global bucket) and one shared
// bulkhead hit from GOMAXPROCS goroutines at once, on the allow path
// (every call admitted). Run it at -cpu 1,2,4,8 (make bench does): with
// more goroutines than cores, a lock whose holder is descheduled shows
// what it costs its spinners. The GOMAXPROCS of a run is the -N suffix
// of its name, as usual (none for 1); cmd/ratios keeps it apart.
func BenchmarkContended(b *testing.B) {
	keys := []string{"k:00000000"}
	b.Run("op=tokenbucket", func(b *testing.B) {
		for _, name := range contendedImpls {
			i := slices.IndexFunc(impls, func(im impl) bool { return im.name == name })
			if i < 0 {
				b.Fatalf("no implementation %q", name)
			}
			b.Run("impl="+name, func(b *testing.B) {
				lim := impls[i].build(allowSpec)
				defer closeLimiter(lim)
				lim.allow(keys[0])
				runParallel(b, lim.allow, keys, true, false)
			})
		}
	})
	b.Run("op=bulkhead", func(b *testing.B) {
		for _, im := range bulkheadImpls {
			b.Run("impl="+im.name, func(b *testing.B) {
				bulkheadParallel(b, im.build(1<<16))
			})
		}
	})
}
