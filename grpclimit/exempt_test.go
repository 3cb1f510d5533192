package grpclimit

import (
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The rules' exemptions hold through RulesLimit, read from the peer as
// the per-IP key is: exempt calls run unlimited with no metadata; a
// forwarded address from an untrusted peer exempts nothing.
func TestRulesLimitExempt(t *testing.T) {
	for _, c := range []struct {
		name, config string
		md           []string
		exempt       bool
	}{
		{"peer inside the prefix", "exempt 127.0.0.0/8\n*: 1/h global", nil, true},
		{"peer outside", "exempt 10.0.0.0/8\n*: 1/h global", nil, false},
		{"spoofed x-forwarded-for from an untrusted peer", "exempt 10.0.0.0/8\n*: 1/h global", []string{"x-forwarded-for", "10.0.0.1"}, false},
		{"exempt user", "exempt user ops\n*: 1/h global", []string{"x-user", "ops"}, true},
		{"other user", "exempt user ops\n*: 1/h global", []string{"x-user", "ann"}, false},
		{"no user, no per-user rule: limited", "exempt user ops\n*: 1/h global", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rules, err := ratelimit.ParseRules(c.config, ratelimit.WithClock(ratelimit.NewManualClock(t0)))
			if err != nil {
				t.Fatal(err)
			}
			conn, _ := serve(t, serverOpts(RulesLimit(rules, WithUser(ByMetadata("x-user")))))
			ctx := metadata.AppendToOutgoingContext(testCtx(t), c.md...)
			for i := range 3 {
				var md metadata.MD
				err := say(ctx, conn, methodSay, grpc.Header(&md))
				switch {
				case c.exempt && (err != nil || len(md.Get(MDRateLimit)) != 0):
					t.Fatalf("call %d: exempt, got %v, metadata %v", i, err, md)
				case !c.exempt && i > 0 && status.Code(err) != codes.ResourceExhausted:
					t.Fatalf("call %d: not exempt, got %v past an exhausted limit", i, err)
				}
			}
		})
	}
	rules, _ := ratelimit.ParseRules("exempt user ops\n*: 1/h global")
	defer func() {
		if recover() == nil {
			t.Error("user exemption without WithUser: no panic")
		}
	}()
	RulesLimit(rules)
}

// RulesLimit follows a reload: an unchanged rule keeps its state, a new
// class applies from the next call, and concurrent calls (-race) see one
// whole configuration each.
func TestRulesLimitReload(t *testing.T) {
	clock := ratelimit.NewManualClock(t0)
	const a = "/test.Echo/Say: 1/h global as say\n*: 1000000/h global as a-all"
	const b = "/test.Echo/Say: 1/h global as say\n/test.Other/Ping: 1000000/h global as b-ping\n*: 1000000/h global as b-all"
	rules, err := ratelimit.ParseRules(a, ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := serve(t, serverOpts(RulesLimit(rules)))
	ctx := testCtx(t)
	if err := say(ctx, conn, methodSay); err != nil {
		t.Fatal(err)
	}
	if err := rules.Reload(b); err != nil {
		t.Fatal(err)
	}
	if err := say(ctx, conn, methodSay); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("exhausted before the reload; after: %v", err)
	}
	var md metadata.MD
	if err := say(ctx, conn, methodPing, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	if got := md.Get(MDRateLimitPolicy); len(got) != 1 || !strings.Contains(got[0], `"b-ping"`) {
		t.Fatalf("new class not followed: %q", got)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var md metadata.MD
				if err := say(ctx, conn, methodPing, grpc.Header(&md)); err != nil {
					t.Error(err)
					return
				}
				p := strings.Join(md.Get(MDRateLimitPolicy), "")
				if p != `"a-all";q=1000000;w=3600` && p != `"b-ping";q=1000000;w=3600, "b-all";q=1000000;w=3600` {
					t.Errorf("policy %q is neither configuration", p)
					return
				}
			}
		}()
	}
	for i := range 100 {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if err := rules.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
