package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// Stress tests for the keyed store: several goroutines call every
// algorithm while its tables change shape under them (growth from empty,
// sweeps, shrinking, backward-shift deletion, arena compaction, eviction
// at the cap). The clock is a ManualClock, frozen while goroutines run, so
// a key's allowance is known exactly: a lost update shows as a key allowed
// more than its limit, a key inserted twice as a key allowed twice its
// limit, a dropped booking as the same, a lost Cancel as too little left.
// Each test counts grants per key with atomics and checks the totals, the
// store's counters and, at the end, the tables' invariants (checkStore).
//
// Sizes are fixed (not tied to testing.Short) so that the file runs in a
// few seconds under -race on two cores.

const (
	stressGoroutines = 6
	stressLimit      = 4
)

// stressWant is how many events Allow grants a fresh key on a frozen
// clock: the limit, or one for a shaper (its next event departs 1/r later).
func stressWant(alg algorithm, limit int) int64 {
	if alg.shaper {
		return 1
	}
	return int64(limit)
}

func stressKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// stressVariants are the store shapes each test runs on: one shard, where
// every insert lands in the table others are updating and growth is
// frequent, and the default 64 shards.
var stressVariants = []struct {
	name string
	opts []Option
	keys int
}{
	{"OneShard", []Option{WithShards(1)}, 2000},
	{"Shards64", nil, 4096},
}

// hammer runs goroutines that each visit every key twice: once at the
// walk's frontier with Allow (so that goroutines insert new keys, the same
// ones at times, while the table grows), and once lag keys behind with
// AllowN(1) (updating keys that exist while others insert). Even goroutines
// walk forwards, odd ones backwards, each with its own lag. Grants are
// added to got, indexed like keys.
func hammer(t *testing.T, lim Limiter, keys []string, got []atomic.Int64, goroutines int) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			lag := 1 + 17*g
			at := func(i int) int {
				if g%2 == 1 {
					return len(keys) - 1 - i
				}
				return i
			}
			for i := 0; i < len(keys)+lag; i++ {
				if i < len(keys) {
					if k := at(i); lim.Allow(keys[k]) {
						got[k].Add(1)
					}
				}
				if j := i - lag; j >= 0 && j < len(keys) {
					k := at(j)
					d, err := lim.AllowN(bg, keys[k], 1)
					if err != nil {
						t.Errorf("AllowN(%q, 1): %v", keys[k], err)
						return
					}
					if d.Allowed {
						got[k].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
}

// checkTotals fails unless every key was granted exactly want events,
// naming the first few that were not.
func checkTotals(t *testing.T, what string, keys []string, got []atomic.Int64, want int64) {
	t.Helper()
	bad := 0
	for i := range keys {
		if n := got[i].Load(); n != want {
			if bad++; bad <= 5 {
				t.Errorf("%s: key %q granted %d, want exactly %d", what, keys[i], n, want)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d keys of %d granted a wrong total", what, bad, len(keys))
	}
}

// during runs f while another goroutine calls loop over and over, and
// returns once both are done. loop runs at least once.
func during(loop func(), f func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			loop()
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
}

// checkLimiterStore runs checkStore on the store behind lim.
func checkLimiterStore(t *testing.T, lim testLimiter) {
	t.Helper()
	switch l := lim.(type) {
	case *TokenBucket:
		checkStore(t, l.k.st)
	case *LeakyBucket:
		checkStore(t, l.k.st)
	case *FixedWindow:
		checkStore(t, l.k.st)
	case *SlidingLog:
		checkStore(t, l.k.st)
	case *SlidingWindowCounter:
		checkStore(t, l.k.st)
	case *LeakyMeter:
		checkStore(t, l.k.st)
	default:
		t.Fatalf("checkLimiterStore: unknown limiter %T", lim)
	}
}

// checkCounters fails unless the store's counters add up: every key
// inserted is held or was dropped, once.
func checkCounters(t *testing.T, s Stats) {
	t.Helper()
	if s.Inserts-s.EvictedAtRest-s.EvictedLRU != uint64(s.Keys) {
		t.Errorf("counters do not add up: %+v", s)
	}
}

// 1. The store grows from empty while goroutines insert and update
// overlapping keys: on a frozen clock every key is granted exactly its
// allowance, inserted exactly once, and never dropped (no key is at rest).
func TestStressGrowthExactTotals(t *testing.T) {
	for _, alg := range algorithms {
		for _, v := range stressVariants {
			t.Run(alg.name+"/"+v.name, func(t *testing.T) {
				lim, _ := newLimiterAt(t, alg, stressLimit, v.opts...)
				keys := stressKeys("grow", v.keys)
				got := make([]atomic.Int64, len(keys))
				hammer(t, lim, keys, got, stressGoroutines)
				checkTotals(t, "frozen clock", keys, got, stressWant(alg, stressLimit))
				s := lim.Stats()
				if s.Keys != len(keys) || s.Inserts != uint64(len(keys)) || s.EvictedAtRest != 0 || s.EvictedLRU != 0 {
					t.Errorf("%d keys, each used: %+v; want each inserted once and held", len(keys), s)
				}
				checkLimiterStore(t, lim)
			})
		}
	}
}

// 2. Sweeps race updates. First, on a frozen clock, a goroutine sweeps in
// a loop while the others hammer every key: keys in use are not at rest,
// so none is dropped and totals stay exact. Then the clock moves on two
// periods (every key comes to rest) and one key in sixteen is hammered
// again while the sweeps go on: those keys get exactly one more allowance
// (a key swept before its first use there starts afresh, which is the same
// thing), the other fifteen in sixteen are dropped, and the tables shrink
// under the goroutines updating the survivors.
func TestStressSweepRacingUpdates(t *testing.T) {
	for _, alg := range algorithms {
		for _, v := range stressVariants {
			t.Run(alg.name+"/"+v.name, func(t *testing.T) {
				lim, clk := newLimiterAt(t, alg, stressLimit, v.opts...)
				want := stressWant(alg, stressLimit)
				keys := stressKeys("sweep", v.keys)
				got := make([]atomic.Int64, len(keys))
				sweep := func() { lim.Sweep(); _ = lim.Stats() }

				during(sweep, func() { hammer(t, lim, keys, got, stressGoroutines-1) })
				checkTotals(t, "phase 1, frozen clock", keys, got, want)
				s1 := lim.Stats()
				if s1.Keys != len(keys) || s1.EvictedLRU != 0 {
					t.Errorf("phase 1: %d keys in use: %+v; want every one held", len(keys), s1)
				}
				checkCounters(t, s1)
				checkLimiterStore(t, lim)

				clk.Advance(2 * suitePeriod) // every key at rest
				var hot []string
				for i := 0; i < len(keys); i += 16 {
					hot = append(hot, keys[i])
				}
				got2 := make([]atomic.Int64, len(hot))
				during(sweep, func() { hammer(t, lim, hot, got2, stressGoroutines-1) })
				checkTotals(t, "phase 2, hammered keys", hot, got2, want)
				lim.Sweep()
				s2 := lim.Stats()
				if s2.Keys != len(hot) || s2.EvictedLRU != 0 || s2.EvictedAtRest < uint64(len(keys)-len(hot)) {
					t.Errorf("phase 2: %d keys hammered, %d at rest: %+v", len(hot), len(keys)-len(hot), s2)
				}
				if s2.Slots*4 > s1.Slots {
					t.Errorf("phase 2: %d slots with %d keys, %d before: the tables did not shrink", s2.Slots, s2.Keys, s1.Slots)
				}
				checkCounters(t, s2)
				checkLimiterStore(t, lim)
			})
		}
	}
}

// 3. Deletes move live keys. In one shard, a set of hot keys shares the
// table with keys used once per round. Each round the clock moves on more
// than restGrace, so the last round's keys are at rest long enough for a
// growing table to drop them; the hot keys are touched first (they are not
// at rest), then one goroutine inserts the round's new keys, which makes
// the table sweep itself and shift live keys back over the dropped ones,
// while the others keep hammering the hot keys. Each round, every hot key
// gets exactly one allowance, and the growth sweeps drop exactly the last
// round's keys (no Sweep is called).
func TestStressDeletesMoveLiveKeys(t *testing.T) {
	const (
		hotKeys   = 192
		roundKeys = 768
		rounds    = 4
		hammers   = 3 // goroutines on the hot keys, besides the inserter
	)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			lim, clk := newLimiterAt(t, alg, stressLimit, WithShards(1))
			want := stressWant(alg, stressLimit)
			hot := stressKeys("hot", hotKeys)
			for r := range rounds {
				if r > 0 {
					clk.Advance(keystore.RestGrace + 3*suitePeriod)
				}
				fresh := stressKeys(fmt.Sprint("round", r), roundKeys)
				got := make([]atomic.Int64, len(hot))
				var touched, wg sync.WaitGroup
				var inserted atomic.Bool
				touched.Add(hammers)
				for g := range hammers {
					wg.Go(func() {
						for pass := 0; pass < 2 || !inserted.Load(); pass++ {
							for i := range hot {
								k := (i + g*hotKeys/hammers) % hotKeys
								if lim.Allow(hot[k]) {
									got[k].Add(1)
								}
							}
							if pass == 0 {
								touched.Done()
							}
						}
					})
				}
				wg.Go(func() {
					defer inserted.Store(true)
					touched.Wait()
					for _, key := range fresh {
						if !lim.Allow(key) {
							t.Errorf("round %d: new key %q denied", r, key)
							return
						}
					}
				})
				wg.Wait()
				checkTotals(t, fmt.Sprint("round ", r), hot, got, want)
				s := lim.Stats()
				// From round 1 on, each round's inserts make the table sweep
				// and drop exactly the last round's keys.
				if wantAtRest := uint64(r * roundKeys); s.Keys != hotKeys+roundKeys || s.EvictedAtRest != wantAtRest || s.EvictedLRU != 0 {
					t.Errorf("round %d: %+v; want %d keys held, %d dropped at rest", r, s, hotKeys+roundKeys, wantAtRest)
				}
				checkCounters(t, s)
				checkLimiterStore(t, lim)
			}
		})
	}
}

// 4. Reserve and Cancel race Allow. Half the goroutines Reserve one event
// at a time and Cancel every booking that must wait and every other one
// that may act at once; the others Allow; a goroutine sweeps in a loop. On
// a frozen clock every Cancel comes at or before its booking's time to
// act, so it is owed its events back. Per key, the kept grants (Allow, and
// bookings acting at once and not cancelled) never exceed the allowance.
// For TokenBucket the books never show more than was given back: a Cancel
// gives its booking back only while it is the latest on its key, so when
// another goroutine's Allow or booking followed it, its token stays taken.
// Afterwards the bucket lacks at least the kept grants (Remaining and
// ResetAfter say so), draining it grants what Remaining said, and kept
// plus drained is at most the capacity.
func TestStressReserveCancel(t *testing.T) {
	const keyCount = 600
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			lim, _ := newLimiterAt(t, alg, stressLimit, WithShards(1))
			want := stressWant(alg, stressLimit)
			keys := stressKeys("resv", keyCount)
			kept := make([]atomic.Int64, len(keys))
			var wg sync.WaitGroup
			during(func() { lim.Sweep() }, func() {
				for g := range stressGoroutines {
					wg.Go(func() {
						var pending []*Reservation
						var at []int
						immediate := 0
						for i := range keys {
							k := (i + g*keyCount/stressGoroutines) % keyCount
							if g%2 == 0 {
								for range 3 {
									if lim.Allow(keys[k]) {
										kept[k].Add(1)
									}
								}
								continue
							}
							for range 3 {
								r, err := lim.Reserve(bg, keys[k], 1)
								if err != nil || (!r.OK() && !alg.shaper) {
									t.Errorf("Reserve(%q, 1): OK=%v, %v", keys[k], r != nil && r.OK(), err)
									return
								}
								pending = append(pending, r)
								at = append(at, k)
							}
							// Cancel in reverse order of booking (a LeakyBucket
							// gives back only its queue's tail).
							for j := len(pending) - 1; j >= 0; j-- {
								r := pending[j]
								if r.OK() && r.Delay() == 0 {
									if immediate++; immediate%2 == 0 {
										kept[at[j]].Add(1)
										continue
									}
								}
								r.Cancel()
							}
							pending, at = pending[:0], at[:0]
						}
					})
				}
				wg.Wait()
			})
			over := 0
			for i := range keys {
				if n := kept[i].Load(); n > want {
					if over++; over <= 5 {
						t.Errorf("key %q: %d kept grants, allowance %d", keys[i], n, want)
					}
				}
			}
			if over > 5 {
				t.Errorf("%d keys of %d kept more than their allowance", over, len(keys))
			}
			checkCounters(t, lim.Stats())
			checkLimiterStore(t, lim)
			if _, ok := lim.(*TokenBucket); !ok {
				return
			}
			iv := suitePeriod / stressLimit
			short := 0
			for i, key := range keys {
				k := int(kept[i].Load())
				d := suitePeek(t, lim, key)
				if d.Remaining > stressLimit-k || d.ResetAfter < time.Duration(k)*iv {
					t.Errorf("key %q: %d kept grants; peek %+v, want Remaining at most %d, ResetAfter at least %v", key, k, d, stressLimit-k, time.Duration(k)*iv)
					continue
				}
				drained := 0
				for lim.Allow(key) {
					drained++
				}
				if drained != d.Remaining || k+drained > stressLimit {
					short++
				}
			}
			if short > 0 {
				t.Errorf("%d keys: drained other than Remaining, or kept grants plus drained above the capacity %d", short, stressLimit)
			}
		})
	}
}

// 5. Peeks (AllowN of 0) race inserts. Peeks alone create no key. Then two
// goroutines insert keys, each taking its whole allowance at once, and
// publish how far they got, while the others peek: at a key never
// inserted (the full limit remains), at a key published (nothing
// remains), and at a key that may be in flight (one or the other, nothing
// in between). Afterwards the store holds exactly the keys inserted.
func TestStressPeeksRacingInserts(t *testing.T) {
	const inserters = 2
	for _, alg := range algorithms {
		for _, v := range stressVariants {
			t.Run(alg.name+"/"+v.name, func(t *testing.T) {
				lim, _ := newLimiterAt(t, alg, stressLimit, v.opts...)
				keys := stressKeys("ins", v.keys)
				absent := stressKeys("absent", 512)
				full := Decision{Allowed: true, Limit: stressLimit, Remaining: stressLimit}

				var wg sync.WaitGroup
				for g := range stressGoroutines {
					wg.Go(func() {
						for i := range absent {
							key := absent[(i*7+g*31)%len(absent)]
							if d, err := lim.AllowN(bg, key, 0); err != nil || d != full {
								t.Errorf("peek at absent %q: %+v, %v; want %+v", key, d, err, full)
								return
							}
						}
					})
				}
				wg.Wait()
				if s := lim.Stats(); s != (Stats{}) {
					t.Fatalf("peeks alone changed the store: %+v", s)
				}

				var done [inserters]atomic.Int64 // inserter j has inserted keys[j], keys[j+inserters], ... below done[j]
				var finished atomic.Int32
				for j := range inserters {
					wg.Go(func() {
						defer finished.Add(1)
						for i := j; i < len(keys); i += inserters {
							if d, err := lim.AllowN(bg, keys[i], stressLimit); err != nil || !d.Allowed || d.Remaining != 0 {
								t.Errorf("AllowN(%q, limit) on a new key: %+v, %v", keys[i], d, err)
								return
							}
							done[j].Store(int64(i + inserters))
						}
					})
				}
				for g := range stressGoroutines - inserters {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), 99))
						for finished.Load() < inserters {
							j := rng.IntN(inserters)
							upTo := done[j].Load() // keys of inserter j below this are in
							var key string
							var remaining []int
							switch rng.IntN(3) {
							case 0:
								key, remaining = absent[rng.IntN(len(absent))], []int{stressLimit}
							case 1:
								if upTo == 0 {
									continue
								}
								key, remaining = keys[j+inserters*rng.IntN(int(upTo)/inserters)], []int{0}
							default:
								next := int(upTo) // inserter j's next key, perhaps in flight
								if next == 0 {
									next = j
								}
								i := next + inserters*rng.IntN(4)
								if i >= len(keys) {
									continue
								}
								key, remaining = keys[i], []int{0, stressLimit}
							}
							d, err := lim.AllowN(bg, key, 0)
							if err != nil || !d.Allowed || d.Limit != stressLimit || (d.Remaining != remaining[0] && d.Remaining != remaining[len(remaining)-1]) {
								t.Errorf("peek at %q: %+v, %v; want Remaining in %v", key, d, err, remaining)
								return
							}
						}
					})
				}
				wg.Wait()
				s := lim.Stats()
				if s.Keys != len(keys) || s.Inserts != uint64(len(keys)) || s.EvictedAtRest != 0 || s.EvictedLRU != 0 {
					t.Errorf("%d keys inserted among peeks: %+v", len(keys), s)
				}
				checkLimiterStore(t, lim)
			})
		}
	}
}

// 6. At the cap, evictions race updates. An evicted key starts afresh, so
// totals are not exact, but on a frozen clock each life of a key (from an
// insert to its eviction) is granted at most the allowance, and a life
// that ended at rest was granted nothing (a grant takes a key off rest):
// the grants are at most allowance × (Inserts − EvictedAtRest), and at
// least one per key held at the end. With an allowance of one event the
// upper bound is what the store does: every insert comes with its grant.
// Throughout, Stats().Keys stays within the cap.
func TestStressEvictionAtCap(t *testing.T) {
	for _, alg := range algorithms {
		for _, v := range []struct {
			name    string
			maxKeys int
			opts    []Option
		}{
			{"Cap256", 256, nil},
			{"Cap100OneShard", 100, []Option{WithShards(1)}},
		} {
			for _, limit := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/limit%d", alg.name, v.name, limit), func(t *testing.T) {
					opts := append([]Option{WithMaxKeys(v.maxKeys)}, v.opts...)
					lim, _ := newLimiterAt(t, alg, limit, opts...)
					want := stressWant(alg, limit)
					keys := stressKeys("cap", 4*v.maxKeys)
					got := make([]atomic.Int64, len(keys))
					var most atomic.Int64
					watch := func() {
						s := lim.Stats()
						if int64(s.Keys) > most.Load() {
							most.Store(int64(s.Keys))
						}
					}
					during(watch, func() { hammer(t, lim, keys, got, stressGoroutines-1) })
					var grants, overOne int64
					for i := range got {
						grants += got[i].Load()
						if got[i].Load() > want {
							overOne++
						}
					}
					s := lim.Stats()
					checkCounters(t, s)
					if m := most.Load(); m > int64(v.maxKeys) || s.Keys > v.maxKeys {
						t.Errorf("held up to %d keys, %d at the end; cap %d", m, s.Keys, v.maxKeys)
					}
					lives := int64(s.Inserts - s.EvictedAtRest)
					if grants > want*lives || grants < int64(s.Keys) {
						t.Errorf("%d grants; want within [%d keys held, %d × %d lives not ended at rest]: %+v", grants, s.Keys, want, lives, s)
					}
					if s.EvictedLRU == 0 || overOne == 0 {
						t.Errorf("no key evicted and granted again (%d evicted, %d keys over their allowance): the test proves nothing", s.EvictedLRU, overOne)
					}
					checkLimiterStore(t, lim)
				})
			}
		}
	}
}
