package keystore

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// hotState counts the steps taken on a key; a key is at rest until a step
// marks it hot.
type hotState struct {
	steps int64
	hot   bool
}

func newHotStore(shards int) *Store[hotState] {
	return New(Config{Shards: shards}, func(s *hotState, _ string, now int64) bool { return false }, func(s *hotState, _ bool, _ []byte, now int64) bool { return !s.hot })
}

// Rule 11: goroutines on one key, some holding its slot across a yield so
// that others find it locked, join the queue and park on the wait bit,
// while another goroutine churns the shard's table under them (inserts
// that grow it, sweeps that drop keys at rest, shifting the hot key back
// and shrinking and rebuilding the table). Every step is kept (no lost
// update: the count is exactly goroutines × steps), the queue path is
// taken, no caller stays parked (the test would hang: a lost wake-up), and
// afterwards the queue is free and the table consistent. It runs at
// GOMAXPROCS 1, 2, 4 and 8.
func TestQueueNoLostUpdateOrWakeup(t *testing.T) {
	const goroutines, steps = 8, 10000
	for _, procs := range []int{1, 2, 4, 8} {
		for _, shards := range []int{1, 64} {
			t.Run(fmt.Sprintf("procs=%d/shards=%d", procs, shards), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				st := newHotStore(shards)
				var queued, parked atomic.Int64
				var wg sync.WaitGroup
				stop := make(chan struct{})
				var churn sync.WaitGroup
				churn.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						h, _ := st.Take(fmt.Sprintf("c-%d", i%300), int64(i), true)
						h.Release()
						if i%97 == 0 {
							st.Sweep(int64(i)) // every churn key is at rest
						}
						runtime.Gosched()
					}
				})
				for g := range goroutines {
					wg.Go(func() {
						for i := range steps {
							h, _ := st.Take("hot", 0, true)
							if h.slow { // a slot, taken through the queue
								queued.Add(1)
							}
							s := h.State()
							v := s.steps
							if (i+g)%5 == 0 {
								// Breaks rule 2 on purpose, so that others
								// meet the slot locked at any GOMAXPROCS.
								runtime.Gosched()
							}
							if atomic.LoadUint64(&h.sl.hdr)&waitBit != 0 {
								parked.Add(1)
							}
							s.steps, s.hot = v+1, true
							h.Release()
						}
					})
				}
				wg.Wait()
				close(stop)
				churn.Wait()

				h, fresh := st.Take("hot", 0, false)
				got := h.State().steps
				h.Release()
				if fresh || got != goroutines*steps {
					t.Errorf("hot key: %d steps kept (fresh %v), want exactly %d", got, fresh, goroutines*steps)
				}
				if queued.Load() == 0 || parked.Load() == 0 {
					t.Errorf("queue taken %d times, a waiter parked on a held slot %d times: the test did not reach the queue", queued.Load(), parked.Load())
				}
				for i, sh := range st.allShards() {
					if !sh.queue.TryLock() {
						t.Fatalf("shard %d: queue still held after every Release", i)
					}
					sh.queue.Unlock()
				}
				if err := st.Check(); err != nil {
					t.Error(err)
				}
			})
		}
	}
}
