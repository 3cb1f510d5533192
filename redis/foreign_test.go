package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestForeignValues puts into each algorithm's keys values the limiter
// could not have written: another type, text, a far-future instant with no
// TTL (which used to deny the key forever), counts above any limit the
// backend allows. Each is corrupt: the hook hears
// ErrCorruptState, the key starts afresh (a new key's decision), and no
// key is left without a TTL, on a step, a peek, a booking or a cancel. (A
// window start off the epoch's boundaries and more events than the limit
// are what a change of the rate leaves, and are read as such.)
func TestForeignValues(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	ctx := context.Background()
	// Both limiters read one manual clock (passed to the scripts), so that
	// the corrupted key's decision and a new key's are comparable exactly.
	mc := ratelimit.NewManualClock(start)
	clock := []Option{WithClock(mc), withClockTime(60_000)}
	now := start.UnixNano()
	far := strconv.FormatInt(now+100*365*24*int64(time.Hour), 10)
	const w = int64(time.Minute)
	const day = 24 * float64(time.Hour)
	aligned := strconv.FormatInt(windowStart(now, w), 10)
	const huge = "1099511627777" // 2^40 + 1
	type value struct {
		name string
		set  func(key string) error // writes the foreign value into key
	}
	str := func(v string) func(string) error {
		return func(k string) error { return c.Set(ctx, k, v, 0).Err() }
	}
	list := func(k string) error { return c.RPush(ctx, k, "x").Err() }
	type algo struct {
		name     string
		build    func(prefix string, opts ...Option) (ratelimit.Limiter, error)
		suffixes []string
		values   []value
	}
	rate := ratelimit.Per(5, time.Minute)
	long := ratelimit.Per(slPackedMax+1, time.Minute)
	algos := []algo{
		{"TokenBucket", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewTokenBucket(c, rate, 5, append(o, WithPrefix(p))...)
		}, []string{":tb"}, []value{{"far", str(far + " 0")}, {"text", str("hello")}, {"fraction", str(aligned + " 99")}, {"list", list}}},
		{"LeakyBucket", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewLeakyBucket(c, rate, 5, append(o, WithPrefix(p))...)
		}, []string{":lb"}, []value{{"far", str(far + " 0")}, {"text", str("1 2 3")}, {"list", list}}},
		{"FixedWindow", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewFixedWindow(c, rate, append(o, WithPrefix(p))...)
		}, []string{":fw"}, []value{{"far", str(far + " 5")}, {"count", str(aligned + " " + huge)}, {"list", list}}},
		{"SlidingWindowCounter", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingWindowCounter(c, rate, append(o, WithPrefix(p))...)
		}, []string{":swc"}, []value{{"far", str(far + " 5 5")}, {"count", str(aligned + " 0 " + huge)}, {"list", list}}},
		{"SlidingLog", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, rate, append(o, WithPrefix(p))...)
		}, []string{":slp", ":sl", ":slf"}, []value{
			{"entry ahead", str(packedLog(now, 0, 40*day, 40*day))}, // newer than a booking can be
			{"floor ahead", str(packedLog(now, 70*day))},
			{"fraction", str(packedLog(now, 0, 1, 0.5))},
			{"fraction read", str(packedLog(now, 0, -4.5, -3, -2.5, -1))}, // where the searches read
			{"huge offset", str(packedLog(now, 0, -1<<54, -3, -1<<54, -1))},
			{"truncated", str(packedLog(now, 0, 1)[:20])},
			{"short header", str(packedLog(now, 0)[:10])},
			{"bad tag", str("\x02" + packedLog(now, 0, 1)[1:])},
			{"base ahead", str(packedLog(now+int64(110*day), 0))},
			{"too many", str(packedLog(now, 0, make([]float64, 1<<20+1)...))},
			{"text", str("x")},
			{"list", list},
		}},
		// The log the previous version kept, read when there is none.
		{"SlidingLog/list", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, rate, append(o, WithPrefix(p))...)
		}, []string{":sl", ":slf", ":slp"}, []value{
			{"far entry", func(k string) error { return c.RPush(ctx, k, far, far, far, far, far).Err() }},
			{"text entry", func(k string) error { return c.RPush(ctx, k, "x").Err() }},
			{"string", str("x")},
		}},
		// Above slPackedMax the log is a list: what the list format
		// detects, in its own keys and in a string log to convert.
		{"SlidingLog/list/long", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, long, append(o, WithPrefix(p))...)
		}, []string{":sl", ":slf", ":slp"}, []value{
			{"far entry", func(k string) error { return c.RPush(ctx, k, far, far, far, far, far).Err() }},
			{"text entry", func(k string) error { return c.RPush(ctx, k, "1", "x", "2").Err() }},
			{"string", str("x")},
		}},
		{"SlidingLog/long", func(p string, o ...Option) (ratelimit.Limiter, error) {
			return NewSlidingLog(c, long, append(o, WithPrefix(p))...)
		}, []string{":slp", ":sl", ":slf"}, []value{
			{"entry ahead", str(packedLog(now, 0, 40*day, 40*day))},
			{"floor ahead", str(packedLog(now, 70*day))},
			{"fraction", str(packedLog(now, 0, -4.5, -3, -2, -1))}, // read only to convert
			{"huge offset", str(packedLog(now, 0, -3, -1<<54, -1))},
			{"truncated", str(packedLog(now, 0, 1)[:20])},
			{"bad tag", str("\x02" + packedLog(now, 0, 1)[1:])},
			{"text", str("x")},
			{"list", list},
		}},
	}
	for _, a := range algos {
		for _, v := range a.values {
			for _, how := range []string{"allow", "peek", "reserve", "cancel"} {
				t.Run(a.name+"/"+v.name+"/"+how, func(t *testing.T) {
					prefix := testPrefix(t)
					var hooked []error
					lim, err := a.build(prefix, append(clock, WithOnError(func(_ string, err error) { hooked = append(hooked, err) }))...)
					if err != nil {
						t.Fatal(err)
					}
					fresh, err := a.build(prefix+"fresh:", clock...)
					if err != nil {
						t.Fatal(err)
					}
					var res *ratelimit.Reservation
					if how == "cancel" { // a booking made before the value was replaced
						if res, err = lim.Reserve(ctx, "k", 1); err != nil || !res.OK() {
							t.Fatalf("Reserve: %v %v", res, err)
						}
					}
					for _, sfx := range a.suffixes {
						c.Del(ctx, redisKey(prefix, "k", sfx))
					}
					if err := v.set(redisKey(prefix, "k", a.suffixes[0])); err != nil {
						t.Fatal(err)
					}
					if strings.HasPrefix(a.name, "SlidingLog/list") && v.name == "far entry" {
						c.Set(ctx, redisKey(prefix, "k", ":slf"), far, 0)
					}
					n := 1
					switch how {
					case "peek":
						n = 0
						fallthrough
					case "allow":
						got, err := lim.AllowN(ctx, "k", n)
						want, _ := fresh.AllowN(ctx, "k", n)
						if err != nil || got != want {
							t.Errorf("AllowN(%d) = %+v %v, want a new key's %+v", n, got, err, want)
						}
					case "reserve":
						got, err := lim.Reserve(ctx, "k", 1)
						want, _ := fresh.Reserve(ctx, "k", 1)
						if err != nil || got.OK() != want.OK() || got.Decision() != want.Decision() || got.Delay() > 0 {
							t.Errorf("Reserve = %+v %v, want a new key's %+v", got.Decision(), err, want.Decision())
						}
					case "cancel":
						res.Cancel()
					}
					if len(hooked) != 1 || !errors.Is(hooked[0], ErrCorruptState) {
						t.Errorf("hook heard %v, want one ErrCorruptState", hooked)
					}
					for _, sfx := range a.suffixes {
						k := redisKey(prefix, "k", sfx)
						if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl == -1 {
							t.Errorf("%s left without a TTL (%v %v)", k, ttl, err)
						}
						if typ := c.Type(ctx, k).Val(); typ != "none" && typ != map[bool]string{true: "list", false: "string"}[sfx == ":sl"] {
							t.Errorf("%s left holding a %s", k, typ)
						}
					}
				})
			}
		}
	}
}

// packedLog returns a sliding log's value as the script writes it (see
// slFormat): based at the second of nowNs, with the floor and entries
// given as nanoseconds after that instant (the floor 0 for none).
func packedLog(nowNs int64, floor float64, entries ...float64) string {
	base := nowNs / 1e9
	off := float64(nowNs - base*1e9)
	fo := -float64(1 << 62)
	if floor != 0 {
		fo = floor + off
	}
	b := []byte{1}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(base)))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(fo))
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e+off))
	}
	return string(b)
}
