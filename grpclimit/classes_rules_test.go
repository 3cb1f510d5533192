package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A rule with classes works end to end through RulesLimit on a real gRPC
// server with WithPriority: while batch calls flood
// "*: 20/s global classes critical=5,batch", each second's first five
// critical calls pass; without WithPriority every call is of the lowest
// class and the flood leaves the critical ones nothing; a priority naming
// no class is an error, never a pass.
func TestRulesLimitClasses(t *testing.T) {
	for _, withPriority := range []bool{true, false} {
		clock := ratelimit.NewManualClock(t0)
		rules, err := ratelimit.ParseRules("*: 20/s global classes critical=5,batch", ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		var opts []Option
		if withPriority {
			opts = append(opts, WithPriority(func(ctx context.Context, _ string) ratelimit.Priority {
				md, _ := metadata.FromIncomingContext(ctx)
				switch v := md.Get("x-class"); {
				case len(v) == 1 && v[0] == "critical":
					return 0
				case len(v) == 1 && v[0] == "bogus":
					return 7
				}
				return 1
			}))
		}
		conn, _ := serve(t, serverOpts(RulesLimit(rules, opts...)))
		ctx := testCtx(t)
		call := func(class string) codes.Code {
			return status.Code(say(metadata.AppendToOutgoingContext(ctx, "x-class", class), conn, methodSay))
		}
		critOK := 0
		for sec := range 3 {
			clock.Set(t0.Add(time.Duration(sec) * time.Second))
			for range 40 {
				call("batch")
			}
			for range 5 {
				if call("critical") == codes.OK {
					critOK++
				}
			}
		}
		if withPriority {
			if critOK != 15 {
				t.Errorf("with WithPriority: %d of 15 critical calls passed under the flood, want all", critOK)
			}
			if code := call("bogus"); code == codes.OK || code == codes.ResourceExhausted {
				t.Errorf("a priority naming no class: %v, want an error", code)
			}
		} else if critOK != 0 {
			t.Errorf("without WithPriority: %d critical calls passed, want 0 (all of the lowest class)", critOK)
		}
		rules.Close()
	}
}
