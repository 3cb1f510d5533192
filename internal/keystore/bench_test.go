package keystore

import (
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkKeyCap floods a store capped at cap keys with new keys whose
// state is never at rest (as a token bucket's on a frozen clock), so and every new key
// past the cap evicts a busy one (the costlier path). It reports:
//
//   - below-ns: mean ns per new key while the store fills from half the cap to
//     three quarters of it, its tables then about as large as at the cap
//     (growth included);
//   - at-ns: mean ns per new key over a flood of cap more new keys at the
//     cap;
//   - at/below: their ratio; below-med-ns, at-med-ns: the median over
//     chunks of new keys of their ns per key (robust to the pauses of a
//     shared machine); below-slots, at-slots: the slots looked at
//     per new key under a shard's mutex, the same measure as a count;
//   - below-max-ns, at-max-ns: the slowest single call in each phase, and
//     below-max-slots, at-max-slots: the most slots one call looked at
//     under a shard's mutex (a count, untouched by the machine's noise);
//   - rebuild-ns: the time to rebuild the largest shard's table, the
//     longest a shard's mutex is held (growth, compaction, shrinking);
//   - held-ns, held-flood-ns: ns per Allow of 1,024 keys held from the
//     start, between the chunks of new keys below the cap and at it
//     (held-lost: how many of those calls at the cap found their key
//     evicted).
//
// The new keys come in chunks, timed whole (a held Allow is the median over
// chunks); the slowest call is timed per call on every other chunk, so
// the clock reads do not weigh on the means. ns/op is
// meaningless: run with -benchtime 1x.
func BenchmarkKeyCap(b *testing.B) {
	for _, c := range []int{10_000, 100_000, 1_000_000, 4_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("cap=%d", c), func(b *testing.B) {
			for b.Loop() {
				benchKeyCap(b, c)
			}
		})
	}
}

type capPhase struct {
	perKey, medianKey, slowest float64 // ns
	heldPerCall                float64
	slotsPerKey                float64
	maxSlots                   uint64
}

func benchKeyCap(b *testing.B, capKeys int) {
	st := New(Config{Shards: 64, MaxKeys: capKeys}, func(s *testState, _ string, now int64) bool { return false }, func(s *testState, _ bool, _ []byte, now int64) bool { return s.v%2 == 0 })
	tb := benchUser{st}
	held := make([]string, 1024)
	for i := range held {
		held[i] = "held-" + strconv.Itoa(i)
		tb.Allow(held[i])
	}
	chunk := min(8192, max(capKeys/32, 256))
	keys := make([]string, chunk)
	next := 0
	fill := func() { // untimed: the next chunk of new keys
		for i := range keys {
			keys[i] = strconv.Itoa(next)
			next++
		}
	}
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	// run sends n new keys in chunks, each followed by a round over the
	// held keys.
	probed := func() (sum uint64) {
		for _, sh := range st.allShards() {
			sum += sh.probed
		}
		return sum
	}
	run := func(n int) (p capPhase) {
		var perKey, perHeld []float64
		var timed time.Duration
		p0, sent, timedKeys := probed(), 0, 0
		for c := 0; c*chunk < n; c++ {
			fill()
			sent += len(keys)
			if c%2 == 0 {
				t0 := time.Now()
				for _, k := range keys {
					tb.Allow(k)
				}
				d := time.Since(t0)
				timed += d
				timedKeys += len(keys)
				perKey = append(perKey, float64(d)/float64(len(keys)))
			} else {
				for _, k := range keys {
					sh, _ := st.hash(k)
					p0 := sh.probed
					t0 := time.Now()
					tb.Allow(k)
					p.slowest = max(p.slowest, float64(time.Since(t0)))
					p.maxSlots = max(p.maxSlots, sh.probed-p0)
				}
			}
			t0 := time.Now()
			for _, k := range held {
				tb.Allow(k)
			}
			perHeld = append(perHeld, float64(time.Since(t0))/float64(len(held)))
		}
		p.perKey = float64(timed) / float64(timedKeys)
		p.medianKey, p.heldPerCall = median(perKey), median(perHeld)
		p.slotsPerKey = float64(probed()-p0) / float64(sent)
		return p
	}

	for next < capKeys/2 { // to half the cap, untimed
		fill()
		for _, k := range keys {
			tb.Allow(k)
		}
	}
	below := run(capKeys / 4)
	for tb.Stats().Keys < capKeys-len(held) && next < 2*capKeys { // to the cap, untimed
		fill()
		for _, k := range keys {
			tb.Allow(k)
		}
	}
	s0 := tb.Stats()
	at := run(capKeys)
	s1 := tb.Stats()
	if s1.Keys > capKeys || s1.EvictedLRU == s0.EvictedLRU {
		b.Fatalf("the flood did not run at the cap: %+v", s1)
	}
	// The longest hold: rebuilding the largest shard's table and arena.
	var big *shard[testState]
	for i := range st.shards {
		if sh := &st.shards[i]; big == nil || sh.slots() > big.slots() {
			big = sh
		}
	}
	rebuild := time.Duration(math.MaxInt64)
	for range 5 {
		big.mu.Lock()
		t0 := time.Now()
		big.rebuild(big.slots(), true)
		rebuild = min(rebuild, time.Since(t0))
		big.mu.Unlock()
	}
	b.ReportMetric(below.perKey, "below-ns")
	b.ReportMetric(at.perKey, "at-ns")
	b.ReportMetric(at.perKey/below.perKey, "at/below")
	b.ReportMetric(below.medianKey, "below-med-ns")
	b.ReportMetric(at.medianKey, "at-med-ns")
	b.ReportMetric(below.slowest, "below-max-ns")
	b.ReportMetric(at.slowest, "at-max-ns")
	b.ReportMetric(below.slotsPerKey, "below-slots")
	b.ReportMetric(at.slotsPerKey, "at-slots")
	b.ReportMetric(float64(below.maxSlots), "below-max-slots")
	b.ReportMetric(float64(at.maxSlots), "at-max-slots")
	b.ReportMetric(float64(rebuild), "rebuild-ns")
	b.ReportMetric(below.heldPerCall, "held-ns")
	b.ReportMetric(at.heldPerCall, "held-flood-ns")
	// Every insert past s0 is a new key or a held key evicted and back.
	floodKeys := (capKeys + chunk - 1) / chunk * chunk
	b.ReportMetric(float64(int(s1.Inserts-s0.Inserts)-floodKeys), "held-lost")
}

// benchUser is a limiter's use of the store as BenchmarkKeyCap needs it:
// every key it touches is busy (an odd state, never at rest).
type benchUser struct{ st *Store[testState] }

func (u benchUser) Allow(key string) bool {
	h, _ := u.st.Take(key, 0, true)
	h.State().v = 1
	h.Release()
	return true
}

func (u benchUser) Stats() Stats { return u.st.Stats() }

// BenchmarkHotKeys is keys hot keys in one shard, each goroutine of
// RunParallel stepping them in turn: with one key, the hot-key hint
// (rule 13) serves every call; with two or more, the keys take the hint
// from each other whenever one is met locked, the worst case for it.
// Run it at -cpu 1,2,4,8. The baseline is one counter behind a sync.Mutex.
func BenchmarkHotKeys(b *testing.B) {
	b.Run("baseline=mutex", func(b *testing.B) {
		var mu sync.Mutex
		var steps int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				steps++
				mu.Unlock()
			}
		})
	})
	for _, keys := range []int{1, 2, 4} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			st := newHotStore(1)
			names := make([]string, keys)
			for i := range names {
				names[i] = "hot-" + strconv.Itoa(i)
				h, _ := st.Take(names[i], 0, true)
				h.Release()
			}
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					h, _ := st.Take(names[i], 0, true)
					h.State().steps++
					h.Release()
					if i++; i == keys {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkSharedShards is 10k keys of 10 bytes in a store of 64 shards
// without a cap, each taken, stepped and let go in turn: from one
// goroutine (run=serial), and from GOMAXPROCS goroutines that each take
// only keys of their own, dealt either by shard (deal=shards: no shard
// holds keys of two goroutines) or by the keys' order (deal=keys: every
// shard holds keys of every goroutine, as it does in a server). No slot is
// taken by two goroutines either way, and the store is the same: what
// deal=keys costs beyond deal=shards is the cores writing slots that are
// neighbours in one table (the machine's caches fetch a line's neighbours
// with it), not any word the store shares.
func BenchmarkSharedShards(b *testing.B) {
	const n = 10_000
	st := newTestStore(0, 64)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:%08x", i)
		h, _ := st.Take(keys[i], 0, true)
		h.Release()
	}
	procs := runtime.GOMAXPROCS(0)
	byShard := make([][]string, procs)
	shardOf := map[*shard[testState]]int{}
	for _, k := range keys {
		sh := st.shardOf(maphash.String(st.seed, k))
		g, ok := shardOf[sh]
		if !ok {
			g = len(shardOf) % procs
			shardOf[sh] = g
		}
		byShard[g] = append(byShard[g], k)
	}
	byKey := make([][]string, procs)
	for g := range byKey {
		byKey[g] = keys[g*n/procs : (g+1)*n/procs]
	}
	step := func(key string) {
		h, _ := st.Take(key, 0, true)
		h.State().v++
		h.Release()
	}
	b.Run("run=serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			step(keys[i])
			if i++; i == n {
				i = 0
			}
		}
	})
	for _, deal := range []struct {
		name string
		keys [][]string
	}{{"shards", byShard}, {"keys", byKey}} {
		b.Run("run=parallel/deal="+deal.name, func(b *testing.B) {
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				mine := deal.keys[int(seq.Add(1)-1)%procs]
				i := 0
				for pb.Next() {
					step(mine[i])
					if i++; i == len(mine) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkGrowth sends 10M new keys, one Take and Release each, to a
// store without a cap of 64 shards (the limiters' default), timing every
// call, with shards splitting as they fill (split=on, the store as built)
// and growing whole (split=off, as before splits). It reports the slowest
// call (worst-ns), the 99.99th percentile (p9999-ns), how many calls took
// longer than 200 µs (over200us), ns per key, the shards at the end, and
// worst-pass-slots: the most slots one pass over a table walked under a
// shard's mutex (a rebuild, a pre-growth sweep, a split), the pause a
// growing store makes the call that grows it, a count untouched by the
// machine's noise; and worst-dir-entries, the most directory entries and
// page pointers one split wrote (the directory's share of that pause).
// Skipped with -short; run with -benchtime 1x (each
// iteration is a whole flood, about 10 s and 1 GiB).
func BenchmarkGrowth(b *testing.B) {
	if testing.Short() {
		b.Skip("a flood of 10M keys: skipped with -short")
	}
	const keys = 10_000_000
	took := make([]int32, keys)
	for _, split := range []bool{true, false} {
		name := "split=on"
		if !split {
			name = "split=off"
		}
		b.Run(name, func(b *testing.B) {
			var worst, p9999, over, nsPerKey, pass, dirPass, shards float64
			for range b.N {
				st := newTestStore(0, 64)
				st.splits = split
				buf := []byte("key-")
				start := time.Now()
				for i := range keys {
					buf = strconv.AppendInt(buf[:4], int64(i), 10)
					t0 := time.Since(start)
					h, _ := st.Take(string(buf), 0, true) // no allocation: the store copies the key
					h.State().v = 1
					h.Release()
					took[i] = int32(min(time.Since(start)-t0, math.MaxInt32))
				}
				nsPerKey += float64(time.Since(start)) / keys
				all := st.allShards()
				shards += float64(len(all))
				p := 0
				for _, sh := range all {
					p = max(p, sh.pass)
				}
				pass += float64(p)
				st.dirMu.Lock()
				dirPass += float64(st.dirPass)
				st.dirMu.Unlock()
				n := 0
				for _, d := range took {
					if d > 200_000 {
						n++
					}
				}
				over += float64(n)
				slices.Sort(took)
				worst += float64(took[keys-1])
				p9999 += float64(took[keys-1-keys/10_000])
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(worst/n, "worst-ns")
			b.ReportMetric(p9999/n, "p9999-ns")
			b.ReportMetric(over/n, "over200us")
			b.ReportMetric(nsPerKey/n, "ns/key")
			b.ReportMetric(shards/n, "shards")
			b.ReportMetric(pass/n, "worst-pass-slots")
			b.ReportMetric(dirPass/n, "worst-dir-entries")
		})
	}
}
