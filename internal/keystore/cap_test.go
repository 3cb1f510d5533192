package keystore

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The bound a user relies on at the cap: a new key costs about what it
// costs below the cap, whatever the cap, and no call walks a probe run
// that grows with the table. The cost is counted, not timed: sh.probed
// counts the slots that lookups, inserts, evictions and deletes look at
// under the shard's mutex. The hash seed is random, so the counts vary
// from run to run; the bounds are several times what uniform hashing at
// the load of 0.85 gives (about 23 slots to find a free one), and a
// fraction of what a table packed in one long run costs.
const (
	capMeanProbes  = 300  // mean slots looked at per new key at the cap
	capWorstProbes = 4000 // the most for any one new key
	capMeanDisp    = 40.0 // mean slots a key held is from its home, plus one
)

// capFlood fills st, one shard capped at capKeys, with capKeys keys, then
// floods it with rounds*capKeys new keys; every restEvery-th key is left
// at rest (0: none). Between chunks of capKeys/8 new keys it uses the held
// keys again. It returns the mean and worst slots looked at per new key at
// the cap, the longest probe run and the mean displacement of the keys
// held at the end, and checks that the held keys were kept: CLOCK keeps a
// key used more often than the hand comes round, but for one the deletes
// of others moved to a slot the hand comes to soon (a few uses in ten
// thousand).
func capFlood(t *testing.T, st *Store[testState], capKeys, rounds, restEvery int, held []string) (mean float64, worst uint64, run int, disp float64) {
	t.Helper()
	sh := &st.shards[0]
	next := 0
	newKey := func() {
		v := int64(1) // busy
		if restEvery > 0 && next%restEvery == 0 {
			v = 2 // at rest
		}
		if !storeSet(st, fmt.Sprint("k", next), v) {
			t.Fatalf("new key k%d already held", next)
		}
		next++
	}
	for _, k := range held {
		storeSet(st, k, 1)
	}
	for sh.n < capKeys {
		newKey()
	}
	var total uint64
	flood := rounds * capKeys
	uses, lost := 0, 0
	for i := range flood {
		if i%max(capKeys/8, 1) == 0 {
			for _, k := range held {
				uses++
				if storeSet(st, k, 1) {
					lost++
				}
			}
		}
		before := sh.probed
		newKey()
		d := sh.probed - before
		total += d
		worst = max(worst, d)
	}
	if s := st.Stats(); s.Keys > capKeys || s.EvictedAtRest+s.EvictedLRU < uint64(flood) {
		t.Fatalf("cap %d: the flood did not run at the cap: %+v", capKeys, s)
	}
	t.Logf("cap %d: %d of %d held uses lost", capKeys, lost, uses)
	if lost*50 > uses {
		t.Errorf("cap %d: %d of %d uses of keys used every %d new keys found them evicted", capKeys, lost, uses, capKeys/8)
	}
	checkStore(t, st)
	run, disp = probeRuns(sh)
	return float64(total) / float64(flood), worst, run, disp
}

// probeRuns returns the longest run of full slots of a shard's table and
// the mean number of slots a lookup of a key held looks at.
func probeRuns[S any](sh *shard[S]) (longest int, meanDisp float64) {
	slots, _ := tableOf(sh)
	n := len(slots)
	cur, keys, sum := 0, 0, 0
	for i := range 2 * n { // twice round, for a run that wraps
		w := slots[i%n].hdr
		if w == 0 {
			cur = 0
			continue
		}
		cur++
		longest = max(longest, min(cur, n))
		if i < n {
			keys++
			sum += (i-home(w, n)+n)%n + 1
		}
	}
	return longest, float64(sum) / float64(max(keys, 1))
}

func TestStoreCapCostFlat(t *testing.T) {
	caps := []int{512, 2048, 8192}
	for _, c := range []struct {
		name      string
		restEvery int
	}{
		{"busy", 0},      // no key at rest: every eviction is CLOCK's
		{"half-rest", 2}, // every other key at rest: found by the sample
		{"few-rest", 17}, // now and then one at rest
	} {
		t.Run(c.name, func(t *testing.T) {
			var means []float64
			for _, capKeys := range caps {
				st := newTestStore(capKeys, 1)
				held := make([]string, 16)
				for i := range held {
					held[i] = fmt.Sprint("held", i)
				}
				mean, worst, run, disp := capFlood(t, st, capKeys, 2, c.restEvery, held)
				t.Logf("cap %5d: %.1f slots per new key, worst %d; longest run %d, mean displacement %.2f", capKeys, mean, worst, run, disp)
				if mean > capMeanProbes || worst > capWorstProbes || disp > capMeanDisp {
					t.Errorf("cap %d: %.1f slots per new key (bound %d), worst %d (bound %d), keys held %.2f from home (bound %.1f): the cost at the cap grows with the table",
						capKeys, mean, capMeanProbes, worst, capWorstProbes, disp, capMeanDisp)
				}
				means = append(means, mean)
			}
			if means[len(means)-1] > 3*means[0] {
				t.Errorf("slots per new key at the cap grow with the cap: %.1f at %d, %.1f at %d", means[0], caps[0], means[len(means)-1], caps[len(caps)-1])
			}
		})
	}
}

// After a sweep drops half the keys, a burst of new keys, one in eight at
// rest, refills the table to the cap and floods it: it costs what a flood
// does, and the table is as well spread.
func TestStoreCapBurstAfterSweep(t *testing.T) {
	const capKeys = 8192
	st := newTestStore(capKeys, 1)
	mean, worst, _, _ := capFlood(t, st, capKeys, 1, 4, nil) // a quarter at rest
	sh := &st.shards[0]
	for i := 0; i < 3; i++ {
		slots, _ := tableOf(sh)
		var keys []string
		for j := range slots {
			if w := slots[j].hdr; w != 0 {
				keys = append(keys, string(keyOf(sh.tab.Load(), &slots[j], w, new([inlineMax]byte))))
			}
		}
		for j, k := range keys {
			if j%2 == 0 {
				storeSet(st, k, 2) // at rest now
			}
		}
		st.Sweep(0)
		if sh.n > (capKeys+1)/2 {
			t.Fatalf("the sweep left %d keys of %d", sh.n, capKeys)
		}
		var total uint64
		burst := 0
		for j := 0; sh.n < capKeys || j < 2*capKeys; j++ {
			before := sh.probed
			v := int64(1)
			if j%8 == 0 {
				v = 2
			}
			storeSet(st, fmt.Sprint("burst", i, "-", j), v)
			d := sh.probed - before
			total += d
			worst = max(worst, d)
			burst++
		}
		mean = max(mean, float64(total)/float64(burst))
	}
	checkStore(t, st)
	run, disp := probeRuns(sh)
	t.Logf("%.1f slots per new key, worst %d; longest run %d, mean displacement %.2f", mean, worst, run, disp)
	if mean > capMeanProbes || worst > capWorstProbes || disp > capMeanDisp {
		t.Errorf("bursts after sweeps: %.1f slots per new key, worst %d, keys held %.2f from home", mean, worst, disp)
	}
}

// Across shards, with a cap that is no multiple of their number, the total
// stays under the cap and each new key's cost is bounded in every shard.
func TestStoreCapShardsOddCap(t *testing.T) {
	const capKeys = 10_007
	st := newTestStore(capKeys, 64)
	var worst uint64
	for i := range 4 * capKeys {
		sh, _ := st.hash(fmt.Sprint("r", i))
		before := sh.probed
		storeSet(st, fmt.Sprint("r", i), 1) // busy
		worst = max(worst, sh.probed-before)
	}
	if s := st.Stats(); s.Keys > capKeys {
		t.Fatalf("%d keys held, cap %d", s.Keys, capKeys)
	}
	if worst > capWorstProbes {
		t.Errorf("the worst new key looked at %d slots", worst)
	}
	checkStore(t, st)
}

// The clock hand visits every slot of a table exactly once a cycle, in
// runs of handRun slots.
func TestHandVisitsEverySlotOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{8, 9, 12, 17, 100, 1021, 4096, 4097} {
		key := rng.Uint64()
		seen := make([]bool, n)
		visits := 0
		for k := range handSteps(n) {
			i := handSlot(k, n, key)
			if i < 0 {
				continue
			}
			if seen[i] {
				t.Fatalf("n %d: slot %d visited twice", n, i)
			}
			if k%handRun > 0 && handSlot(k-1, n, key) != i-1 {
				t.Fatalf("n %d: step %d goes to %d, not after step %d's slot", n, k, i, k-1)
			}
			seen[i] = true
			visits++
		}
		if visits != n {
			t.Fatalf("n %d: %d slots visited", n, visits)
		}
	}
}

// scatter is a permutation of [0, n) for every n, powers of two or not.
func TestScatterIsAPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 2, 3, 8, 9, 12, 17, 64, 100, 1021, 4096, 4097, 65_537} {
		key := rng.Uint64()
		seen := make([]bool, n)
		for k := range n {
			s := scatter(k, n, key)
			if s < 0 || s >= n || seen[s] {
				t.Fatalf("n %d: step %d goes to slot %d, out of range or seen", n, k, s)
			}
			seen[s] = true
		}
	}
}
