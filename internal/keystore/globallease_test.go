package keystore

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// leaseState counts the leases out on a key: at rest when none is, so a
// drop at rest loses nothing (rule 4), and held marks a holder inside.
type leaseState struct {
	out  int64
	held bool
}

// Rules 2, 4, 9 and 14 for "" taken by its hint while sweeps drop it at
// rest and the shard is rebuilt under the callers: goroutines take a
// lease on "" and give it back in a second call, so the key goes in and
// out of rest all the time. No two callers hold "" at once (its lock is
// never taken twice, by the hint's compare-and-swap or any other way), a
// caller holding a lease never finds "" new (it is never dropped while
// not at rest, nor held twice), a lease never gives back one it did not
// take (no state lost or stale), peeks see a state at rest or a live one,
// and Stats counts at most the one key.
func TestGlobalKeyLeasesUnderSweep(t *testing.T) {
	st := New(Config{Shards: 4}, func(s *leaseState, _ string, _ int64) bool { return false },
		func(s *leaseState, _ bool, _ []byte, _ int64) bool { return s.out == 0 })
	var inside atomic.Int32
	enter := func(h Handle[leaseState]) *leaseState {
		if n := inside.Add(1); n != 1 {
			t.Errorf(`%d callers hold "" at once`, n)
		}
		s := h.State()
		if s.held {
			t.Error(`"" found held by its own holder`)
		}
		s.held = true
		return s
	}
	leave := func(h Handle[leaseState], s *leaseState) {
		s.held = false
		inside.Add(-1)
		h.Release()
	}
	goroutines := max(3, runtime.GOMAXPROCS(0))
	rounds := 20_000
	if testing.Short() {
		rounds = 5_000
	}
	var wg sync.WaitGroup
	var done atomic.Bool
	wg.Go(func() { // sweeps, peeks and stats under the callers
		for !done.Load() {
			st.Sweep(0)
			h, fresh := st.Take("", 0, false)
			s := enter(h)
			if fresh && s.out != 0 {
				t.Errorf(`a peek at "" absent sees %d leases`, s.out)
			}
			if s.out < 0 {
				t.Errorf(`a peek at "" sees %d leases`, s.out)
			}
			leave(h, s)
			if k := st.Stats().Keys; k > 1 {
				t.Errorf(`Stats counts %d keys with "" alone`, k)
			}
			runtime.Gosched()
		}
	})
	var calls sync.WaitGroup
	for range goroutines {
		calls.Go(func() {
			for range rounds {
				h, fresh := st.Take("", 0, true)
				s := enter(h)
				if fresh && s.out != 0 {
					t.Errorf(`"" set up afresh with %d leases`, s.out)
				}
				s.out++
				leave(h, s)
				h, fresh = st.Take("", 0, true)
				s = enter(h)
				if fresh {
					t.Error(`"" new while a lease on it is out: dropped while not at rest`)
				}
				if s.out--; s.out < 0 {
					t.Errorf(`"" gives back a lease it does not hold (%d)`, s.out)
				}
				leave(h, s)
				if t.Failed() {
					return
				}
			}
		})
	}
	calls.Wait()
	done.Store(true)
	wg.Wait()
	h, fresh := st.Take("", 0, false)
	out := h.State().out
	h.Release()
	if !fresh && out != 0 {
		t.Errorf(`"" ends with %d leases out`, out)
	}
	st.Sweep(0)
	if s := st.Stats(); s.Keys != 0 || s.EvictedAtRest == 0 {
		t.Errorf(`after the last sweep: %+v, want no key and "" dropped at rest`, s)
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}
