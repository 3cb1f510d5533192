package ratelimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// Invariant: a reload keeps the state of every rule whose identity did
// not change, starts every changed rule afresh, and refuses a bad
// configuration whole, leaving the old rules serving.
func TestRulesReloadKeepsState(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(t0)
	rs, err := ParseRules("POST /posts: 1/h per user as posts\n*: 2/h per ip as ip", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ann := Subject{User: "ann", IP: "192.0.2.1"}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); !d.Allowed {
		t.Fatal("first post denied")
	}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); d.Allowed {
		t.Fatal("second post allowed")
	}
	// posts unchanged; the ip rule's rate changes; a new class appears.
	if err := rs.Reload("POST /posts: 1/h per user as posts\n*: 5/h per ip as ip\nGET /x: 1/h global"); err != nil {
		t.Fatal(err)
	}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); d.Allowed || d.At(0).Allowed {
		t.Fatalf("ann was exhausted on the unchanged rule before the reload, allowed after: %+v", d)
	}
	if d, _ := rs.Check(ctx, "GET /y", ann, 1); !d.Allowed || d.At(0).Remaining != 4 {
		t.Fatalf("the changed ip rule should start afresh at 5: %+v", d)
	}
	if got := strings.Join(rs.Classes(), "|"); got != "GET /x|POST /posts" {
		t.Errorf("Classes = %q", got)
	}
	// A bad configuration: refused, naming the line; the old rules serve.
	err = rs.Reload("POST /posts: 1/h per user as posts\n*: 5/h per nobody")
	if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad reload: %v", err)
	}
	if got := strings.Join(rs.Classes(), "|"); got != "GET /x|POST /posts" {
		t.Errorf("after a refused reload, Classes = %q", got)
	}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); d.Allowed {
		t.Fatal("after a refused reload, the exhausted key is allowed")
	}
	// A rule whose burst changes starts afresh.
	if err := rs.Reload("POST /posts: 1/h burst 2 per user as posts"); err != nil {
		t.Fatal(err)
	}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); !d.Allowed {
		t.Fatal("changed rule should start afresh")
	}
	// Replace keeps state the same way.
	rules := rs.For("POST /posts").Rules()
	rules[0].Limiter = nil
	if err := rs.Replace(rules); err != nil {
		t.Fatal(err)
	}
	if d, _ := rs.Check(ctx, "POST /posts", ann, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Replace with the same rule lost its state: %+v", d)
	}
	if err := rs.Snapshot().Reload("*: 1/s global"); !errors.Is(err, ErrFrozenRules) {
		t.Errorf("Reload of a snapshot: %v", err)
	}
}

// Under concurrent checks and reloads (-race): every lookup sees one whole
// configuration, and the rule common to both keeps exact count: a key
// with burst B is allowed exactly B times over the whole run.
func TestRulesReloadConcurrent(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(t0)
	const a = "GET /x: 1/h per ip as a-x\n*: 1000000/h global as a-all\nPOST /y: 1/h global as a-y\nkeep: 50/h per user as keep"
	const b = "GET /x: 2/h per ip as b-x\n*: 1000000/h global as b-all\nkeep: 50/h per user as keep"
	rs, err := ParseRules(a, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				set := rs.For("GET /x")
				rules := set.Rules()
				prefix := rules[0].Name[:2]
				for _, r := range rules {
					if !strings.HasPrefix(r.Name, prefix) {
						t.Errorf("goroutine %d: mixed rules %q and %q", g, rules[0].Name, r.Name)
						return
					}
				}
				if d, err := rs.Check(ctx, "keep", Subject{User: "ann"}, 1); err != nil {
					t.Error(err)
					return
				} else if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 200 {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if err := rs.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if err := rs.Reload("GET /x: 1/s per bogus"); err == nil {
				t.Fatal("bad config accepted")
			}
		}
	}
	close(stop)
	wg.Wait()
	if allowed != 50 {
		t.Errorf("the unchanged rule allowed %d over the run, want exactly its burst 50", allowed)
	}
}

func TestRulesForAllocsAfterReload(t *testing.T) {
	rs, err := ParseRules("GET /x: 1/ns per ip\n*: 1/ns global")
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Reload("GET /x: 2/ns per ip\n*: 1/ns global"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		rs.Check(context.Background(), "GET /x", Subject{IP: "192.0.2.1"}, 1)
		rs.Snapshot()
	}); n != 0 {
		t.Errorf("Check after a reload allocates %v", n)
	}
}
