package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchFailure: a batch whose server stops answering (SIGSTOP), whose
// connection dies while it is in flight (kill -9 of a paused server), or
// whose script cannot run (CLIENT PAUSE) answers each of its callers
// exactly once, from the failure policy, within the call timeout, and
// reports each failure once to OnError.
func TestBatchFailure(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const callers = 12
	faults := []string{"SIGSTOP", "kill -9", "CLIENT PAUSE"}
	for _, fault := range faults {
		for _, policy := range []FailurePolicy{FailLocal, FailOpen, FailClosed} {
			t.Run(fmt.Sprintf("%s/%v", fault, policy), func(t *testing.T) {
				srv := ownServer(t)
				client := newClient(t, srv.addr, true)
				var reported atomic.Int64
				rds, err := NewTokenBucket(client, ratelimit.PerSecond(100), 100, WithPrefix(testPrefix(t)),
					WithTimeout(timeout), WithFailurePolicy(policy),
					WithOnError(func(string, error) { reported.Add(1) }))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if _, err := rds.AllowN(ctx, "warm", 1); err != nil { // the library loaded
					t.Fatal(err)
				}
				b := rds.batch
				waitIdle(b)
				hold(b)
				type answer struct {
					d       ratelimit.Decision
					err     error
					elapsed time.Duration
				}
				answers := make(chan answer, callers)
				for i := range callers {
					go func() {
						t0 := time.Now()
						d, err := rds.AllowN(ctx, fmt.Sprintf("k%d", i%3), 1)
						answers <- answer{d, err, time.Since(t0)}
					}()
					waitQueued(b, i+1)
				}
				switch fault {
				case "SIGSTOP":
					srv.pause()
					release(b)
				case "kill -9":
					srv.pause()
					release(b)
					// The batch is in flight (taken from the queue), then
					// the server dies under it.
					for b.q.multi.Load() == 0 {
						time.Sleep(time.Millisecond)
					}
					// SIGKILL while stopped (kill() would continue it
					// first, and it might answer).
					srv.cmd.Process.Signal(syscall.SIGKILL)
					srv.kill()
				case "CLIENT PAUSE":
					admin := newClient(t, srv.addr, true)
					if err := admin.Do(ctx, "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
						t.Fatal(err)
					}
					release(b)
				}
				for range callers {
					var a answer
					select {
					case a = <-answers:
					case <-time.After(timeout + 2*time.Second):
						t.Fatal("a caller of the failed batch got no answer")
					}
					if a.elapsed > timeout+time.Second {
						t.Errorf("answered after %v, timeout %v", a.elapsed, timeout)
					}
					switch policy {
					case FailClosed:
						if !errors.Is(a.err, ErrUnavailable) {
							t.Errorf("FailClosed: %+v %v, want an error matching ErrUnavailable", a.d, a.err)
						}
					case FailOpen:
						if a.err != nil || !a.d.Allowed || a.d.Remaining != 99 {
							t.Errorf("FailOpen: %+v %v, want allowed as a fresh key", a.d, a.err)
						}
					case FailLocal:
						if a.err != nil || !a.d.Allowed {
							t.Errorf("FailLocal: %+v %v, want the local limiter's allowance", a.d, a.err)
						}
					}
				}
				select {
				case a := <-answers:
					t.Fatalf("an extra answer %+v", a)
				default:
				}
				if n := reported.Load(); n != callers {
					t.Errorf("OnError heard %d failures, want %d (one per caller)", n, callers)
				}
				if fault == "SIGSTOP" {
					srv.resume()
				}
			})
		}
	}
}
