package benchmarks

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// These tests check that every benchmark measures the path its name says:
// a benchmark on the wrong path would compare unlike costs.

func TestOneKeyPaths(t *testing.T) {
	for _, im := range impls {
		if !im.oneKey {
			continue
		}
		t.Run(im.name, func(t *testing.T) {
			allow := im.build(allowSpec)
			defer closeLimiter(allow)
			allow.allow("k") // create the key, as BenchmarkOneKey does
			for i := range 1000 {
				if !allow.allow("k") {
					t.Fatalf("allow path: call %d denied", i)
				}
			}
			deny := im.build(denySpec)
			defer closeLimiter(deny)
			deny.allow("k") // spend the one event, as BenchmarkOneKey does
			for i := range 100 {
				if deny.allow("k") {
					t.Fatalf("deny path: call %d allowed", i)
				}
			}
		})
	}
}

func TestKeyedPaths(t *testing.T) {
	keys := keySet(1000)
	for _, im := range impls {
		if !im.keyed {
			continue
		}
		t.Run(im.name, func(t *testing.T) {
			allow := im.build(keyedSpec)
			defer closeLimiter(allow)
			deny := im.build(denySpec)
			defer closeLimiter(deny)
			for round := range 2 {
				for _, k := range keys {
					if !allow.allow(k) {
						t.Fatalf("allow spec, round %d: key %q denied", round, k)
					}
					if got, want := deny.allow(k), round == 0; got != want {
						t.Fatalf("deny spec, round %d: key %q allowed = %v, want %v", round, k, got, want)
					}
				}
			}
		})
	}
}

func TestKeySet(t *testing.T) {
	keys := keySet(maxKeys)
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if len(k) != 10 || seen[k] {
			t.Fatalf("key %d = %q: want 10 bytes, distinct", i, k)
		}
		seen[k] = true
	}
	if keys[0] != "k:00000000" || keys[maxKeys-1] != "k:000f423f" {
		t.Fatalf("keys run from %q to %q", keys[0], keys[maxKeys-1])
	}
	if got := keySet(10_000); len(got) != 10_000 || got[9999] != keys[9999] {
		t.Fatal("the 10k set is not a prefix of the 1M set")
	}
}

// countingClock is go.uber.org/ratelimit's Clock that counts Sleeps.
type countingClock struct{ sleeps atomic.Int64 }

func (c *countingClock) Now() time.Time      { return time.Now() }
func (c *countingClock) Sleep(time.Duration) { c.sleeps.Add(1) }

func TestUberPaths(t *testing.T) {
	for _, owesWait := range []bool{false, true} {
		t.Run(fmt.Sprint("owesWait=", owesWait), func(t *testing.T) {
			var c countingClock
			l := newUber(owesWait, &c)
			const n = 1000
			for range n {
				l.Take()
			}
			// The first Take never owes a wait: it starts the schedule.
			if got := c.sleeps.Load(); owesWait && got != n-1 || !owesWait && got != 0 {
				t.Fatalf("%d of %d Takes owed a wait", got, n)
			}
		})
	}
}

func TestBulkheads(t *testing.T) {
	for _, im := range bulkheadImpls {
		t.Run(im.name, func(t *testing.T) {
			bh := im.build(3)
			for i := range 3 {
				if !bh.tryAcquire() {
					t.Fatalf("acquire %d of 3 failed", i)
				}
			}
			if bh.tryAcquire() {
				t.Fatal("a 4th permit of 3 was granted")
			}
			bh.release()
			if !bh.tryAcquire() {
				t.Fatal("a released permit was not granted again")
			}
		})
	}
}

// The lines floor gives every line to exactly one goroutine: in blocks
// when apart, neighbours to different goroutines when alternate.
func TestLineOwners(t *testing.T) {
	const n, procs = 1 << 10, 3
	for _, alternate := range []bool{false, true} {
		owner := make([]int, n)
		for i := range owner {
			owner[i] = -1
		}
		for g, o := range lineOwners(n, procs, alternate) {
			for _, i := range o {
				if owner[i] != -1 {
					t.Fatalf("alternate=%v: line %d dealt twice", alternate, i)
				}
				owner[i] = g
			}
		}
		blocks := 1
		for i := range owner {
			if owner[i] == -1 {
				t.Fatalf("alternate=%v: line %d dealt to no one", alternate, i)
			}
			if i > 0 && owner[i] != owner[i-1] {
				blocks++
			}
		}
		if want := map[bool]int{false: procs, true: n}[alternate]; blocks != want {
			t.Errorf("alternate=%v: %d runs of one owner, want %d", alternate, blocks, want)
		}
	}
}

// The machine row of the flood allows every call and lasts at least
// growthMachineCall a call.
func TestMachineFlood(t *testing.T) {
	lim := buildMachineFlood(keyedSpec)
	defer closeLimiter(lim)
	var buf [10]byte
	const calls = 3000 // more than one 64 KiB chunk
	start := time.Now()
	for i := range calls {
		if !lim.allow(freshKey(&buf, i)) {
			t.Fatalf("call %d denied", i)
		}
	}
	if took := time.Since(start); took < calls*growthMachineCall {
		t.Errorf("%d calls took %v, less than %v each", calls, took, growthMachineCall)
	}
}
