package ratelimit

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// BenchmarkKeyCap floods a token bucket capped at WithMaxKeys(cap) with new
// keys on a frozen clock, so that no key is ever at rest and every new key
// past the cap evicts a busy one (the costlier path). It reports:
//
//   - below-ns: mean ns per new key while the store fills to 3/4 of the cap
//     (growth included);
//   - at-ns: mean ns per new key over a flood of cap more new keys at the cap;
//   - at/below: their ratio;
//   - below-max-ns, at-max-ns: the slowest single call in each phase;
//   - held-ns, held-flood-ns: ns per Allow of 1,024 keys held from the
//     start, between the chunks of new keys below the cap and at it
//     (held-lost: how many of those calls at the cap found their key
//     evicted).
//
// Means are timed over whole chunks; the slowest call is timed per call on
// every other chunk, so the clock reads do not weigh on the means. ns/op is
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

func benchKeyCap(b *testing.B, capKeys int) {
	clk := NewManualClock(time.Unix(1_700_000_000, 0))
	tb, err := NewTokenBucket(PerMinute(1), 5, WithClock(clk), WithMaxKeys(capKeys))
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	held := make([]string, 1024)
	for i := range held {
		held[i] = "held-" + strconv.Itoa(i)
		tb.Allow(held[i])
	}
	chunk := min(16384, max(capKeys/8, 256))
	keys := make([]string, chunk)
	next := 0
	fill := func() { // untimed: the next chunk of new keys
		for i := range keys {
			keys[i] = strconv.Itoa(next)
			next++
		}
	}
	heldRound := func() time.Duration {
		t0 := time.Now()
		for _, k := range held {
			tb.Allow(k)
		}
		return time.Since(t0)
	}
	// run times n new keys in chunks, with a round over the held keys after
	// each chunk if withHeld, and returns the mean per new key, the slowest
	// call and the mean per held Allow.
	run := func(n int, withHeld bool) (mean, slowest, heldMean float64) {
		var total, heldTotal time.Duration
		var timed, heldCalls, slow int64
		for c := 0; c*chunk < n; c++ {
			fill()
			if c%2 == 0 {
				t0 := time.Now()
				for _, k := range keys {
					tb.Allow(k)
				}
				total += time.Since(t0)
				timed += int64(len(keys))
			} else {
				for _, k := range keys {
					t0 := time.Now()
					tb.Allow(k)
					slow = max(slow, int64(time.Since(t0)))
				}
			}
			if withHeld {
				heldTotal += heldRound()
				heldCalls += int64(len(held))
			}
		}
		if heldCalls > 0 {
			heldMean = float64(heldTotal) / float64(heldCalls)
		}
		return float64(total) / float64(max(timed, 1)), float64(slow), heldMean
	}

	below, belowMax, heldBelow := run(capKeys*3/4, true)
	for tb.Stats().Keys < capKeys-len(held) && next < 2*capKeys { // to the cap, untimed
		fill()
		for _, k := range keys {
			tb.Allow(k)
		}
	}
	s0 := tb.Stats()
	at, atMax, heldFlood := run(capKeys, true)
	s1 := tb.Stats()
	if s1.Keys > capKeys || s1.EvictedLRU == s0.EvictedLRU {
		b.Fatalf("the flood did not run at the cap: %+v", s1)
	}
	b.ReportMetric(below, "below-ns")
	b.ReportMetric(at, "at-ns")
	b.ReportMetric(at/below, "at/below")
	b.ReportMetric(belowMax, "below-max-ns")
	b.ReportMetric(atMax, "at-max-ns")
	b.ReportMetric(heldBelow, "held-ns")
	b.ReportMetric(heldFlood, "held-flood-ns")
	// Every insert past s0 is a new key or a held key evicted and back.
	floodKeys := (capKeys + chunk - 1) / chunk * chunk
	b.ReportMetric(float64(int(s1.Inserts-s0.Inserts)-floodKeys), "held-lost")
}
