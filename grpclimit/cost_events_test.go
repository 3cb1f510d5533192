package grpclimit

import (
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RulesLimit with a cost reports one event per rule, as without a cost:
// six calls under a per-ip burst of 3 and a global burst of 100 count six
// global decisions allowed, and per ip three allowed and three denied.
func TestCostRulesLimitEvents(t *testing.T) {
	for _, cost := range []bool{false, true} {
		clock := ratelimit.NewManualClock(t0)
		c := &ratelimit.Counter{}
		rules, err := ratelimit.ParseRules("*: 1/h burst 3 per ip as per-ip\n*: 1/h burst 100 global as global",
			ratelimit.WithClock(clock), ratelimit.WithObserver(c))
		if err != nil {
			t.Fatal(err)
		}
		var opts []Option
		if cost {
			opts = append(opts, WithCost(costMD))
		}
		conn, _ := serve(t, serverOpts(RulesLimit(rules, opts...)))
		ctx := testCtx(t)
		for i := range 6 {
			err := say(withCost(ctx, 1), conn, methodSay)
			if (err == nil) != (i < 3) || (err != nil && status.Code(err) != codes.ResourceExhausted) {
				t.Fatalf("cost %v, call %d: %v", cost, i, err)
			}
		}
		ip, global := c.Get("per-ip"), c.Get("global")
		if ip.Allowed != 3 || ip.Denied != 3 || global.Allowed != 6 || global.Denied != 0 {
			t.Errorf("cost %v: per-ip %+v, global %+v; want 3 allowed and 3 denied, 6 allowed", cost, ip, global)
		}
	}
}
