package redis

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestLateSettleConformance: on the buckets, a Settle's excess after the
// key has refilled (a full token bucket, an empty queue) is charged from
// now on the full bucket, on Redis as in memory, the key kept by both
// (not dropped at rest). Random bookings, delays (up to three times the
// bucket's refill) and excesses; the Settle's Decision and the decisions
// after it must match, field for field.
func TestLateSettleConformance(t *testing.T) {
	srv := ownServer(t)
	client := newClient(t, srv.addr, true)
	for _, a := range testAlgorithms {
		if !a.bucket {
			continue
		}
		for _, p := range a.conformance[:2] {
			c := a.conformanceCase(p)
			t.Run(c.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(25, uint64(p.capacity)))
				mc := ratelimit.NewManualClock(start)
				core, rds := pairFor(t, c, mc, client)
				refill := time.Duration(p.capacity) * c.step
				for trial := range 40 {
					key := string(rune('a' + trial%26))
					n := 1 + rng.IntN(c.limit)
					actual := n + 1 + rng.IntN(2*c.limit)
					rc, errc := core.(ratelimit.Taker).Take(bg, key, n)
					rr, errr := rds.(ratelimit.Taker).Take(bg, key, n)
					if errc != nil || errr != nil || rc.OK() != rr.OK() || rc.Decision() != rr.Decision() {
						t.Fatalf("trial %d: Take(%d): core %+v %v, redis %+v %v", trial, n, rc.Decision(), errc, rr.Decision(), errr)
					}
					if !rc.OK() {
						mc.Advance(4 * refill)
						continue
					}
					mc.Advance(time.Duration(rng.Int64N(int64(3*refill) + 1)))
					dc, errc := rc.Settle(actual)
					dr, errr := rr.Settle(actual)
					if errc != nil || errr != nil || dc != dr {
						t.Fatalf("trial %d: Settle(%d) of %d: core %+v %v, redis %+v %v", trial, actual, n, dc, errc, dr, errr)
					}
					for i := range 3 {
						mc.Advance(time.Duration(rng.Int64N(int64(c.step) + 1)))
						dc, errc := core.AllowN(bg, key, 1)
						dr, errr := rds.AllowN(bg, key, 1)
						if errc != nil || errr != nil || dc != dr {
							t.Fatalf("trial %d, after the Settle %d: core %+v %v, redis %+v %v", trial, i, dc, errc, dr, errr)
						}
					}
					mc.Advance(time.Duration(actual+1) * c.step * 2)
				}
			})
		}
	}
}
