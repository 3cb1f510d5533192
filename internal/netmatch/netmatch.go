// Package netmatch matches client addresses against address prefixes, for
// the exemptions of the rules (the core) and of the middlewares
// (httplimit), which must agree.
package netmatch

import (
	"net/netip"
	"strings"
)

// Covers reports whether ip, a client address as a key function gives it
// ("192.0.2.7", "::ffff:10.1.2.3") or an address group
// ("2001:db8:1:2::/64"), lies wholly inside one of ps: a group is covered
// only by a prefix at least as wide, never by one address of it. The
// prefixes must have been through Unmap. It does not allocate.
func Covers(ps []netip.Prefix, ip string) bool {
	var a netip.Addr
	var bits int
	if strings.IndexByte(ip, '/') >= 0 {
		p, err := netip.ParsePrefix(ip)
		if err != nil {
			return false
		}
		p = Unmap(p)
		a, bits = p.Addr(), p.Bits()
	} else {
		var err error
		if a, err = netip.ParseAddr(ip); err != nil {
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

// Unmap returns p masked and without a zone, an IPv4-mapped prefix of at
// least /96 written as IPv4 (::ffff:10.0.0.0/104 is 10.0.0.0/8); a mapped
// prefix shorter than /96 stays IPv6.
func Unmap(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}
