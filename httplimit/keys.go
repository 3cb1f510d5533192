package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit"
)

// ErrNoKey is ratelimit.ErrNoKey: a request carries no usable key. Key
// functions return errors matching it; the middleware then refuses the
// request through its error handler (by default 403 Forbidden), never
// letting it through unlimited.
var ErrNoKey = ratelimit.ErrNoKey

// KeyFunc returns the key a request is limited by, or an error (matching
// ErrNoKey when the request simply has no such key).
//
// A key is whatever the function says it is: the limiter cannot tell a
// genuine user id from one a client made up. Derive keys from what the
// client cannot choose (the connection's address, an authenticated
// identity), or expect a client to rotate through fresh keys.
type KeyFunc func(r *http.Request) (string, error)

// IPConfig says how ClientIP finds and groups a client's address.
//
// Forwarded headers are believed only from proxies in TrustedProxies,
// because any client can send them. Behind such proxies the client is the
// right-most address in the chain that is not a trusted proxy: each
// trusted proxy appends the address it received the request from, so
// that address is the first one no trusted party vouches for beyond it;
// everything to its left is the client's to invent.
//
// The chain is read from the right, and reading stops at that address, so
// the cost of a request does not grow with what a client adds on the left:
// nothing is allocated for the chain, and at most 32 entries are read (a
// chain of more trusted proxies than that is keyed by the 32nd from the
// right). An entry that is not an address also stops the reading, and the
// last address read is the client: "unknown", an obfuscated identifier,
// an X-Forwarded-For entry longer than 256 bytes or a Forwarded element
// longer than 1024, and the last element of a Forwarded line that ends
// inside a quoted string (a client's open quote could swallow what a
// proxy appends to its line). A Forwarded line holding a quote is scanned
// once in full, to find its quoted strings, and so is not read at all if
// it is longer than 8 KiB: its last element counts as not an address (the
// client is then the last address read, the peer's if it is the last
// line). Other lines are read from their end only.
type IPConfig struct {
	// TrustedProxies lists the addresses of your own proxies (load
	// balancers, CDN egress ranges). Empty: the connection's address
	// (RemoteAddr) is the client, and every forwarded header is ignored.
	TrustedProxies []netip.Prefix
	// Header names the one forwarded header your trusted proxies set:
	// "X-Forwarded-For" (the default), "Forwarded" (RFC 7239) or
	// "X-Real-IP". Only that header is read: a client could send the
	// others, and a proxy that does not know them passes them on.
	Header string
	// IPv6Prefix is how many leading bits of an IPv6 address make the key
	// (default 64): one host usually holds a whole /64 and could rotate
	// through it. 128 limits each address on its own.
	IPv6Prefix int
	// IPv4Prefix is how many leading bits of an IPv4 address make the key
	// (default 32: each address on its own).
	IPv4Prefix int
}

// ParsePrefixes parses addresses and CIDR prefixes, such as "10.0.0.0/8",
// "192.0.2.7" or "2001:db8::/32", for IPConfig.TrustedProxies and
// WithExempt. A bare address stands for itself alone (/32 or /128). A
// prefix must be written as its network: "10.1.2.3/8" is refused (it
// would trust or exempt the whole of 10.0.0.0/8, most likely not what was
// meant), and so is a prefix of length 0, which would take in every
// address.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("httplimit: prefix %q: %w", v, err)
			}
			if p.Bits() == 0 {
				return nil, fmt.Errorf("httplimit: prefix %q takes in every address: list your proxies' or networks' own prefixes", v)
			}
			if p.Masked() != p {
				return nil, fmt.Errorf("httplimit: prefix %q has address bits past its length: write %v for the network, or %v for the one address", v, p.Masked(), p.Addr())
			}
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("httplimit: address %q: %w", v, err)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ByIP returns the default key function: the connection's address
// (RemoteAddr), IPv6 grouped by /64, no forwarded header believed. For an
// IPv4 client the key is the address as RemoteAddr writes it, with no
// allocation.
func ByIP() KeyFunc {
	f, _ := ClientIP(IPConfig{})
	return f
}

// ClientIP returns a key function by client address under cfg. The key of
// an address is the address itself ("192.0.2.1", "2001:db8::1") when all
// its bits count, else its prefix ("2001:db8:1:2::/64"); an IPv4 address
// mapped into IPv6 is keyed as IPv4. A request whose RemoteAddr is not an
// IP address (a Unix socket) gets an error matching ErrNoKey.
//
// It returns an error if a prefix length is out of range, Header is not
// one of the three it knows, or a trusted proxy prefix has length 0:
// trusting every address as a proxy would let any client choose its own
// key by writing the header.
func ClientIP(cfg IPConfig) (KeyFunc, error) {
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = 64
	}
	if cfg.IPv4Prefix == 0 {
		cfg.IPv4Prefix = 32
	}
	if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
		return nil, fmt.Errorf("httplimit: IPv6 prefix must be in [1, 128], got %d", cfg.IPv6Prefix)
	}
	if cfg.IPv4Prefix < 1 || cfg.IPv4Prefix > 32 {
		return nil, fmt.Errorf("httplimit: IPv4 prefix must be in [1, 32], got %d", cfg.IPv4Prefix)
	}
	var walk func(c *clientIP, values []string, client netip.Addr) netip.Addr
	switch http.CanonicalHeaderKey(cfg.Header) {
	case "", "X-Forwarded-For":
		cfg.Header, walk = "X-Forwarded-For", (*clientIP).walkXFF
	case "Forwarded":
		cfg.Header, walk = "Forwarded", (*clientIP).walkForwarded
	case "X-Real-Ip":
		cfg.Header, walk = "X-Real-Ip", (*clientIP).walkRealIP
	default:
		return nil, fmt.Errorf("httplimit: forwarded header %q is not X-Forwarded-For, Forwarded or X-Real-IP", cfg.Header)
	}
	c := &clientIP{cfg: cfg, walk: walk}
	for _, p := range cfg.TrustedProxies {
		if p.IsValid() && p.Bits() == 0 {
			return nil, fmt.Errorf("httplimit: trusted proxy prefix %v trusts every address: any client could choose its own key by sending %s; list your proxies' prefixes", p, cfg.Header)
		}
		c.trusted = append(c.trusted, p.Masked())
	}
	return c.key, nil
}

type clientIP struct {
	cfg     IPConfig
	trusted []netip.Prefix
	walk    func(c *clientIP, values []string, client netip.Addr) netip.Addr
}

// Bounds on what ClientIP reads of a forwarded chain, so that its cost is
// bounded by the hops it examines, whatever a client sends: it reads the
// chain from the right and stops at the first address no trusted proxy
// vouches for, at the first entry that is not an address, or after
// maxHops entries (then the client is the last of them, a trusted proxy:
// no real chain of proxies is that long).
const (
	maxHops = 32
	// maxEntry is the longest X-Forwarded-For or X-Real-IP entry read as
	// an address, spaces included: the longest address with a port is 47
	// bytes. A longer entry is not an address.
	maxEntry = 256
	// maxElement is the longest Forwarded element (its for=, by=, host=
	// and proto= together) read; a longer one is not an address.
	maxElement = 1024
	// maxQuotedLine is the longest Forwarded line holding a quote that is
	// read: such a line is scanned whole, so a longer one is not read at
	// all, as if its last element were not an address (a real chain of
	// maxHops quoted elements is a few KiB).
	maxQuotedLine = 8 << 10
)

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, host, plain4, ok := remoteAddr(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	client := peer
	if len(c.trusted) > 0 && c.isTrusted(peer) {
		if values := r.Header.Values(c.cfg.Header); len(values) > 0 {
			client = c.walk(c, values, peer)
		}
	}
	if client == peer && plain4 && c.cfg.IPv4Prefix == 32 {
		return host, nil // canonical already: ParseAddr accepts no other form
	}
	return c.format(client), nil
}

func (c *clientIP) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (c *clientIP) format(a netip.Addr) string {
	bits := c.cfg.IPv6Prefix
	if a.Is4() {
		bits = c.cfg.IPv4Prefix
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// remoteAddr parses a RemoteAddr ("192.0.2.1:1234", "[2001:db8::1]:80",
// or an address alone), returning the address unmapped and without zone,
// the host part as written, and whether that host part is a plain IPv4
// address (hence canonical: netip accepts no other form of one).
func remoteAddr(s string) (a netip.Addr, host string, plain4, ok bool) {
	host = s
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a, host = ap.Addr(), s[:strings.LastIndexByte(s, ':')]
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, "", false, false
	}
	return a.Unmap().WithZone(""), host, a.Is4(), true
}

// hops walks a forwarding chain from the right, one entry at a time, and
// returns the client: the right-most address that is not a trusted proxy,
// or the last address read before an entry that is not an address (the
// last one a trusted proxy vouched for), or the maxHops-th.
type hops struct {
	c      *clientIP
	client netip.Addr
	n      int
}

// next takes the next entry leftwards, and reports whether to go on.
func (h *hops) next(a netip.Addr, ok bool) bool {
	if !ok {
		return false // keep the last address vouched for: the proxy's
	}
	h.client, h.n = a, h.n+1
	return h.c.isTrusted(a) && h.n < maxHops
}

// walkXFF reads X-Forwarded-For lines from the right: the last line
// first, each from its end.
func (c *clientIP) walkXFF(values []string, client netip.Addr) netip.Addr {
	h := hops{c: c, client: client}
	for i := len(values) - 1; i >= 0; i-- {
		line := values[i]
		for {
			entry, rest, more := lastEntry(line, ',', maxEntry)
			a, ok := parseHost(entry)
			if !h.next(a, ok) {
				return h.client
			}
			if !more {
				break
			}
			line = rest
		}
	}
	return h.client
}

// walkRealIP reads the last X-Real-IP line as a chain of one address.
func (c *clientIP) walkRealIP(values []string, client netip.Addr) netip.Addr {
	h := hops{c: c, client: client}
	line := values[len(values)-1]
	if len(line) <= maxEntry {
		h.next(parseHost(line))
	}
	return h.client
}

// lastEntry splits line at its last sep, looking at no more than max+1
// bytes: an entry longer than max comes back as "", which is not an
// address. more reports whether there is anything left of the entry.
func lastEntry(line string, sep byte, max int) (entry, rest string, more bool) {
	tail := line
	if len(tail) > max+1 {
		tail = tail[len(tail)-max-1:]
	}
	if j := strings.LastIndexByte(tail, sep); j >= 0 {
		j += len(line) - len(tail)
		return line[j+1:], line[:j], true
	}
	if len(line) > max {
		return "", "", false
	}
	return line, "", false
}

// walkForwarded reads the for= parameter of each element of RFC 7239
// Forwarded lines, from the right. An element without one, or with
// "unknown" or an obfuscated identifier, is not an address. Nor is the
// last element of a line that ends inside a quoted string: a client can
// open a quote that swallows what a proxy appends to its line, so nothing
// after the quote is believed. Elements are split at commas outside
// quoted strings, read left to right: so a line that holds a quote is
// scanned once in full (without allocating) to find where its quoted
// strings are, and is not read if longer than maxQuotedLine; a line
// without one is read from its end only.
func (c *clientIP) walkForwarded(values []string, client netip.Addr) netip.Addr {
	h := hops{c: c, client: client}
	for i := len(values) - 1; i >= 0; i-- {
		line := values[i]
		if strings.IndexByte(line, '"') < 0 {
			for {
				elem, rest, more := lastEntry(line, ',', maxElement)
				if !h.next(forwardedFor(elem)) {
					return h.client
				}
				if !more {
					break
				}
				line = rest
			}
			continue
		}
		if len(line) > maxQuotedLine {
			return h.client // not an address: too long to scan whole
		}
		// The separators outside quoted strings, the last maxHops of them.
		var ring [maxHops]int
		n, open := 0, false
		for j := 0; j < len(line); j++ {
			switch ch := line[j]; {
			case ch == '\\' && open:
				j++
			case ch == '"':
				open = !open
			case ch == ',' && !open:
				ring[n%maxHops] = j
				n++
			}
		}
		end := len(line)
		for k := n - 1; ; k-- {
			start := 0
			if k >= 0 {
				if n-1-k >= maxHops {
					return h.client // beyond the ring: more than maxHops read
				}
				start = ring[k%maxHops] + 1
			}
			elem := line[start:end]
			var a netip.Addr
			ok := false
			if !(open && end == len(line)) && len(elem) <= maxElement {
				a, ok = forwardedFor(elem)
			}
			if !h.next(a, ok) {
				return h.client
			}
			if k < 0 {
				break
			}
			end = start - 1
		}
	}
	return h.client
}

// forwardedFor returns the address of the last for= parameter of a
// Forwarded element, whose parameters are split at semicolons outside
// quoted strings.
func forwardedFor(elem string) (netip.Addr, bool) {
	if len(elem) > maxElement {
		return netip.Addr{}, false
	}
	var a netip.Addr
	ok := false
	take := func(pair string) {
		k, v, found := strings.Cut(pair, "=")
		if found && strings.EqualFold(strings.TrimSpace(k), "for") {
			a, ok = parseQuotedHost(strings.TrimSpace(v))
		}
	}
	start, open := 0, false
	for j := 0; j < len(elem); j++ {
		switch ch := elem[j]; {
		case ch == '\\' && open:
			j++
		case ch == '"':
			open = !open
		case ch == ';' && !open:
			take(elem[start:j])
			start = j + 1
		}
	}
	take(elem[start:])
	return a, ok
}

// parseQuotedHost parses a for= value: an address as parseHost reads it,
// or one in an HTTP quoted-string. Unescaping needs a copy; only a value
// holding a backslash gets one.
func parseQuotedHost(s string) (netip.Addr, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return parseHost(s)
	}
	s = s[1 : len(s)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return parseHost(s)
	}
	var buf [maxElement]byte
	b := buf[:0]
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b = append(b, s[i])
	}
	return parseHost(string(b))
}

// parseHost parses one forwarded address: "192.0.2.1", "192.0.2.1:80",
// "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80", returned unmapped
// and without zone.
func parseHost(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && s[end+1] != ':') {
			return netip.Addr{}, false
		}
		s = s[1:end]
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		s = s[:i]
	}
	a, ok := parseAddrNoZone(s)
	return a.Unmap(), ok
}

// parseAddrNoZone is netip.ParseAddr(s) without the zone, which it drops
// before parsing rather than after: netip interns every zone it keeps,
// and a client may send a new one with each request.
func parseAddrNoZone(s string) (netip.Addr, bool) {
	if z := strings.IndexByte(s, '%'); z >= 0 {
		// ParseAddr takes a zone only on an IPv6 address, that is when the
		// first of '.', ':' and '%' is a ':'; and a zone must not be empty.
		if i := strings.IndexAny(s, ".:%"); s[i] != ':' || z == len(s)-1 {
			return netip.Addr{}, false
		}
		s = s[:z]
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// ByHeader returns a key function by the value of a request header, such
// as an API key. A missing or empty header gets an error matching
// ErrNoKey. Any client can send any value: limit by a header only after
// checking it (authentication before the limiter), or combine it with the
// address (Join).
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
}

// ByUser returns a key function by authenticated user: user returns the
// user's id and true, or false for an anonymous request, which gets an
// error matching ErrNoKey. Use Either(ByUser(f), ByIP()) to limit
// anonymous requests by address instead.
func ByUser(user func(r *http.Request) (id string, ok bool)) KeyFunc {
	return func(r *http.Request) (string, error) {
		if id, ok := user(r); ok && id != "" {
			return id, nil
		}
		return "", fmt.Errorf("%w: no authenticated user", ErrNoKey)
	}
}

// ByPattern returns a key function by the route pattern that matched the
// request, Request.Pattern, such as "POST /posts/{id}": one allowance per
// endpoint, whatever the path's values. Pattern is set by ServeMux when it
// routes, so the middleware must wrap the handler registered on the mux,
// not the mux itself; an empty Pattern gets an error matching ErrNoKey.
func ByPattern() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern != "" {
			return r.Pattern, nil
		}
		return "", fmt.Errorf("%w: request has no route pattern (wrap the handler, not the mux)", ErrNoKey)
	}
}

// Constant returns a key function that gives every request the same key:
// one allowance shared by all.
func Constant(key string) KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// Either returns a key function that tries fns in order and returns the
// first key found; if none finds one, the last error.
func Either(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var err error
		for _, f := range fns {
			var k string
			if k, err = f(r); err == nil {
				return k, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: no key function", ErrNoKey)
		}
		return "", err
	}
}

// Join returns a key function whose key combines the keys of all fns, such
// as Join(ByPattern(), ByIP()) for an allowance per endpoint per address.
// The parts are length-prefixed, so distinct tuples never share a key. If
// one fails, Join returns its error.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b []byte
		for _, f := range fns {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}
}
