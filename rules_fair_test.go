package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fairFlood is one request of a flood schedule: at instant at (ns after
// the schedule's start), by tenant who (0 is the flooder).
type fairFlood struct {
	at  int64
	who int
}

// fairFloodSchedule: nine tenants asking share a window each, evenly
// spaced at random phases, and tenant 0 asking 100 times that, for
// windows windows of one second; requests at one instant in random order.
func fairFloodSchedule(seed uint64, share, windows int) []fairFlood {
	rng := rand.New(rand.NewPCG(seed, 7))
	sec := int64(time.Second)
	var s []fairFlood
	for w := range windows {
		for i := range 10 {
			k := share
			if i == 0 {
				k = 100 * share
			}
			phase := rng.Int64N(sec / int64(k))
			for j := range k {
				s = append(s, fairFlood{int64(w)*sec + phase + int64(j)*(sec/int64(k)), i})
			}
		}
	}
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	slices.SortStableFunc(s, func(a, b fairFlood) int { return cmp.Compare(a.at, b.at) })
	return s
}

// runFairFlood sends the schedule through rs.Check on clock (which starts
// at a second's start) and returns what each tenant was allowed, per window.
func runFairFlood(t *testing.T, rs *Rules, clock *ManualClock, s []fairFlood, windows int) [][10]int {
	t.Helper()
	start := clock.Now()
	got := make([][10]int, windows)
	for _, r := range s {
		clock.Set(start.Add(time.Duration(r.at)))
		d, err := rs.Check(context.Background(), "GET /", Subject{User: "u" + strconv.Itoa(r.who)}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got[r.at/int64(time.Second)][r.who]++
		}
	}
	return got
}

// Invariant: under "global fair per user", each of nine users asking its
// share (a tenth of the limit) gets at least 95% of it while a tenth user
// floods at 100 times its share, over every window after the first (in
// the first nobody has a guarantee yet); without "fair" the flooder takes
// most of the limit. The shared bound holds either way.
func TestRulesFairFlood(t *testing.T) {
	const share, windows = 100, 6
	for seed := uint64(1); seed <= 3; seed++ {
		s := fairFloodSchedule(seed, share, windows)
		for _, fair := range []bool{true, false} {
			config := "*: 1000/s global"
			if fair {
				config += " fair per user"
			}
			clock := NewManualClock(t0)
			rs, err := ParseRules(config, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			got := runFairFlood(t, rs, clock, s, windows)
			worst, flooder, total := share*(windows-1), 0, 0
			for i := 1; i < 10; i++ {
				each := 0
				for w := 1; w < windows; w++ {
					each += got[w][i]
				}
				worst = min(worst, each)
			}
			for w := range windows {
				flooder += got[w][0]
				for i := range 10 {
					total += got[w][i]
				}
			}
			want := share * (windows - 1)
			t.Logf("seed %d fair %v: worst of the nine %d of %d (%.1f%%), flooder %d", seed, fair, worst, want, 100*float64(worst)/float64(want), flooder)
			if total > 1000*windows+1000 { // burst 1000 plus 1000 a second
				t.Errorf("seed %d fair %v: %d allowed in all, past the shared bound", seed, fair, total)
			}
			if fair && worst*100 < want*95 {
				t.Errorf("seed %d: fair: one of the nine got %d of its share %d", seed, worst, want)
			}
			if !fair && worst*100 >= want*50 {
				t.Errorf("seed %d: not fair: the worst of the nine got %d of %d; the flood should crowd them out", seed, worst, want)
			}
		}
	}
}

// Invariant: bad fair modifiers are refused, naming the fault, with an
// error matching ErrInvalidRule; none panics.
func TestRulesFairBadInput(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{"*: 10/s per user fair per user", "scope must be global"},
		{"*: 10/s per ip fair per user", "scope must be global"},
		{"*: 10/s global fair per global", "splits nothing"},
		{"*: 10/s global fair global", "splits nothing"},
		{"*: 10/s global fair", `"fair" must be followed`},
		{"*: 10/s global fair per host", `"fair" must be followed`},
		{"*: 10/s global fair per", `"fair" must be followed`},
	} {
		_, err := ParseRules(c.config)
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRules(%q) = %v, want an ErrInvalidRule saying %q", c.config, err, c.want)
		}
	}
	tb, err := NewTokenBucket(PerSecond(10), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Rule{
		{Class: "*", Rate: PerSecond(10), Scope: Global, Fair: Global},
		{Class: "*", Rate: PerSecond(10), Scope: Global, Fair: Scope(9)},
		{Class: "*", Rate: PerSecond(10), Scope: PerUser, Fair: PerIP},
		{Class: "*", Rate: PerSecond(10), Scope: Global, Fair: PerUser, Limiter: tb},
	} {
		if _, err := NewRules([]Rule{r}); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("NewRules(%+v) = %v, want ErrInvalidRule", r, err)
		}
	}
}

// Invariant: a fair rule's text reads back as the same rule, modifier,
// penalty, shadow flag and name included, and its default name says it
// is fair.
func TestRulesFairText(t *testing.T) {
	for _, line := range []string{
		"*: 1000/s global fair per user",
		"*: 1000/s burst 50 global fair per ip",
		"GET /x: 5/m global FAIR PER USER block 1m after 3 shadow as x",
		"GET /x: 5/m global block 1m after 3 within 2m fair per ip",
	} {
		r, err := parseRule(line)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Fair == 0 {
			t.Fatalf("%q: not fair", line)
		}
		back, err := parseRule(r.text())
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Errorf("%q written %q reads back %+v, %v; want %+v", line, r.text(), back, err, r)
		}
	}
	rs, err := ParseRules("*: 10/s global fair per user")
	if err != nil {
		t.Fatal(err)
	}
	if r := rs.For("GET /").Rules()[0]; r.Name != "* 10/s global fair per user" || r.KeyScope() != PerUser {
		t.Errorf("name %q, key scope %v", r.Name, r.KeyScope())
	}
}

// Invariant: a request without the tenant (no user under "fair per
// user") is refused with ErrNoKey and records nothing: it never bypasses
// the shared limit, nor takes from it.
func TestRulesFairNoTenant(t *testing.T) {
	clock := NewManualClock(t0)
	rs, err := ParseRules("*: 2/s global fair per user\n*: 5/s global fair per ip as ipfair", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		if _, err := rs.Check(ctx, "GET /", Subject{IP: "192.0.2.1"}, 1); !errors.Is(err, ErrNoKey) {
			t.Fatalf("no user: %v, want ErrNoKey", err)
		}
		if _, err := rs.Check(ctx, "GET /", Subject{User: "ann"}, 1); !errors.Is(err, ErrNoKey) {
			t.Fatalf("no ip: %v, want ErrNoKey", err)
		}
	}
	d, err := rs.Check(ctx, "GET /", Subject{User: "ann", IP: "192.0.2.1"}, 0)
	if err != nil || d.At(0).Remaining != 2 || d.At(1).Remaining != 5 {
		t.Fatalf("refused requests took from the shared limits: %+v, %v", d, err)
	}
}

// Invariant: a reload that keeps a fair rule keeps its Fair and its
// shared bucket (an exhausted limit stays exhausted, a tenant's
// guarantee stays), whatever else changes; a change of its modifier
// builds it afresh.
func TestRulesFairReload(t *testing.T) {
	clock := NewManualClock(t0)
	ctx := context.Background()
	rs, err := ParseRules("*: 4/s global fair per user as shared", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	before := rs.For("*").Rules()[0].Limiter
	if _, ok := before.(*Fair); !ok {
		t.Fatalf("a fair rule's limiter is a %T", before)
	}
	for range 4 {
		if d, _ := rs.Check(ctx, "GET /", Subject{User: "ann"}, 1); !d.Allowed {
			t.Fatal("ann refused within the limit")
		}
	}
	if err := rs.Reload("*: 4/s global fair per user as shared\nPOST /x: 1/s per user"); err != nil {
		t.Fatal(err)
	}
	if l := rs.For("*").Rules()[0].Limiter; l != before {
		t.Fatal("an unrelated reload rebuilt the fair rule's limiter")
	}
	if d, _ := rs.Check(ctx, "GET /", Subject{User: "bob"}, 1); d.Allowed {
		t.Fatal("the shared limit was exhausted before an unrelated reload and allows after it")
	}
	if err := rs.Reload("*: 4/s global fair per ip as shared"); err != nil {
		t.Fatal(err)
	}
	if l := rs.For("*").Rules()[0].Limiter; l == before {
		t.Fatal("a change of the fair modifier kept the old Fair")
	}
	if d, _ := rs.Check(ctx, "GET /", Subject{IP: "192.0.2.1"}, 1); !d.Allowed || d.At(0).Remaining != 3 {
		t.Fatalf("a rebuilt fair rule should start with a full bucket: %+v", d)
	}
	if err := rs.Reload("*: 4/s global as shared"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rs.For("*").Rules()[0].Limiter.(*Fair); ok {
		t.Fatal("a rule no longer fair is still asked through a Fair")
	}
}

// Invariant: Check stays all or nothing with a fair rule among others: a
// request the class's own rule refuses takes nothing from the shared
// limit, and one the fair rule refuses takes nothing from the class's
// rule; each rule's decision is reported at its index.
func TestRulesFairAllOrNothing(t *testing.T) {
	clock := NewManualClock(t0)
	ctx := context.Background()
	rs, err := ParseRules("POST /x: 1/s per user as own\n*: 3/s global fair per user as fair", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ann, bob := Subject{User: "ann"}, Subject{User: "bob"}
	if d, _ := rs.Check(ctx, "POST /x", ann, 1); !d.Allowed || d.Len() != 2 || d.At(1).Remaining != 2 {
		t.Fatalf("first: %+v", d)
	}
	d, _ := rs.Check(ctx, "POST /x", ann, 1) // own refuses
	if d.Allowed || d.At(0).Allowed {
		t.Fatalf("second by ann: %+v", d)
	}
	if p, _ := rs.Check(ctx, "GET /", bob, 0); p.At(0).Remaining != 2 {
		t.Fatalf("a request refused by the class's rule took from the shared limit: %d left, want 2", p.At(0).Remaining)
	}
	for range 2 {
		if d, _ := rs.Check(ctx, "GET /", bob, 1); !d.Allowed {
			t.Fatal("bob refused within the shared limit")
		}
	}
	if d, _ := rs.Check(ctx, "POST /x", bob, 1); d.Allowed || d.At(1).Allowed || !d.At(0).Allowed {
		t.Fatalf("the shared limit is empty; want the fair rule alone to refuse: %+v", d)
	}
	clock.Advance(time.Second/3 + 1) // one more in the shared bucket; bob's own untouched
	if d, _ := rs.Check(ctx, "POST /x", bob, 1); !d.Allowed {
		t.Fatalf("bob's own rule was charged by the refused request: %+v", d)
	}
}

// Invariant: a shadow fair rule never refuses and books what the fair
// rule would; a fair rule with a penalty blocks the tenant it keeps
// refusing, and only that tenant.
func TestRulesFairShadowAndPenalty(t *testing.T) {
	clock := NewManualClock(t0)
	ctx := context.Background()
	rs, err := ParseRules("*: 2/s global fair per user shadow", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if d, err := rs.Check(ctx, "GET /", Subject{User: "ann"}, 1); err != nil || !d.Allowed {
			t.Fatalf("a shadow rule refused: %+v, %v", d, err)
		}
	}
	rs, err = ParseRules("*: 10/s global fair per user block 1h after 3", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	// Window 0: ann floods, bob asks 2; window 1: both guaranteed 5.
	for range 20 {
		rs.Check(ctx, "GET /", Subject{User: "ann"}, 1)
	}
	rs.Check(ctx, "GET /", Subject{User: "bob"}, 1)
	clock.Advance(time.Second)
	refused := 0
	for range 40 {
		if d, _ := rs.Check(ctx, "GET /", Subject{User: "ann"}, 1); !d.Allowed {
			refused++
		}
	}
	box := rs.For("*").Rules()[0].Limiter.(*PenaltyBox)
	if box.Blocked("ann") <= 0 || box.Blocked("bob") != 0 {
		t.Fatalf("after %d refusals: ann blocked %v, bob %v", refused, box.Blocked("ann"), box.Blocked("bob"))
	}
	if d, _ := rs.Check(ctx, "GET /", Subject{User: "bob"}, 1); !d.Allowed {
		t.Fatalf("bob refused while ann is blocked: %+v", d)
	}
}

// Invariant: Check through a fair rule does not allocate for a known
// tenant within its share.
func TestRulesFairAllocs(t *testing.T) {
	clock := NewManualClock(t0)
	rs, err := ParseRules("*: 1000000/s global fair per user", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	who := Subject{User: "ann"}
	rs.Check(ctx, "GET /", who, 1)
	if a := testing.AllocsPerRun(100, func() { rs.Check(ctx, "GET /", who, 1) }); a != 0 {
		t.Errorf("Check allocates %v times", a)
	}
}
