package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func request(remote string, header ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func mustKey(t *testing.T, f KeyFunc, r *http.Request) string {
	t.Helper()
	k, err := f(r)
	if err != nil {
		t.Fatalf("key of %s %v: %v", r.RemoteAddr, r.Header, err)
	}
	return k
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes(s...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestByIP(t *testing.T) {
	f := ByIP()
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"}, // mapped: the same host as IPv4
		// IPv6 is grouped by /64: one host cannot rotate through its block.
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
	} {
		if got := mustKey(t, f, request(tc.remote)); got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.remote, got, tc.want)
		}
	}
	for _, remote := range []string{"", "@", "not-an-ip:80"} {
		if _, err := f(request(remote)); !errors.Is(err, ErrNoKey) {
			t.Errorf("%q: err = %v, want ErrNoKey", remote, err)
		}
	}
	// The spoofable headers are ignored without trusted proxies.
	r := request("203.0.113.9:5000", "X-Forwarded-For", "198.51.100.1", "X-Real-IP", "198.51.100.2",
		"Forwarded", "for=198.51.100.3")
	if got := mustKey(t, f, r); got != "203.0.113.9" {
		t.Errorf("forwarded headers believed without trusted proxies: %q", got)
	}
}

func TestClientIPPrefixes(t *testing.T) {
	f, err := ClientIP(IPConfig{IPv6Prefix: 128, IPv4Prefix: 24})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustKey(t, f, request("[2001:db8::7]:1")); got != "2001:db8::7" {
		t.Errorf("/128: %q", got)
	}
	if got := mustKey(t, f, request("192.0.2.77:1")); got != "192.0.2.0/24" {
		t.Errorf("IPv4 /24: %q", got)
	}
	for _, cfg := range []IPConfig{{IPv6Prefix: 129}, {IPv6Prefix: -1}, {IPv4Prefix: 33}, {Header: "X-Client-IP"}} {
		if _, err := ClientIP(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestClientIPForwarded(t *testing.T) {
	trusted := mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.200")
	xff, _ := ClientIP(IPConfig{TrustedProxies: trusted})
	fwd, _ := ClientIP(IPConfig{TrustedProxies: trusted, Header: "forwarded"})
	real, _ := ClientIP(IPConfig{TrustedProxies: trusted, Header: "X-Real-IP"})
	for _, tc := range []struct {
		name   string
		f      KeyFunc
		remote string
		header []string
		want   string
	}{
		{"untrusted peer: spoofed XFF ignored", xff, "203.0.113.9:1",
			[]string{"X-Forwarded-For", "198.51.100.1"}, "203.0.113.9"},
		{"trusted peer, no header", xff, "10.0.0.1:1", nil, "10.0.0.1"},
		{"one trusted proxy", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.1"}, "198.51.100.1"},
		// The client prepended a lie; the proxies appended the truth.
		{"chain: right-most untrusted", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "1.2.3.4, 198.51.100.1, 10.1.1.1"}, "198.51.100.1"},
		{"chain over several lines", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "198.51.100.1,10.1.1.1, 192.0.2.200"}, "198.51.100.1"},
		{"every hop trusted: the left-most", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "10.9.9.9, 10.1.1.1"}, "10.9.9.9"},
		{"garbage where the client should be: the proxy", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.1, bogus"}, "10.0.0.1"},
		{"garbage left of the client is not read", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "bogus, 198.51.100.1"}, "198.51.100.1"},
		{"IPv6 client grouped", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "2001:db8:5:6:7:8:9:a"}, "2001:db8:5:6::/64"},
		{"IPv6 trusted proxy", xff, "[2001:db8:ffff::1]:1",
			[]string{"X-Forwarded-For", "198.51.100.1"}, "198.51.100.1"},
		{"bare trusted address", xff, "192.0.2.200:1",
			[]string{"X-Forwarded-For", "198.51.100.1"}, "198.51.100.1"},
		{"neighbour of a bare trusted address", xff, "192.0.2.201:1",
			[]string{"X-Forwarded-For", "198.51.100.1"}, "192.0.2.201"},
		{"entry with a port", xff, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.1:4000"}, "198.51.100.1"},
		// Only the configured header counts: the proxy passes others on.
		{"XFF configured: Forwarded ignored", xff, "10.0.0.1:1",
			[]string{"Forwarded", "for=1.2.3.4", "X-Forwarded-For", "198.51.100.1"}, "198.51.100.1"},
		{"Forwarded", fwd, "10.0.0.1:1",
			[]string{"Forwarded", `for=1.2.3.4, for="[2001:db8:cafe::17]:4711";proto=https, for=10.2.2.2;by=10.0.0.1`}, "2001:db8:cafe::/64"},
		{"Forwarded with a quoted port", fwd, "10.0.0.1:1",
			[]string{"Forwarded", `for="198.51.100.1:8080"`}, "198.51.100.1"},
		{"Forwarded unknown: the proxy", fwd, "10.0.0.1:1",
			[]string{"Forwarded", `for=198.51.100.1, for=unknown`}, "10.0.0.1"},
		{"Forwarded quoted comma", fwd, "10.0.0.1:1",
			[]string{"Forwarded", `for=1.2.3.4;x="a,b", for=198.51.100.1`}, "198.51.100.1"},
		{"Forwarded configured: XFF ignored", fwd, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "1.2.3.4", "Forwarded", "for=198.51.100.1"}, "198.51.100.1"},
		{"X-Real-IP", real, "10.0.0.1:1",
			[]string{"X-Real-IP", "198.51.100.1"}, "198.51.100.1"},
		{"X-Real-IP from an untrusted peer", real, "203.0.113.9:1",
			[]string{"X-Real-IP", "198.51.100.1"}, "203.0.113.9"},
	} {
		if got := mustKey(t, tc.f, request(tc.remote, tc.header...)); got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	p := mustPrefixes(t, "10.0.0.0/8", " 192.0.2.1 ", "2001:db8::1", "::ffff:192.0.2.9")
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::1/128", "192.0.2.9/32"}
	for i := range want {
		if p[i].String() != want[i] {
			t.Errorf("prefix %d = %v, want %s", i, p[i], want[i])
		}
	}
	// A prefix with host bits would trust (or exempt) a whole network the
	// writer most likely did not mean; one of length 0, every address.
	for _, bad := range []string{"10.0.0.0/33", "example.com", "", "10.1.2.3/8", "0.0.0.0/0", "::/0", "2001:db8::1/32"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Trusting every address as a proxy lets any client choose its own key by
// writing the forwarded header: ClientIP refuses it.
func TestClientIPRefusesTrustingEveryone(t *testing.T) {
	for _, p := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
		for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			if _, err := ClientIP(IPConfig{TrustedProxies: []netip.Prefix{p}, Header: h}); err == nil {
				t.Errorf("ClientIP trusting %v with %s: no error", p, h)
			}
		}
	}
	if _, err := ClientIP(IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}); err != nil {
		t.Errorf("ClientIP trusting 10.0.0.0/8: %v", err)
	}
}

func TestKeyFuncs(t *testing.T) {
	r := request("192.0.2.1:1", "X-Api-Key", "k123")
	r.Pattern = "POST /posts/{id}"
	if got := mustKey(t, ByHeader("x-api-key"), r); got != "k123" {
		t.Errorf("ByHeader: %q", got)
	}
	if _, err := ByHeader("Authorization")(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("ByHeader missing: %v", err)
	}
	user := func(r *http.Request) (string, bool) { v := r.Header.Get("X-User"); return v, v != "" }
	if _, err := ByUser(user)(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("ByUser anonymous: %v", err)
	}
	if got := mustKey(t, Either(ByUser(user), ByIP()), r); got != "192.0.2.1" {
		t.Errorf("Either fallback: %q", got)
	}
	if got := mustKey(t, ByPattern(), r); got != "POST /posts/{id}" {
		t.Errorf("ByPattern: %q", got)
	}
	if _, err := ByPattern()(request("192.0.2.1:1")); !errors.Is(err, ErrNoKey) {
		t.Errorf("ByPattern unrouted: %v", err)
	}
	if got := mustKey(t, Constant("all"), r); got != "all" {
		t.Errorf("Constant: %q", got)
	}
	if _, err := Either()(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("Either(): %v", err)
	}
	// Join is unambiguous where plain concatenation is not.
	a := Join(Constant("a|b"), Constant("c"))
	b := Join(Constant("a"), Constant("b|c"))
	if mustKey(t, a, r) == mustKey(t, b, r) {
		t.Error("Join gives two tuples one key")
	}
	if _, err := Join(ByIP(), ByUser(user))(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("Join with a failing part: %v", err)
	}
}

func TestByIPv4DoesNotAllocate(t *testing.T) {
	f := ByIP()
	r := request("192.0.2.1:1234")
	if n := testing.AllocsPerRun(100, func() { f(r) }); n != 0 {
		t.Errorf("ByIP allocates %v times for IPv4", n)
	}
}
