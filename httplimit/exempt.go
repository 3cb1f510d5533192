package httplimit

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimitkit/ratelimit"
)

// exempt is what WithExempt and WithExemptUsers gave: client addresses
// (IPv4 unmapped) and user ids that the middleware never limits.
type exempt struct {
	prefixes []netip.Prefix
	users    map[string]bool
}

func (e *exempt) ip() bool   { return len(e.prefixes) > 0 }
func (e *exempt) user() bool { return len(e.users) > 0 }
func (e *exempt) any() bool  { return e.ip() || e.user() }

// covers reports whether who is exempt by the options. A key function's
// error left who's field "": nothing is exempt by it.
func (e *exempt) covers(who ratelimit.Subject) bool {
	if who.User != "" && e.users[who.User] {
		return true
	}
	return who.IP != "" && len(e.prefixes) > 0 && prefixesCover(e.prefixes, who.IP)
}

// subject reads what the exemptions compare: the client address by the
// WithClientIP function (if ip), the user by WithUser's (if user). A
// function that fails leaves its field "".
func (c *response) subject(r *http.Request, ip, user bool) ratelimit.Subject {
	var who ratelimit.Subject
	var err error
	if ip {
		if who.IP, err = c.ip(r); err != nil {
			who.IP = ""
		}
	}
	if user && c.user != nil {
		if who.User, err = c.user(r); err != nil {
			who.User = ""
		}
	}
	return who
}

// prefixesCover reports whether key, a client address as a key function
// gives it ("192.0.2.7", "::ffff:10.1.2.3") or an address group
// ("2001:db8:1:2::/64"), lies wholly inside one of ps. It does not
// allocate.
func prefixesCover(ps []netip.Prefix, key string) bool {
	var a netip.Addr
	var bits int
	if strings.IndexByte(key, '/') >= 0 {
		p, err := netip.ParsePrefix(key)
		if err != nil {
			return false
		}
		p = unmapPrefix(p)
		a, bits = p.Addr(), p.Bits()
	} else {
		var err error
		if a, err = netip.ParseAddr(key); err != nil {
			return false
		}
		a = a.Unmap().WithZone("")
		bits = a.BitLen()
	}
	for _, p := range ps {
		if p.Bits() <= bits && p.Contains(a) {
			return true
		}
	}
	return false
}

// unmapPrefix returns p masked, an IPv4-mapped prefix of at least /96
// written as IPv4 (::ffff:10.0.0.0/104 is 10.0.0.0/8), without a zone.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}
