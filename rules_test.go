package ratelimit

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const socialConfig = `
# A social network's limits: three per user and endpoint, one for all.
POST /posts:   1/s      per user
POST /likes:   5/s      per user   # 5 at once, then 5 a second
POST /friends: 150/day  per user   as friend requests
*:             10,000/s global
`

func TestParseRules(t *testing.T) {
	rs, err := ParseRules(socialConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if got, want := strings.Join(rs.Classes(), "|"), "POST /friends|POST /likes|POST /posts"; got != want {
		t.Errorf("Classes = %q, want %q", got, want)
	}
	want := []Rule{
		{Class: "POST /friends", Name: "friend requests", Rate: PerDay(150), Burst: 150, Scope: PerUser},
		{Class: "*", Name: "* 10000/s global", Rate: PerSecond(10000), Burst: 10000, Scope: Global},
	}
	got := rs.For("POST /friends").Rules()
	if len(got) != len(want) {
		t.Fatalf("Limits = %+v", got)
	}
	for i := range want {
		g := got[i]
		g.Limiter = nil
		if !reflect.DeepEqual(g, want[i]) {
			t.Errorf("rule %d = %+v, want %+v", i, g, want[i])
		}
		if got[i].Limiter == nil {
			t.Errorf("rule %d has no limiter", i)
		}
	}
	if l := rs.For("GET /").Rules(); len(l) != 1 || l[0].Class != "*" {
		t.Errorf("a class without rules gets %+v, want the * rule", l)
	}
	if l := rs.For("POST /posts").Rules(); len(l) != 2 || l[0].Name != "POST /posts 1/s per user" {
		t.Errorf("POST /posts rules: %+v", l)
	}
}

func TestParseRulesSyntax(t *testing.T) {
	good := []struct {
		line string
		want Rule
	}{
		{"GET /search: 30/m burst 10 per ip as search", Rule{Class: "GET /search", Name: "search", Rate: PerMinute(30), Burst: 10, Scope: PerIP}},
		{"GET example.com:8080/x:\t5 per 2s per USER", Rule{Class: "GET example.com:8080/x", Rate: Per(5, 2*time.Second), Burst: 5, Scope: PerUser}},
		{"*: 1_000/h Global as all of it", Rule{Class: "*", Name: "all of it", Rate: PerHour(1000), Burst: 1000, Scope: Global}},
	}
	for _, g := range good {
		rs, err := ParseRules(g.line)
		if err != nil {
			t.Errorf("%q: %v", g.line, err)
			continue
		}
		r := rs.For(g.want.Class).Rules()[0]
		r.Limiter = nil
		if g.want.Name == "" {
			g.want.Name = r.Name
		}
		if !reflect.DeepEqual(r, g.want) {
			t.Errorf("%q: got %+v, want %+v", g.line, r, g.want)
		}
	}
	bad := []struct {
		config string
		is     error
		says   string
	}{
		{"POST /posts 1/s per user", ErrInvalidRule, `line 1 ("POST /posts 1/s per user"): want`},
		{"\nPOST /posts: 1/s # no scope", ErrInvalidRule, `line 2 ("POST /posts: 1/s"): the rate must be followed by a scope`},
		{"POST /posts: 1/s per team", ErrInvalidRule, "scope"},
		{"POST /posts: per user", ErrInvalidRule, "no rate"},
		{"POST /posts: 0/s per user", ErrInvalidRate, "count must be positive"},
		{"POST /posts: 1/fortnight per user", ErrInvalidRate, "period"},
		{"POST /posts: 1/s burst x per user", ErrInvalidRule, "burst"},
		{"POST /posts: 1/s per user as", ErrInvalidRule, `"as" without a name`},
		{"a: 1/s global as x\nb: 2/s global as x", ErrInvalidRule, `duplicate name "x"`},
	}
	for _, b := range bad {
		_, err := ParseRules(b.config)
		if !errors.Is(err, b.is) || !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), b.says) {
			t.Errorf("%q: err = %v, want %v saying %q", b.config, err, b.is, b.says)
		}
	}
}

func TestNewRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		is   error
	}{
		{Rule{Rate: PerSecond(1), Scope: Global}, ErrInvalidRule},
		{Rule{Class: "x", Rate: PerSecond(1)}, ErrInvalidRule},
		{Rule{Class: "x", Rate: PerSecond(1), Scope: 9}, ErrInvalidRule},
		{Rule{Class: "x", Scope: Global}, ErrInvalidRate},
		{Rule{Class: "x", Rate: PerSecond(1), Burst: -1, Scope: Global}, ErrInvalidCapacity},
		{Rule{Class: "x", Rate: Every(time.Hour), Burst: 1 << 40, Scope: Global}, ErrInvalidCapacity},
	} {
		if _, err := NewRules([]Rule{tc.rule}); !errors.Is(err, tc.is) {
			t.Errorf("%+v: err = %v, want %v", tc.rule, err, tc.is)
		}
	}
	if _, err := NewRules([]Rule{{Class: "x", Rate: PerSecond(1), Scope: Global}}, WithShards(3)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("bad option: %v", err)
	}
}

// Rule errors say "ratelimit:" once, point at the rule (its line or index
// and its text), print spans in units a person reads, and match
// ErrInvalidRule as well as the sentinel of the fault.
func TestRuleErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{second(ParseRules("# logins\nPOST /login: 1/day burst 20000 per ip")), ErrInvalidCapacity,
			`ratelimit: invalid rule on line 2 ("POST /login: 1/day burst 20000 per ip"): invalid capacity: a capacity of 20000 at 1/day takes 54.8 years to refill, more than a bucket may span (2^60 ns, about 36.5 years)`},
		{second(ParseRules("GET /: 0/s global")), ErrInvalidRate,
			`ratelimit: invalid rule on line 1 ("GET /: 0/s global"): invalid rate "0/s": count must be positive`},
		{second(NewRules([]Rule{{Class: "a", Rate: PerSecond(1), Scope: Global}, {Class: "POST /login", Rate: PerDay(1), Burst: 20000, Scope: PerIP}})), ErrInvalidCapacity,
			`ratelimit: invalid rule 1 ("POST /login: 1/day burst 20000 per ip"): invalid capacity: a capacity of 20000 at 1/day takes 54.8 years to refill, more than a bucket may span (2^60 ns, about 36.5 years)`},
		{second(NewRules([]Rule{{Class: "x", Rate: PerSecond(1), Burst: -1, Scope: Global}})), ErrInvalidCapacity,
			`ratelimit: invalid rule 0 ("x: 1/s burst -1 global"): invalid capacity: burst -1 is negative`},
		{second(NewRules([]Rule{{Class: "x", Scope: Global}})), ErrInvalidRate,
			`ratelimit: invalid rule 0 ("x: 0/0s global"): invalid rate: 0 per 0s (count and period must be positive)`},
		{second(NewRules([]Rule{{Class: "x", Rate: PerSecond(1)}})), ErrInvalidRule,
			`ratelimit: invalid rule 0 ("x: 1/s Scope(0)"): scope must be PerUser, PerIP or Global, got Scope(0)`},
		{second(NewRules([]Rule{{Class: "x", Rate: PerSecond(1), Scope: Global}}, WithShards(3))), ErrInvalidOption,
			`ratelimit: invalid rule 0 ("x: 1/s global"): invalid option: shards must be a power of two in [1, 65536], got 3`},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("error\n %v\nwant\n %s", tc.err, tc.want)
		}
		if !errors.Is(tc.err, ErrInvalidRule) || !errors.Is(tc.err, tc.is) {
			t.Errorf("%v: does not match ErrInvalidRule and %v", tc.err, tc.is)
		}
	}
	long := "GET /" + strings.Repeat("x", 500) + ": 1/s per nobody"
	_, err := ParseRules(long)
	if err == nil || len(err.Error()) > 250 || strings.Count(err.Error(), "ratelimit:") != 1 {
		t.Errorf("long line: %v", err)
	}
}

func TestRuleWindow(t *testing.T) {
	for _, tc := range []struct {
		r    Rule
		want time.Duration
	}{
		{Rule{Rate: PerDay(150), Burst: 150}, 24 * time.Hour},
		{Rule{Rate: PerSecond(10), Burst: 20}, 2 * time.Second},
		{Rule{Rate: PerSecond(3), Burst: 1}, 333333334},
		{Rule{Rate: PerMinute(100), Burst: 10}, 6 * time.Second},
		{Rule{Rate: Per(1, 1<<62), Burst: 8}, 1<<63 - 1},
		{Rule{Rate: PerSecond(1)}, 0},
	} {
		if got := tc.r.Window(); got != tc.want {
			t.Errorf("%v burst %d: Window = %v, want %v", tc.r.Rate, tc.r.Burst, got, tc.want)
		}
	}
}

func TestRulesCheck(t *testing.T) {
	clock := NewManualClock(t0)
	rs, err := ParseRules(`
		POST /posts:   1/s      per user
		POST /likes:   5/s      per user
		POST /friends: 150/day  per user
		GET /feed:     2/s      per ip
		*:             3/s      global
	`, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	alice := Subject{User: "alice", IP: "192.0.2.1"}
	bob := Subject{User: "bob", IP: "192.0.2.2"}
	steps := []struct {
		at      time.Duration
		class   string
		who     Subject
		allowed bool
		retry   time.Duration
	}{
		{0, "POST /posts", alice, true, 0},
		{0, "POST /posts", alice, false, time.Second}, // per user: 1/s
		{0, "POST /posts", bob, true, 0},              // bob has his own
		{0, "POST /likes", alice, true, 0},            // global now empty (3 used)
		{0, "POST /likes", alice, false, 333333334},   // denied by global
		{time.Second, "POST /posts", alice, true, 0},
		{time.Second, "GET /feed", bob, true, 0},
		{time.Second, "GET /other", bob, true, 0}, // only the global rule
		{time.Second, "GET /other", bob, false, 333333334},
	}
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		d, err := rs.Check(ctx, s.class, s.who, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allowed || d.RetryAfter != s.retry {
			t.Errorf("step %d (%v %s %s): got %+v, want allowed=%v retry=%v", i, s.at, s.class, s.who.User, d, s.allowed, s.retry)
		}
		if d.Len() != len(rs.For(s.class).Rules()) {
			t.Errorf("step %d: %d decisions for %d rules", i, d.Len(), len(rs.For(s.class).Rules()))
		}
		if j := d.Strictest(); d.Limit != d.At(j).Limit || d.Remaining != d.At(j).Remaining {
			t.Errorf("step %d: combined %+v is not the strictest of %+v", i, d.Decision, d)
		}
	}
	// The like denied by the global limit cost alice nothing: 5 at once
	// minus the one allowed, plus a second of refill, capped at 5.
	var likes Limiter
	for _, r := range rs.For("POST /likes").Rules() {
		if r.Scope == PerUser {
			likes = r.Limiter
		}
	}
	if got := peek(t, likes, "alice").Remaining; got != 5 {
		t.Errorf("alice's likes: %d remaining, want 5", got)
	}

	// 150 friend requests a day, at once, then one every 9.6 minutes.
	clock.Set(t0.Add(time.Hour))
	carol := Subject{User: "carol"}
	for i := range 150 {
		clock.Advance(time.Second) // stay under the global 3/s
		if d, _ := rs.Check(ctx, "POST /friends", carol, 1); !d.Allowed {
			t.Fatalf("friend request %d denied: %+v", i+1, d)
		}
	}
	clock.Advance(time.Second)
	d, _ := rs.Check(ctx, "POST /friends", carol, 1)
	if d.Allowed || d.Limit != 150 || d.RetryAfter != 576*time.Second-150*time.Second {
		t.Errorf("151st friend request: %+v", d)
	}
}

func TestRulesNoKey(t *testing.T) {
	clock := NewManualClock(t0)
	rs, err := ParseRules("POST /posts: 1/s per user\nGET /feed: 1/s per ip\n*: 10/s global", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := rs.Check(ctx, "POST /posts", Subject{IP: "192.0.2.1"}, 1); !errors.Is(err, ErrNoKey) {
		t.Errorf("per-user rule without a user: %v", err)
	}
	if _, err := rs.Check(ctx, "GET /feed", Subject{User: "u"}, 1); !errors.Is(err, ErrNoKey) {
		t.Errorf("per-ip rule without an address: %v", err)
	}
	if rs.Allow("POST /posts", Subject{}) {
		t.Error("Allow without a user allowed")
	}
	global := rs.For("*").Rules()[0].Limiter
	if got := peek(t, global, "").Remaining; got != 10 {
		t.Errorf("requests without a key consumed the global limit: %d remaining", got)
	}
}

func TestRulesWithoutRules(t *testing.T) {
	rs, err := NewRules(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := rs.Check(context.Background(), "GET /", Subject{}, 1)
	if err != nil || d.Decision != (Decision{Allowed: true}) {
		t.Errorf("no rules: %+v, %v", d, err)
	}
}

func TestRulesCheckDoesNotAllocate(t *testing.T) {
	rs, err := ParseRules("POST /posts: 1000000000/s per user\nPOST /posts: 1000000000/s per ip as ip\n*: 1000000000/s global")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	who := Subject{User: "alice", IP: "192.0.2.1"}
	set := rs.For("POST /posts")
	if d, _ := set.Check(ctx, who, 1); d.Len() != 3 {
		t.Fatalf("%d decisions, want 3", d.Len())
	}
	if n := testing.AllocsPerRun(100, func() { rs.Check(ctx, "POST /posts", who, 1) }); n != 0 {
		t.Errorf("Check allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { set.Check(ctx, who, 1) }); n != 0 {
		t.Errorf("Check allocates %v times", n)
	}
}

// For resolves a class once: the set's rules are the class's own then the
// "*" rules, a class without rules of its own gets the "*" set itself, and
// Check's decision i is that of rule i of Rules (each rule here has its own
// burst, which its decision reports as Limit).
func TestRuleSet(t *testing.T) {
	rs, err := ParseRules(`
		POST /posts: 1/s burst 2 per user
		POST /posts: 5/s burst 3 per ip   as posts per ip
		GET /feed:   9/s burst 4 per user
		*:           7/s burst 5 global
		*:           8/s burst 6 per ip   as all per ip
	`, WithClock(NewManualClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	if rs.For("GET /other") != rs.For("*") || rs.For("") != rs.For("*") {
		t.Error("a class without rules of its own does not get the \"*\" set")
	}
	if n := testing.AllocsPerRun(10, func() { rs.For("POST /posts") }); n != 0 {
		t.Errorf("For allocates %v times", n)
	}
	who := Subject{User: "u", IP: "192.0.2.1"}
	for class, bursts := range map[string][]int{
		"POST /posts": {2, 3, 5, 6},
		"GET /feed":   {4, 5, 6},
		"GET /other":  {5, 6},
	} {
		set := rs.For(class)
		rules := set.Rules()
		d, err := set.Check(context.Background(), who, 1)
		if err != nil || d.Len() != len(bursts) || len(rules) != len(bursts) {
			t.Fatalf("%s: %d decisions, %d rules, %v; want %d", class, d.Len(), len(rules), err, len(bursts))
		}
		for i, b := range bursts {
			key := map[Scope]string{PerUser: who.User, PerIP: who.IP, Global: ""}[rules[i].Scope]
			if rules[i].Burst != b || d.At(i).Limit != b || d.At(i).Remaining != peek(t, rules[i].Limiter, key).Remaining {
				t.Errorf("%s: rule %d has burst %d and decision %+v, want burst %d", class, i, rules[i].Burst, d.At(i), b)
			}
		}
		rules[0].Name = "changed"
		if set.Rules()[0].Name == "changed" {
			t.Errorf("%s: changing Rules' slice changed the set", class)
		}
	}
}

// The zero Rules has no rules: every class gets an empty set, which allows.
func TestZeroRules(t *testing.T) {
	var rs Rules
	set := rs.For("GET /")
	if set == nil || len(set.Rules()) != 0 {
		t.Fatalf("For on the zero Rules: %v", set)
	}
	if d, err := rs.Check(context.Background(), "GET /", Subject{}, 1); err != nil || d.Decision != (Decision{Allowed: true}) || d.Len() != 0 {
		t.Errorf("Check on the zero Rules: %+v, %v", d, err)
	}
}
