package httplimit

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// The fuzz targets of the key functions. Their seed corpora are under
// testdata/fuzz and run with every go test; make fuzz runs them longer.

// fuzzTrusted are the proxies the fuzz targets trust.
var fuzzTrusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
	netip.MustParsePrefix("192.0.2.200/32"),
}

// fuzzHops are trusted proxies that append themselves to a chain.
var fuzzHops = []string{"10.1.2.3", "2001:db8:ffff::7", "192.0.2.200"}

func fuzzIsTrusted(a netip.Addr) bool {
	for _, p := range fuzzTrusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fuzzConfig picks a forwarded header and prefix lengths from sel: every
// combination of the three headers, IPv6 prefixes of 64 (the default), 48,
// 56, 128, 1 and 127 bits, and IPv4 prefixes of 32 (the default), 24, 16, 1
// and 31 bits.
func fuzzConfig(sel uint8, trusted bool) IPConfig {
	cfg := IPConfig{
		Header:     []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"}[sel%3],
		IPv6Prefix: []int{0, 48, 56, 128, 1, 127}[sel/3%6],
		IPv4Prefix: []int{0, 24, 16, 1, 31}[sel/18%5],
	}
	if trusted {
		cfg.TrustedProxies = fuzzTrusted
	}
	return cfg
}

// fuzzKeyOf is the key of address a under cfg, worked out from the
// documentation of ClientIP: unmapped, without zone, the address itself
// when all its bits count, else its masked prefix.
func fuzzKeyOf(a netip.Addr, cfg IPConfig) string {
	a = a.Unmap().WithZone("")
	bits := cmpOr(cfg.IPv6Prefix, 64)
	if a.Is4() {
		bits = cmpOr(cfg.IPv4Prefix, 32)
	}
	if bits == a.BitLen() {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// fuzzPeer parses a RemoteAddr as ClientIP documents it: "ip:port",
// "[ipv6]:port" or an address alone.
func fuzzPeer(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr(), true
	}
	a, err := netip.ParseAddr(remote)
	return a, err == nil
}

// checkKeyForm fails unless key is a canonical key of an address of some
// family under cfg: the address itself when all its bits count, else a
// masked prefix of exactly the configured length; never an IPv4-mapped
// IPv6 address, never with a zone.
func checkKeyForm(t *testing.T, key string, cfg IPConfig) {
	t.Helper()
	if a, err := netip.ParseAddr(key); err == nil {
		bits := cmpOr(cfg.IPv6Prefix, 64)
		if a.Is4() {
			bits = cmpOr(cfg.IPv4Prefix, 32)
		}
		if a.String() != key || a.Is4In6() || a.Zone() != "" || bits != a.BitLen() {
			t.Fatalf("key %q is not a canonical address key (prefix %d)", key, bits)
		}
		return
	}
	p, err := netip.ParsePrefix(key)
	if err != nil {
		t.Fatalf("key %q is neither an address nor a prefix", key)
	}
	bits := cmpOr(cfg.IPv6Prefix, 64)
	if p.Addr().Is4() {
		bits = cmpOr(cfg.IPv4Prefix, 32)
	}
	if p.String() != key || p != p.Masked() || p.Addr().Is4In6() || p.Bits() != bits || bits == p.Addr().BitLen() {
		t.Fatalf("key %q is not a canonical prefix key of %d bits", key, bits)
	}
}

// FuzzClientIP: the key functions by address on arbitrary RemoteAddr
// strings and forwarded headers (every one of the three set to the same
// arbitrary lines). Never a panic; an error matching ErrNoKey exactly when
// RemoteAddr is not an address; without trusted proxies, and from a peer
// that is not a trusted proxy, the key is the peer's whatever the headers
// say; from a trusted proxy, a canonical key of the configured prefix
// length, the one the reference reading of the whole chain gives; IPv6
// addresses are grouped by their prefix.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct {
		remote, h1, h2 string
		sel            uint8
	}{
		{"192.0.2.1:1234", "198.51.100.1", "", 0},
		{"10.0.0.1:443", "1.2.3.4, 198.51.100.1, 10.1.1.1", "", 0},
		{"10.0.0.1:443", `for=1.2.3.4, for="[2001:db8:cafe::17]:4711";proto=https`, "for=10.2.2.2", 1},
		{"10.0.0.1:443", "198.51.100.1", "203.0.113.9", 2},
		{"[2001:db8:ffff::1]:80", "2001:db8:5:6:7:8:9:a", "", 3},
		{"[2001:db8:1:2:3:4:5:6]:443", "", "", 6},
		{"[::ffff:192.0.2.1]:80", "", "", 18},
		{"[fe80::1%eth0]:80", "fe80::2%eth1", "", 9},
		{"192.0.2.200", "[2001:db8::1]:80, unknown", "", 36},
		{"10.0.0.1:1", `for="\"[::1]\""`, `for=_hidden, for="`, 1},
		{"", "1.2.3.4", "", 0},
		{"@", "1.2.3.4", "", 1},
		{"not-an-ip:80", "1.2.3.4", "", 2},
		{"1.2.3.4:99999", "", "", 0},
		{"01.2.3.4:80", "", "", 0},
	} {
		f.Add(s.remote, s.h1, s.h2, s.sel)
	}
	f.Fuzz(func(t *testing.T, remote, h1, h2 string, sel uint8) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{
			"X-Forwarded-For": {h1, h2},
			"Forwarded":       {h1, h2},
			"X-Real-Ip":       {h1, h2},
		}}
		plain, trusted := fuzzConfig(sel, false), fuzzConfig(sel, true)
		byPlain, err := ClientIP(plain)
		if err != nil {
			t.Fatal(err)
		}
		byTrusted, err := ClientIP(trusted)
		if err != nil {
			t.Fatal(err)
		}
		peer, ok := fuzzPeer(remote)
		for _, kf := range []struct {
			name string
			f    KeyFunc
			cfg  IPConfig
		}{{"ByIP", ByIP(), IPConfig{}}, {"ClientIP", byPlain, plain}, {"ClientIP trusted", byTrusted, trusted}} {
			key, err := kf.f(r)
			if !ok {
				if !errors.Is(err, ErrNoKey) || key != "" {
					t.Fatalf("%s: RemoteAddr %q: key %q, err %v; want ErrNoKey", kf.name, remote, key, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: RemoteAddr %q: %v", kf.name, remote, err)
			}
			checkKeyForm(t, key, kf.cfg)
			// Forwarded headers count only from a trusted proxy.
			if want := fuzzKeyOf(peer, kf.cfg); (kf.cfg.TrustedProxies == nil || !fuzzIsTrusted(peer.Unmap().WithZone(""))) && key != want {
				t.Fatalf("%s: peer %q (untrusted), headers %q, %q: key %q, want the peer's %q", kf.name, remote, h1, h2, key, want)
			}
		}
		if !ok {
			return
		}
		// Read from the right, the chain gives what the reference reading
		// of all of it gives.
		checkReference(t, byTrusted, trusted, fuzzIsTrusted, r)
		// Grouping: an address differing only beyond the prefix shares the
		// key; one differing within it does not.
		a := peer.Unmap().WithZone("")
		bits := cmpOr(plain.IPv6Prefix, 64)
		if a.Is4() {
			bits = cmpOr(plain.IPv4Prefix, 32)
		}
		b := a.AsSlice()
		key := func(b []byte) string {
			c, _ := netip.AddrFromSlice(b)
			k, err := byPlain(&http.Request{RemoteAddr: netip.AddrPortFrom(c, 80).String()})
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
		if bits < a.BitLen() {
			b[len(b)-1] ^= 1
			if k := key(b); k != key(a.AsSlice()) {
				t.Fatalf("%v and %v, one /%d, have keys %q and %q", a, b, bits, key(a.AsSlice()), k)
			}
			b[len(b)-1] ^= 1
		}
		b[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8) // the prefix's last bit
		if k := key(b); k == key(a.AsSlice()) {
			t.Fatalf("%v and %v, different /%d, share the key %q", a, b, bits, k)
		}
	})
}

// FuzzForwardedChain: a client behind trusted proxies sends whatever it
// likes in the forwarded header (junk), then the proxies add the truth: the
// client's address C, then their own. The key is the one the reference
// reading of the whole chain gives; and whatever the junk, it is C's:
// everything left of the first address no trusted proxy vouches for is the
// client's to invent. When a proxy appends to the client's own Forwarded
// line (RFC 7239 allows it), a malformed line may also make the key the
// proxy's (the documented fallback for garbage), but never anything the
// client chose.
func FuzzForwardedChain(f *testing.F) {
	const (
		xff, fwd, real = 0, 1, 2 // header % 3: the header (see fuzzConfig)
		sameLine       = 1       // flags: the proxy appends to the client's line
		ipv6           = 2       // flags: the client has an IPv6 address
		hop            = 4       // flags / hop % 4: how many trusted proxies follow
	)
	v6 := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 5, 0, 6, 0, 7, 0, 8, 0, 9, 0, 10}
	for _, s := range []struct {
		junk          string
		client        []byte
		port          uint16
		header, flags uint8
	}{
		{"", []byte{198, 51, 100, 1}, 0, xff, 0},
		{"1.2.3.4", []byte{198, 51, 100, 1}, 4711, xff, sameLine},
		{"for=1.2.3.4", []byte{198, 51, 100, 1}, 0, fwd, sameLine},
		{"for=1.2.3.4", []byte{198, 51, 100, 1}, 0, fwd, 0},
		{`for="[2001:db8::1]:80";proto=https, for=unknown`, v6, 443, fwd, sameLine | ipv6 | 2*hop},
		{"10.9.9.9, 10.1.1.1", []byte{203, 0, 113, 9}, 0, xff, hop},
		{"unknown, bogus", []byte{203, 0, 113, 9}, 80, fwd + 3, sameLine | 3*hop},
		{"1.2.3.4", v6, 0, real, ipv6},
	} {
		f.Add(s.junk, s.client, s.port, s.header, s.flags)
	}
	f.Fuzz(func(t *testing.T, junk string, client []byte, port uint16, header, flags uint8) {
		var c netip.Addr
		switch {
		case flags&ipv6 != 0 && len(client) >= 16:
			c = netip.AddrFrom16([16]byte(client[:16])).Unmap()
		case len(client) >= 4:
			c = netip.AddrFrom4([4]byte(client[:4]))
		default:
			return
		}
		if fuzzIsTrusted(c) {
			return // a trusted client is a proxy: the chain goes on left of it
		}
		cfg := fuzzConfig(header, true)
		sameLine := flags&sameLine != 0
		hops := fuzzHops[:int(flags/hop)%(len(fuzzHops)+1)]
		cs := c.String()
		if port != 0 {
			cs = netip.AddrPortFrom(c, port).String()
		}
		var lines []string
		switch cfg.Header {
		case "X-Forwarded-For":
			chain := strings.Join(append([]string{cs}, hops...), ", ")
			lines = []string{junk, chain}
			if sameLine {
				lines = []string{junk + ", " + chain}
			}
		case "Forwarded":
			elems := []string{"for=" + cs}
			if c.Is6() || port != 0 {
				elems[0] = `for="` + cs + `"`
				if port == 0 {
					elems[0] = `for="[` + cs + `]"`
				}
			}
			for _, h := range hops {
				if strings.Contains(h, ":") {
					h = `"[` + h + `]"`
				}
				elems = append(elems, "for="+h+";by=_proxy")
			}
			chain := strings.Join(elems, ", ")
			lines = []string{junk, chain}
			if sameLine {
				lines = []string{junk + ", " + chain}
			}
		case "X-Real-IP":
			lines = []string{junk, c.String()} // the proxy's line is the last
		}
		const peer = "10.0.0.1:443"
		r := &http.Request{RemoteAddr: peer, Header: http.Header{}}
		for _, l := range lines {
			r.Header.Add(cfg.Header, l)
		}
		kf, err := ClientIP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkReference(t, kf, cfg, fuzzIsTrusted, r)
		key, err := kf(r)
		if err != nil {
			t.Fatal(err)
		}
		want := fuzzKeyOf(c, cfg)
		if key == want {
			return
		}
		if cfg.Header == "Forwarded" && sameLine && strings.Contains(junk, `"`) && key == fuzzKeyOf(netip.MustParseAddr("10.0.0.1"), cfg) {
			return // a quote left open swallowed the proxies' part: keyed as the proxy
		}
		t.Fatalf("%s lines %q from %s: key %q, want the client's %q", cfg.Header, lines, peer, key, want)
	})
}

// A client behind a trusted proxy that appends to its Forwarded line could
// choose its key by leaving a quote open: the proxy's element became part of
// a parameter value of the client's (found by FuzzForwardedChain; its seed
// testdata/fuzz/FuzzForwardedChain/21ffcd3363229cf2 does it with a zone
// that swallows the rest). The open quote now makes the line's last element
// garbage, and the key the proxy's.
func TestForwardedOpenQuote(t *testing.T) {
	kf, err := ClientIP(IPConfig{TrustedProxies: fuzzTrusted, Header: "Forwarded"})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`for=203.0.113.66;a="` + `, for=198.51.100.1`,
		`for="[2001:db8::66%` + `, for="[2001:db8:5::1]:443"`,
		`for=203.0.113.66;a="\` + `, for=198.51.100.1`,
	} {
		r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{"Forwarded": {line}}}
		if key, err := kf(r); err != nil || key != "10.0.0.1" {
			t.Errorf("Forwarded %q: key %q, %v; want the proxy's 10.0.0.1", line, key, err)
		}
	}
	// On a line of its own, the client's open quote spoils only its line.
	r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{"Forwarded": {`for=203.0.113.66;a="`, "for=198.51.100.1"}}}
	if key, err := kf(r); err != nil || key != "198.51.100.1" {
		t.Errorf("open quote on the client's own line: key %q, %v; want 198.51.100.1", key, err)
	}
}

// FuzzKeyFuncs: the key functions by header and Join on arbitrary values.
// ByHeader gives the header's first value, or ErrNoKey when it is missing
// or empty; Join never gives two different tuples the same key.
func FuzzKeyFuncs(f *testing.F) {
	f.Add("k123", "a|b", "c", "a", "b|c")
	f.Add("", "1:a", "", "1", ":a")
	f.Add("\x00", "", "", "", "")
	f.Add("v", "2:ab", "c", "2", "ab")
	f.Fuzz(func(t *testing.T, v, a, b, c, d string) {
		r := &http.Request{Header: http.Header{"X-Api-Key": {v}}}
		key, err := ByHeader("x-api-key")(r)
		if v == "" {
			if !errors.Is(err, ErrNoKey) || key != "" {
				t.Fatalf("empty header: key %q, err %v", key, err)
			}
		} else if err != nil || key != v {
			t.Fatalf("header %q: key %q, err %v", v, key, err)
		}
		k1, err1 := Join(Constant(a), Constant(b))(r)
		k2, err2 := Join(Constant(c), Constant(d))(r)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if (k1 == k2) != (a == c && b == d) {
			t.Fatalf("Join(%q, %q) = %q, Join(%q, %q) = %q", a, b, k1, c, d, k2)
		}
		if k, err := Join(Constant(a), ByHeader("X-Missing"))(r); err == nil || k != "" {
			t.Fatalf("Join with a failing part: key %q, err %v", k, err)
		}
	})
}

// FuzzParsePrefixes: never a panic; what it accepts is masked, and a bare
// address stands for itself alone.
func FuzzParsePrefixes(f *testing.F) {
	for _, s := range []string{"10.1.2.3/8", " 192.0.2.1 ", "2001:db8::1", "::ffff:192.0.2.9", "fe80::1%eth0",
		"10.0.0.0/33", "example.com", "", "::/0", "0.0.0.0/0", "1.2.3.4/32 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePrefixes(s)
		if err != nil {
			return
		}
		if len(ps) != 1 {
			t.Fatalf("%q: %d prefixes", s, len(ps))
		}
		p := ps[0]
		if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
			t.Fatalf("%q: prefix %v is not valid and masked", s, p)
		}
		if !strings.Contains(s, "/") && (p.Bits() != p.Addr().BitLen() || p.Addr().Is4In6()) {
			t.Fatalf("%q: bare address parsed as %v", s, p)
		}
	})
}
