package httplimit

import (
	"net/http"
	"net/netip"

	"github.com/ratelimitkit/ratelimit/internal/netmatch"

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
	return who.IP != "" && len(e.prefixes) > 0 && netmatch.Covers(e.prefixes, who.IP)
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
