package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// The exemption forms ParseRules reads, and which subjects each covers.
func TestRulesExemptForms(t *testing.T) {
	cases := []struct {
		line string
		who  Subject
		want bool
	}{
		{"exempt 10.0.0.0/8", Subject{IP: "10.1.2.3"}, true},
		{"exempt 10.0.0.0/8", Subject{IP: "11.0.0.1"}, false},
		{"exempt 10.0.0.0/8", Subject{IP: "::ffff:10.1.2.3"}, true}, // mapped: the IPv4 address
		{"exempt ::ffff:10.0.0.0/104", Subject{IP: "10.9.9.9"}, true},
		{"exempt ::ffff:10.0.0.0/104", Subject{IP: "11.9.9.9"}, false},
		{"exempt ip 192.0.2.7", Subject{IP: "192.0.2.7"}, true},
		{"exempt 192.0.2.7", Subject{IP: "192.0.2.8"}, false},
		{"exempt 192.0.2.7, 198.51.100.0/24", Subject{IP: "198.51.100.9"}, true},
		{"EXEMPT IP 192.0.2.7", Subject{IP: "192.0.2.7"}, true},
		{"exempt 2001:db8::/32", Subject{IP: "2001:db8:1:2::/64"}, true}, // a group inside the prefix
		{"exempt 2001:db8:1:2::5", Subject{IP: "2001:db8:1:2::/64"}, false},
		{"exempt 2001:db8:1:2::/64", Subject{IP: "2001:db8:1:2::/64"}, true},
		{"exempt 2001:db8:1:2::/80", Subject{IP: "2001:db8:1:2::/64"}, false}, // narrower than the group
		{"exempt 2001:db8::1", Subject{IP: "2001:db8::1%eth0"}, true},
		{"exempt 2001:db8:: 192.0.2.7", Subject{IP: "192.0.2.7"}, true}, // "::" then a space is no class
		{"exempt 2001:db8:: 192.0.2.7", Subject{IP: "2001:db8::"}, true},
		{"exempt 10.0.0.0/8", Subject{IP: "10.0.0.0/8/9"}, false},
		{"exempt 10.0.0.0/8", Subject{IP: "not an address"}, false},
		{"exempt 10.0.0.0/8", Subject{User: "10.1.2.3"}, false}, // a user is not an address
		{"exempt user alice", Subject{User: "alice"}, true},
		{"exempt user alice", Subject{User: "Alice"}, false},
		{"exempt user alice", Subject{IP: "alice"}, false}, // an address is not a user
		{"exempt user alice", Subject{User: "bob", IP: "10.0.0.1"}, false},
	}
	for _, c := range cases {
		rs, err := ParseRules(c.line + "\n*: 1/m global\nPOST /x: 1/m per user")
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		if got := rs.Exempt(c.who); got != c.want {
			t.Errorf("%q: Exempt(%+v) = %v, want %v", c.line, c.who, got, c.want)
		}
		// Check agrees, and an exempt request records nothing.
		for range 3 {
			d, err := rs.Check(context.Background(), "*", c.who, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c.want && (!d.Allowed || d.Len() != 0 || d.Limit != 0) {
				t.Errorf("%q: exempt %+v got %+v", c.line, c.who, d)
			}
		}
		if !c.want {
			if d, _ := rs.Check(context.Background(), "*", c.who, 1); d.Allowed {
				t.Errorf("%q: %+v is not exempt and was allowed past an exhausted limit", c.line, c.who)
			}
		}
		rs.Close()
	}
}

func TestRulesExemptErrors(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{"exempt", `line 1 ("exempt"): "exempt" without`},
		{"*: 1/s global\nexempt 10.0.0.0/33", `line 2 ("exempt 10.0.0.0/33"): exempt prefix "10.0.0.0/33" is not a CIDR prefix`},
		{"exempt 10.0.0.1.1", `exempt address "10.0.0.1.1" is not an IP address`},
		{"exempt ip", `"exempt ip" without`},
		{"exempt user", `want "exempt user ID"`},
		{"exempt user a b", `want "exempt user ID"`},
		{"exempt ::ffff:0.0.0.0/8", "IPv4-mapped prefix shorter than /96"},
		{"exempt alice", `exempt address "alice"`},
		// Prefixes that would exempt far more than was meant.
		{"exempt 10.1.2.3/8", `exempt prefix "10.1.2.3/8" has address bits past its length: write 10.0.0.0/8 for the network, or 10.1.2.3 for the one address`},
		{"exempt 2001:db8::1/32", `write 2001:db8::/32 for the network, or 2001:db8::1 for the one address`},
		{"exempt ::ffff:10.1.2.3/104", `write ::ffff:10.0.0.0/104 for the network`},
		{"exempt 0.0.0.0/0", `exempt prefix "0.0.0.0/0" holds every IPv4 address: it would turn every rule off`},
		{"exempt ::/0", `holds every IPv6 address`},
		{"exempt ::ffff:0.0.0.0/96", `holds every IPv4 address`},
		{"exempt 10.0.0.0/8 1.2.3.4/0", `exempt prefix "1.2.3.4/0" has address bits`},
	} {
		_, err := ParseRules(c.config)
		if err == nil || !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRules(%q) = %v, want an ErrInvalidRule containing %q", c.config, err, c.want)
		}
		if err != nil && strings.Count(err.Error(), "ratelimit:") != 1 {
			t.Errorf("%q: stutters: %v", c.config, err)
		}
	}
	// A class that starts with the word is a rule, not an exemption.
	rs, err := ParseRules("exempt /x: 1/s global")
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Classes(); len(got) != 1 || got[0] != "exempt /x" {
		t.Errorf("Classes = %q", got)
	}
}

// Property: over random addresses, an exempt subject is exactly one whose
// unmapped address lies in some exempt prefix (oracle: netip directly),
// and a non-exempt subject is limited as if there were no exemptions.
func TestRulesExemptProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	prefixes := []string{"10.0.0.0/8", "192.0.2.0/24", "198.51.100.7", "2001:db8::/48"}
	rs, err := ParseRules("exempt " + strings.Join(prefixes, " ") + "\n*: 1/h per ip")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var ps []netip.Prefix
	for _, p := range prefixes {
		if !strings.Contains(p, "/") {
			p += "/32"
		}
		ps = append(ps, netip.MustParsePrefix(p))
	}
	for i := range 5000 {
		var a netip.Addr
		switch rng.IntN(3) {
		case 0:
			a = netip.AddrFrom4([4]byte{[]byte{10, 192, 198, 11}[rng.IntN(4)], byte(rng.IntN(3) * 51), byte(rng.IntN(3)), byte(rng.IntN(8))})
		case 1:
			a = netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), 1}).As16()) // mapped
			if rng.IntN(2) == 0 {
				a = netip.AddrFrom16(netip.AddrFrom4([4]byte{11, 0, 0, byte(i)}).As16())
			}
		default:
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(rng.IntN(2)), 0, 0, 15: byte(i)})
		}
		want := false
		for _, p := range ps {
			want = want || p.Contains(a.Unmap())
		}
		who := Subject{IP: a.String()}
		if got := rs.Exempt(who); got != want {
			t.Fatalf("Exempt(%s) = %v, want %v", a, got, want)
		}
		d, err := rs.Check(context.Background(), "GET /", who, 1)
		if err != nil {
			t.Fatal(err)
		}
		if want && d.Len() != 0 {
			t.Fatalf("%s: exempt but checked: %+v", a, d)
		}
		if !want && d.Len() != 1 {
			t.Fatalf("%s: not exempt but not checked: %+v", a, d)
		}
	}
}

func TestRuleSetCheckExemptAllocs(t *testing.T) {
	rs, err := ParseRules("exempt 10.0.0.0/8 2001:db8::/32\nexempt user ops\n*: 1/ns per ip")
	if err != nil {
		t.Fatal(err)
	}
	set := rs.For("x")
	for _, who := range []Subject{{IP: "10.1.1.1"}, {IP: "2001:db8:1:2::/64"}, {IP: "192.0.2.1"}, {User: "ops", IP: "192.0.2.1"}} {
		if n := testing.AllocsPerRun(100, func() { set.Check(context.Background(), who, 1) }); n != 0 {
			t.Errorf("Check(%+v) allocates %v", who, n)
		}
	}
}

// WithExempt states exemptions for rules given as values, keeps them
// through Replace and Reload, and is refused by a limiter.
func TestRulesWithExempt(t *testing.T) {
	ctx := context.Background()
	rules := []Rule{{Class: "*", Rate: PerMinute(1), Scope: PerIP}}
	rs, err := NewRules(rules, WithExempt("10.0.0.0/8", "user healthcheck"))
	if err != nil {
		t.Fatal(err)
	}
	denied := func(who Subject) bool {
		for range 3 {
			d, err := rs.Check(ctx, "GET /", who, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return true
			}
		}
		return false
	}
	check := func(stage string, wantExempt ...Subject) {
		t.Helper()
		for _, who := range wantExempt {
			if !rs.Exempt(who) || denied(who) {
				t.Errorf("%s: %+v not exempt", stage, who)
			}
		}
		if who := (Subject{IP: "192.0.2.1", User: "bob"}); rs.Exempt(who) {
			t.Errorf("%s: %+v exempt", stage, who)
		}
	}
	inside, health := Subject{IP: "10.1.2.3"}, Subject{IP: "192.0.2.9", User: "healthcheck"}
	check("NewRules", inside, health)
	if !denied(Subject{IP: "192.0.2.1"}) {
		t.Fatal("a subject outside the exemptions is never denied")
	}
	if err := rs.Replace([]Rule{{Class: "*", Rate: PerMinute(2), Scope: PerIP}}); err != nil {
		t.Fatal(err)
	}
	check("Replace", inside, health)
	if err := rs.Reload("exempt 198.51.100.0/24\n*: 1/m per ip"); err != nil {
		t.Fatal(err)
	}
	check("Reload", inside, health, Subject{IP: "198.51.100.4"})
	if err := rs.Replace(rules); err != nil {
		t.Fatal(err)
	}
	if rs.Exempt(Subject{IP: "198.51.100.4"}) {
		t.Error("Replace kept an exemption stated by the text of a Reload")
	}
	check("Replace after Reload", inside, health)

	if _, err := ParseRules("*: 1/m per ip", WithExempt("user alice")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "10.0.0.0/33", "user", "user a b", "not-an-address", "10.0.0.1/8", "0.0.0.0/0"} {
		if _, err := NewRules(rules, WithExempt(bad)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithExempt(%q): err = %v, want ErrInvalidOption", bad, err)
		}
	}
	if _, err := NewTokenBucket(PerSecond(1), 1, WithExempt("10.0.0.0/8")); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a limiter took WithExempt: err = %v", err)
	}
	if _, err := NewTokenBucket(PerSecond(1), 1, WithExempt()); err != nil {
		t.Errorf("WithExempt() with no subjects: %v", err)
	}
}
