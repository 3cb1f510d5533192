package ratelimit_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A global limit of 100 per second shared by tenants: one floods, two ask
// 30 a second. In the first window nobody is counted yet and the flooder
// takes most of it. From the second on, each of the three counted tenants
// has a share of 33, and is guaranteed the least of that and what it asked
// in the window before: alice and bob get all they ask, and the flooder
// the rest.
func ExampleFair() {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	global, _ := ratelimit.NewFixedWindow(ratelimit.PerSecond(100), ratelimit.WithClock(clk))
	fair, _ := ratelimit.NewFair(global, ratelimit.PerSecond(100), ratelimit.WithFairClock(clk))

	for window := range 3 {
		got := map[string]int{}
		// 1000 asks from the flooder and 30 from each of the others,
		// spread over the second.
		for i := range 1000 {
			clk.Set(time.Unix(1_700_000_000+int64(window), int64(i)*int64(time.Millisecond)))
			if fair.Allow("flooder") {
				got["flooder"]++
			}
			if i%33 == 0 && i < 990 {
				for _, t := range []string{"alice", "bob"} {
					if fair.Allow(t) {
						got[t]++
					}
				}
			}
		}
		share, active := fair.Share()
		fmt.Printf("window %d: flooder %d, alice %d, bob %d (share %d of %d active)\n",
			window, got["flooder"], got["alice"], got["bob"], share, active)
	}
	// Output:
	// window 0: flooder 94, alice 3, bob 3 (share 100 of 3 active)
	// window 1: flooder 40, alice 30, bob 30 (share 33 of 3 active)
	// window 2: flooder 40, alice 30, bob 30 (share 33 of 3 active)
}

// Critical calls keep their reserve while sheddable traffic saturates the
// limit.
func ExampleWithClasses() {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	global, _ := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	fair, err := ratelimit.NewFair(global, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithClasses(
			ratelimit.Class{Name: "critical", Reserved: 4},
			ratelimit.Class{Name: "sheddable", Reserved: 0},
		))
	if err != nil {
		fmt.Println(err)
		return
	}
	count := func(tenant string, p ratelimit.Priority, k int) (n int) {
		for range k {
			if fair.AllowPriority(tenant, p) {
				n++
			}
		}
		return n
	}
	fmt.Println("sheddable:", count("export", 1, 100), "of 100")
	fmt.Println("critical:", count("payments", 0, 4), "of 4")
	// Output:
	// sheddable: 6 of 100
	// critical: 4 of 4
}

// Decisions counted per plan: the group function maps a tenant to one of a
// few names, and the observer sees the plan, never the tenant.
func ExampleWithTenantGroups() {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	global, _ := ratelimit.NewFixedWindow(ratelimit.PerSecond(5), ratelimit.WithClock(clk))
	counts := map[string][2]int{}
	plan := func(tenant string) int {
		if strings.HasPrefix(tenant, "paid:") {
			return 1
		}
		return 0
	}
	fair, err := ratelimit.NewFair(global, ratelimit.PerSecond(5), ratelimit.WithFairClock(clk),
		ratelimit.WithTenantGroups([]string{"free", "paid"}, plan),
		ratelimit.WithFairObserver(ratelimit.ObserverFunc(func(e ratelimit.Event) {
			if e.Kind == ratelimit.EventFairGroup {
				c := counts[e.Key]
				if e.Allowed {
					c[0]++
				} else {
					c[1]++
				}
				counts[e.Key] = c
			}
		})))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tenant := range []string{"free:ann", "free:bob", "paid:cy", "free:ann", "paid:cy", "free:dee", "paid:eve"} {
		fair.Allow(tenant)
	}
	for _, g := range []string{"free", "paid"} {
		fmt.Printf("%s: %d allowed, %d denied\n", g, counts[g][0], counts[g][1])
	}
	// Output:
	// free: 3 allowed, 1 denied
	// paid: 2 allowed, 1 denied
}
