package httplimit

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// The reference reading of a forwarded chain, as plain as can be: split
// every line in full, left to right, into a list of hops (allocating as it
// likes), then walk the list from the right. ClientIP reads the chain from
// the right and stops early; the fuzz targets and the property test below
// check that it always finds what this finds.

// refHop is one entry of a chain; ok is false for one that is not an
// address.
type refHop struct {
	addr netip.Addr
	ok   bool
}

// refClient is the client of a chain of header lines from peer, under the
// documented rules: the right-most address that is not a trusted proxy;
// an entry that is not an address stops the walk at the last address read
// (the peer's if none); so does the maxHops-th address.
func refClient(header string, values []string, peer netip.Addr, trusted func(netip.Addr) bool) netip.Addr {
	var hops []refHop
	switch header {
	case "X-Forwarded-For":
		hops = refXFF(values)
	case "Forwarded":
		hops = refForwarded(values)
	case "X-Real-Ip":
		hops = []refHop{refEntry(values[len(values)-1], maxEntry)}
	}
	client, n := peer, 0
	for i := len(hops) - 1; i >= 0; i-- {
		h := hops[i]
		if !h.ok {
			break
		}
		client, n = h.addr, n+1
		if !trusted(h.addr) || n == maxHops {
			break
		}
	}
	return client
}

// refEntry parses an entry of at most max bytes as an address.
func refEntry(s string, max int) refHop {
	if len(s) > max {
		return refHop{}
	}
	return refHost(s)
}

func refHost(s string) refHop {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && s[end+1] != ':') {
			return refHop{}
		}
		s = s[1:end]
	} else if strings.Count(s, ":") == 1 {
		s = s[:strings.IndexByte(s, ':')]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return refHop{}
	}
	return refHop{addr: a.Unmap().WithZone(""), ok: true}
}

func refXFF(values []string) []refHop {
	var hops []refHop
	for _, v := range values {
		for _, e := range strings.Split(v, ",") {
			hops = append(hops, refEntry(e, maxEntry))
		}
	}
	return hops
}

// refForwarded: elements split at commas outside quoted strings; the last
// element of a line that ends inside a quoted string is not an address.
func refForwarded(values []string) []refHop {
	var hops []refHop
	for _, v := range values {
		if len(v) > maxQuotedLine && strings.Contains(v, `"`) {
			hops = append(hops, refHop{}) // not read: too long to scan whole
			continue
		}
		elems, open := refSplitQuoted(v, ',')
		for i, elem := range elems {
			h := refHop{}
			if !(open && i == len(elems)-1) && len(elem) <= maxElement {
				pairs, _ := refSplitQuoted(elem, ';')
				for _, pair := range pairs {
					k, val, ok := strings.Cut(pair, "=")
					if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
						h = refHost(refUnquote(strings.TrimSpace(val)))
					}
				}
			}
			hops = append(hops, h)
		}
	}
	return hops
}

func refUnquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func refSplitQuoted(s string, sep byte) (parts []string, open bool) {
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && open:
			i++
		case c == '"':
			open = !open
		case c == sep && !open:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:]), open
}

// checkReference fails unless kf, built from cfg, keys r as the reference
// reading does.
func checkReference(t *testing.T, kf KeyFunc, cfg IPConfig, trusted func(netip.Addr) bool, r *http.Request) {
	t.Helper()
	peer, ok := fuzzPeer(r.RemoteAddr)
	if !ok {
		return
	}
	peer = peer.Unmap().WithZone("")
	client := peer
	header := http.CanonicalHeaderKey(cmpOrString(cfg.Header, "X-Forwarded-For"))
	if values := r.Header.Values(header); len(cfg.TrustedProxies) > 0 && trusted(peer) && len(values) > 0 {
		client = refClient(header, values, peer, trusted)
	}
	key, err := kf(r)
	if want := fuzzKeyOf(client, cfg); err != nil || key != want {
		t.Fatalf("%s %q from %s: key %q, %v; the reference reading gives %q", header, r.Header.Values(header), r.RemoteAddr, key, err, want)
	}
}

func cmpOrString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Random chains, short and long, well formed and not, in all three
// headers: ClientIP reading from the right finds what the reference finds
// reading everything. Seeded: a failure reproduces.
func TestClientIPMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	atoms := []string{
		"10.1.2.3", "10.9.9.9", "2001:db8:ffff::7", "192.0.2.200", // trusted
		"198.51.100.1", "203.0.113.9", "2001:db8:5::1", "::ffff:198.51.100.7", // not
		"[2001:db8:ffff::8]:443", "10.0.0.5:80", "fe80::1%eth0", "[fe80::2%25x]",
		"unknown", "_hidden", "", " ", "\"", `\`, ";", "=", "for=", "for=10.1.1.1", `for="[2001:db8:ffff::9]"`,
		`for="\1\0.2.2.2"`, `for="10.3.3.3`, `a="x,y"`, "by=10.0.0.1", "FOR=10.4.4.4", "proto=https",
		strings.Repeat(" ", maxEntry), strings.Repeat("1", maxElement),
	}
	for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
		cfg := IPConfig{TrustedProxies: fuzzTrusted, Header: header, IPv6Prefix: 128}
		kf, err := ClientIP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		peer := netip.MustParseAddr("10.0.0.1")
		seen := map[string]int{}
		for range 3000 {
			lines := make([]string, 1+rng.IntN(3))
			for i := range lines {
				var b strings.Builder
				n := rng.IntN(4)
				if rng.IntN(8) == 0 {
					n = maxHops + rng.IntN(8) // past the bound on hops
				}
				for j := range n {
					if j > 0 {
						b.WriteString([]string{",", ", ", ";", " , "}[rng.IntN(4)])
					}
					a := atoms[rng.IntN(len(atoms))]
					if header == "Forwarded" && rng.IntN(2) == 0 {
						a = "for=" + a
					}
					if rng.IntN(4) != 0 && n > 8 {
						a = []string{"10.1.2.3", "for=10.1.2.3"}[rng.IntN(2)]
					}
					b.WriteString(a)
				}
				lines[i] = b.String()
			}
			r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{http.CanonicalHeaderKey(header): lines}}
			checkReference(t, kf, cfg, fuzzIsTrusted, r)
			switch c := refClient(http.CanonicalHeaderKey(header), lines, peer, fuzzIsTrusted); {
			case c == peer:
				seen["the peer"]++
			case !fuzzIsTrusted(c):
				seen["an untrusted client"]++
			default:
				seen["a trusted proxy"]++
			}
		}
		for _, what := range []string{"the peer", "an untrusted client", "a trusted proxy"} {
			if seen[what] < 100 {
				t.Errorf("%s: only %d of the chains give %s: the test does not cover it", header, seen[what], what)
			}
		}
		t.Logf("%s: %v", header, seen)
	}
}

// longChain returns a forwarded header line of about size bytes: junk a
// client sent on the left, then the client's address and two trusted
// proxies as the proxies append them.
func longChain(header string, size int, quoted bool) string {
	junk, tail := "198.51.100.1, ", "203.0.113.9, 10.1.2.3, 10.9.9.9"
	if header == "Forwarded" {
		junk, tail = "for=198.51.100.1;proto=http, ", "for=203.0.113.9, for=10.1.2.3;by=_p, for=10.9.9.9"
		if quoted {
			junk = `for="[2001:db8::1]:80";host="a,b;c", `
		}
	}
	var b strings.Builder
	for b.Len()+len(tail) < size {
		b.WriteString(junk)
	}
	b.WriteString(tail)
	return b.String()
}

var chainSizes = []struct {
	name string
	size int
}{{"100B", 100}, {"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

var chainKinds = []struct {
	name, header string
	quoted       bool
}{
	{"X-Forwarded-For", "X-Forwarded-For", false},
	{"Forwarded", "Forwarded", false},
	{"Forwarded/quoted", "Forwarded", true},
}

// However long the chain a client sends, ClientIP allocates the same: the
// key's string and nothing for the chain (allocation counts are exact, so
// this holds on any machine). A Forwarded line holding a quote and longer
// than maxQuotedLine is not read: the request is keyed by its peer.
func TestClientIPAllocationsIndependentOfLength(t *testing.T) {
	for _, k := range chainKinds {
		kf, err := ClientIP(IPConfig{TrustedProxies: fuzzTrusted, Header: k.header})
		if err != nil {
			t.Fatal(err)
		}
		var first float64
		for i, sz := range chainSizes {
			r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{k.header: {longChain(k.header, sz.size, k.quoted)}}}
			want := "203.0.113.9"
			if k.quoted && sz.size > maxQuotedLine {
				want = "10.0.0.1" // not read: keyed by the peer
			}
			if key, err := kf(r); err != nil || key != want {
				t.Fatalf("%s %s: key %q, %v", k.name, sz.name, key, err)
			}
			allocs := testing.AllocsPerRun(20, func() { kf(r) })
			if i == 0 {
				first = allocs
			}
			if allocs > first || allocs > 1 {
				t.Errorf("%s %s: %v allocations (1 KiB: %v), want no more at any length, at most 1", k.name, sz.name, allocs, first)
			}
		}
	}
	// A chain of nothing but trusted proxies is read only as far as the
	// bound on hops.
	kf, _ := ClientIP(IPConfig{TrustedProxies: fuzzTrusted})
	var b strings.Builder
	for i := range 10000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("10.0.0." + string(rune('0'+i%10)))
	}
	chain := b.String()
	r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{"X-Forwarded-For": {chain}}}
	if key, _ := kf(r); key != "10.0.0."+string(rune('0'+(10000-maxHops)%10)) {
		t.Errorf("all-trusted chain: key %q, want entry %d from the right", key, maxHops)
	}
	if allocs := testing.AllocsPerRun(20, func() { kf(r) }); allocs > 1 {
		t.Errorf("all-trusted chain: %v allocations", allocs)
	}
}

// BenchmarkClientIP: the key of a request from a trusted proxy whose
// forwarded header carries 1 KiB, 64 KiB or 1 MiB of a client's junk,
// against the reference reading of the whole chain.
func BenchmarkClientIP(b *testing.B) {
	for _, k := range chainKinds {
		kf, err := ClientIP(IPConfig{TrustedProxies: fuzzTrusted, Header: k.header})
		if err != nil {
			b.Fatal(err)
		}
		peer := netip.MustParseAddr("10.0.0.1")
		for _, sz := range chainSizes {
			values := []string{longChain(k.header, sz.size, k.quoted)}
			r := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{k.header: values}}
			b.Run(k.name+"/"+sz.name+"/ClientIP", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					kf(r)
				}
			})
			b.Run(k.name+"/"+sz.name+"/reference", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					refClient(k.header, values, peer, fuzzIsTrusted)
				}
			})
		}
	}
}
