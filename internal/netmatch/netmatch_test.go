package netmatch

import (
	"net/netip"
	"testing"
)

func TestCovers(t *testing.T) {
	ps := []netip.Prefix{
		Unmap(netip.MustParsePrefix("10.0.0.0/8")),
		Unmap(netip.MustParsePrefix("::ffff:192.0.2.0/120")), // 192.0.2.0/24
		Unmap(netip.MustParsePrefix("2001:db8::/48")),
	}
	for ip, want := range map[string]bool{
		"10.1.2.3":          true,
		"::ffff:10.1.2.3":   true, // mapped: unmapped first
		"11.0.0.1":          false,
		"192.0.2.9":         true,
		"2001:db8:0:1::/64": true,  // a group inside the /48
		"2001:db8::/32":     false, // wider than every prefix: never covered by a part of it
		"2001:db8::1%eth0":  true,  // zones dropped
		"not an address":    false,
		"":                  false,
	} {
		if got := Covers(ps, ip); got != want {
			t.Errorf("Covers(%q) = %v, want %v", ip, got, want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { Covers(ps, "2001:db8:0:1::/64") }); a != 0 {
		t.Errorf("Covers allocates %v times", a)
	}
}
