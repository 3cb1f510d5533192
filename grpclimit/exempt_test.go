package grpclimit

import (
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
