package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Property tests of Bulkhead on random interleavings. The bounds a caller
// relies on:
//
//   - never more calls hold a permit than the limit in force when the last
//     of them was admitted (after SetLimit shrinks, the calls already in
//     flight may stay above the new limit, but none is admitted until the
//     count is below it);
//   - no permit is lost or doubled: once every call has released, exactly
//     Limit permits can be taken, and nobody waits;
//   - waiters are served in FIFO order, and TryAcquire never takes a
//     permit while anyone waits, however many TryAcquire calls run.

// bhLimitTrace is the sequence of limits a controller goroutine sets, with
// the index of the one in force published so that a call can bound the
// limit it may have been admitted under.
type bhLimitTrace struct {
	limits []int
	at     atomic.Int64 // index in limits of the last limit set (or about to be)
}

// bound returns the largest limit that may have been in force between two
// readings of at, from and to: the controller publishes an index just
// before calling SetLimit, so the limit before from is included too.
func (tr *bhLimitTrace) bound(from, to int64) int {
	hi := 0
	for i := max(from-1, 0); i <= to && i < int64(len(tr.limits)); i++ {
		hi = max(hi, tr.limits[i])
	}
	return hi
}

// TestBulkheadPropertyRandom runs random mixes of TryAcquire, Acquire
// (with a free ctx, a ctx cancelled or timing out mid-wait, the
// bulkhead's maximum wait), Do, and SetLimit growing and shrinking, for
// several seeds, and checks the limit at every admission and that every
// permit comes back.
func TestBulkheadPropertyRandom(t *testing.T) {
	bhNoLeak(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			bhPropertyRun(t, seed)
		})
	}
}

func bhPropertyRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	tr := &bhLimitTrace{limits: []int{1 + rng.IntN(4)}}
	for range 200 {
		tr.limits = append(tr.limits, 1+rng.IntN(6))
	}
	opts := []BulkheadOption{WithMaxWaiters(1 + rng.IntN(12))}
	if seed%2 == 1 {
		opts = append(opts, WithMaxWait(time.Duration(1+rng.IntN(500))*time.Microsecond))
	}
	b := bhNew(t, tr.limits[0], opts...)

	var inUse atomic.Int64 // calls holding a permit, as far as the test knows
	var admitted, refused atomic.Int64
	// hold is the life of an admitted call. The test's count lags the
	// bulkhead's on the way in and leads it on the way out, so it never
	// exceeds the calls truly holding a permit.
	hold := func(from int64, rng *rand.Rand) {
		n := inUse.Add(1)
		if lim := tr.bound(from, tr.at.Load()); n > int64(lim) {
			t.Errorf("%d calls hold a permit, limit at most %d", n, lim)
		}
		admitted.Add(1)
		for range rng.IntN(3) {
			runtime.Gosched()
		}
		inUse.Add(-1)
	}

	stop := make(chan struct{})
	var ctl sync.WaitGroup
	ctl.Go(func() { // the controller: resizes at random moments
		crng := rand.New(rand.NewPCG(seed, 1))
		for i := 1; i < len(tr.limits); i++ {
			select {
			case <-stop:
				return
			default:
			}
			tr.at.Store(int64(i))
			if err := b.SetLimit(tr.limits[i]); err != nil {
				t.Errorf("SetLimit(%d): %v", tr.limits[i], err)
			}
			for range crng.IntN(50) {
				runtime.Gosched()
			}
		}
	})

	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)+2))
			for range 400 {
				from := tr.at.Load()
				var err error
				switch op := rng.IntN(6); op {
				case 0, 1: // the fast path, most of the traffic
					if !b.TryAcquire() {
						refused.Add(1)
						continue
					}
				case 2: // a wait with nothing but the bulkhead to end it
					err = b.Acquire(context.Background())
				case 3: // a ctx deadline racing the handovers
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
					err = b.Acquire(ctx)
					cancel()
				case 4: // a cancel racing the handovers
					ctx, cancel := context.WithCancel(context.Background())
					go cancel()
					err = b.Acquire(ctx)
					cancel()
				case 5:
					err = b.Do(context.Background(), func(context.Context) error {
						hold(from, rng)
						return nil
					})
					if err != nil {
						refused.Add(1)
					}
					continue
				}
				if err != nil {
					refused.Add(1)
					continue
				}
				hold(from, rng)
				b.Release()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second): // a watchdog, not a wait the test relies on
		close(stop)
		t.Fatalf("callers still blocked after a minute: a permit was lost (in flight %d, waiting %d, limit %d)",
			b.InFlight(), b.Waiting(), b.Limit())
	}
	close(stop)
	ctl.Wait()

	// Every permit is back: exactly Limit can be taken now, no more.
	bhCheck(t, b, 0, 0)
	lim := b.Limit()
	for i := range lim {
		if !b.TryAcquire() {
			t.Fatalf("TryAcquire #%d = false after the run, limit %d", i+1, lim)
		}
	}
	if b.TryAcquire() {
		t.Fatalf("TryAcquire admitted more than the limit %d after the run", lim)
	}
	for range lim {
		b.Release()
	}
	if r := bhPanic(b.Release); r != errReleaseWithoutAcquire {
		t.Errorf("Release with nothing held: panic %v, want %q", r, errReleaseWithoutAcquire)
	}
	bhCheck(t, b, 0, 0)
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the run did not exercise both outcomes: admitted %d, refused %d", admitted.Load(), refused.Load())
	}
}

// TestBulkheadTryAcquireCannotStarveWaiters keeps goroutines calling
// TryAcquire in a tight loop while a call waits, and checks that none of
// them gets a permit while it waits, and that the waiter gets the permit
// released to it.
func TestBulkheadTryAcquireCannotStarveWaiters(t *testing.T) {
	bhNoLeak(t)
	for round := range 20 {
		b := bhNew(t, 1)
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false on an idle bulkhead")
		}
		res := make(chan error, 1)
		go func() { res <- b.Acquire(context.Background()) }()
		for b.Waiting() == 0 {
			runtime.Gosched()
		}
		var stop atomic.Bool
		var jumped atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for !stop.Load() {
					if b.TryAcquire() {
						jumped.Add(1)
						b.Release()
					}
				}
			})
		}
		b.Release() // to the waiter, whatever the TryAcquire calls do
		select {
		case err := <-res:
			if err != nil {
				t.Fatalf("round %d: waiter: %v", round, err)
			}
		case <-time.After(30 * time.Second): // a watchdog
			stop.Store(true)
			t.Fatalf("round %d: the waiter never got the permit (in flight %d, waiting %d)", round, b.InFlight(), b.Waiting())
		}
		// The waiter holds the only permit: nobody else may have it.
		if n := jumped.Load(); n != 0 {
			t.Fatalf("round %d: TryAcquire took a permit %d times while a call waited", round, n)
		}
		b.Release()
		stop.Store(true)
		wg.Wait()
		bhCheck(t, b, 0, 0)
	}
}

// TestBulkheadFIFORandom queues waiters one by one in a known order,
// cancels a random few, frees permits at random (Release and SetLimit
// growing), and checks that the permits go to the waiters left in
// exactly their arrival order.
func TestBulkheadFIFORandom(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { bhFIFORun(t, seed) })
		})
	}
}

func bhFIFORun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xf1f0))
	limit := 1 + rng.IntN(3)
	b := bhNew(t, limit)
	for range limit {
		if !b.TryAcquire() {
			t.Fatal("TryAcquire = false on an idle bulkhead")
		}
	}
	n := 3 + rng.IntN(8)
	var mu sync.Mutex
	var order []int
	cancels := make([]context.CancelFunc, n)
	results := make([]<-chan error, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		results[i] = bhGo(func() error {
			err := b.Acquire(ctx)
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}
			return err
		})
		synctest.Wait() // waiter i is queued before i+1 arrives
	}
	var want []int
	for i := range n {
		if rng.IntN(4) == 0 {
			cancels[i]()
			if err := bhDone(t, results[i], fmt.Sprintf("cancelled waiter %d", i)); err != context.Canceled {
				t.Fatalf("cancelled waiter %d: %v, want context.Canceled", i, err)
			}
			continue
		}
		want = append(want, i)
	}
	bhCheck(t, b, limit, len(want))
	held := limit
	granted := 0
	for granted < len(want) {
		if rng.IntN(3) == 0 {
			limit++
			if err := b.SetLimit(limit); err != nil {
				t.Fatal(err)
			}
		} else {
			b.Release()
			held--
		}
		synctest.Wait()
		for granted < len(want) && held < limit {
			if err := bhDone(t, results[want[granted]], fmt.Sprintf("waiter %d", want[granted])); err != nil {
				t.Fatalf("waiter %d: %v", want[granted], err)
			}
			granted++
			held++
		}
		if granted < len(want) {
			bhPending(t, results[want[granted]], fmt.Sprintf("waiter %d", want[granted]))
		}
		bhCheck(t, b, held, len(want)-granted)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("permits went to %v, want arrival order %v", order, want)
	}
	for i := range cancels {
		cancels[i]()
	}
	for range held {
		b.Release()
	}
	bhCheck(t, b, 0, 0)
}

// TestBulkheadReleaseRacesEnqueue frees the last permit at the instant a
// caller queues for it, with a refused TryAcquire taking back its add at
// the same time, many times over: whichever comes first, the caller gets
// the permit (a permit freed unseen would leave it waiting for ever).
func TestBulkheadReleaseRacesEnqueue(t *testing.T) {
	bhNoLeak(t)
	b := bhNew(t, 1)
	for round := range 3000 {
		if !b.TryAcquire() {
			t.Fatalf("round %d: TryAcquire = false between rounds", round)
		}
		done := make(chan error, 2)
		go func() {
			err := b.Acquire(context.Background())
			if err == nil {
				b.Release()
			}
			done <- err
		}()
		go func() {
			for range 3 {
				if b.TryAcquire() {
					b.Release()
				}
			}
			done <- nil
		}()
		if round%2 == 0 {
			runtime.Gosched()
		}
		b.Release()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: Acquire: %v", round, err)
				}
			case <-time.After(20 * time.Second): // a watchdog
				t.Fatalf("round %d: a caller never got the permit freed for it (in flight %d, waiting %d)", round, b.InFlight(), b.Waiting())
			}
		}
		if n, w := b.InFlight(), b.Waiting(); n != 0 || w != 0 {
			t.Fatalf("round %d: InFlight() = %d, Waiting() = %d after a round, want 0, 0", round, n, w)
		}
	}
}
