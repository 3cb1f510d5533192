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
// "192.0.2.7" or "2001:db8::/32", for IPConfig.TrustedProxies. A bare
// address stands for itself alone (/32 or /128).
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", v, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", v, err)
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
// It returns an error if a prefix length is out of range or Header is not
// one of the three it knows.
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
	var parse func(values []string) []hop
	switch http.CanonicalHeaderKey(cfg.Header) {
	case "", "X-Forwarded-For":
		cfg.Header, parse = "X-Forwarded-For", parseXFF
	case "Forwarded":
		cfg.Header, parse = "Forwarded", parseForwarded
	case "X-Real-Ip":
		cfg.Header, parse = "X-Real-Ip", parseRealIP
	default:
		return nil, fmt.Errorf("httplimit: forwarded header %q is not X-Forwarded-For, Forwarded or X-Real-IP", cfg.Header)
	}
	c := &clientIP{cfg: cfg, parse: parse}
	for _, p := range cfg.TrustedProxies {
		c.trusted = append(c.trusted, p.Masked())
	}
	return c.key, nil
}

type clientIP struct {
	cfg     IPConfig
	trusted []netip.Prefix
	parse   func(values []string) []hop
}

// hop is one address of a forwarding chain; ok is false for an entry that
// is not an address ("unknown", an obfuscated id, garbage).
type hop struct {
	addr netip.Addr
	ok   bool
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, host, plain4, ok := remoteAddr(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	client := peer
	if len(c.trusted) > 0 && c.isTrusted(peer) {
		if values := r.Header.Values(c.cfg.Header); len(values) > 0 {
			hops := c.parse(values)
			for i := len(hops) - 1; i >= 0; i-- {
				h := hops[i]
				if !h.ok {
					break // keep the last address vouched for: the proxy's
				}
				client = h.addr
				if !c.isTrusted(h.addr) {
					break
				}
			}
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

// parseHost parses one forwarded address: "192.0.2.1", "192.0.2.1:80",
// "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80".
func parseHost(s string) hop {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && s[end+1] != ':') {
			return hop{}
		}
		s = s[1:end]
	} else if strings.Count(s, ":") == 1 {
		s = s[:strings.IndexByte(s, ':')]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return hop{}
	}
	return hop{addr: a.Unmap().WithZone(""), ok: true}
}

// parseXFF reads X-Forwarded-For lines, left to right.
func parseXFF(values []string) []hop {
	var hops []hop
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			hops = append(hops, parseHost(e))
		}
	}
	return hops
}

// parseRealIP reads the last X-Real-IP line as a chain of one address.
func parseRealIP(values []string) []hop {
	return []hop{parseHost(values[len(values)-1])}
}

// parseForwarded reads the for= parameter of each element of RFC 7239
// Forwarded lines, left to right. An element without one, or with
// "unknown" or an obfuscated identifier, is not an address.
func parseForwarded(values []string) []hop {
	var hops []hop
	for _, v := range values {
		for _, elem := range splitQuoted(v, ',') {
			h := hop{}
			for _, pair := range splitQuoted(elem, ';') {
				k, val, ok := strings.Cut(pair, "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
					continue
				}
				h = parseHost(unquote(strings.TrimSpace(val)))
			}
			hops = append(hops, h)
		}
	}
	return hops
}

// unquote returns the content of an HTTP quoted-string, or s if it is not
// one.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
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
