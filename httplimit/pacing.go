package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// DefaultPacerHosts is how many keys (hosts) a Pacer remembers at once
// unless its MaxHosts says otherwise.
const DefaultPacerHosts = 1024

// maxPacePolicies is how many named policies a Pacer remembers per key.
const maxPacePolicies = 8

// maxPaceName is the most bytes of a policy's name a Pacer keeps: a longer
// name is kept by its first maxPaceName bytes (two such names alike that
// far are one policy). Names are copied, so that no header line is kept
// alive by a name cut from it: a key holds at most maxPacePolicies ×
// maxPaceName = 2 KiB of names.
const maxPaceName = 256

// Pacer spaces requests so that a server's remaining quota lasts until it
// resets, as the server's rate-limit headers describe it, instead of
// spending the quota at once and meeting a 429. Transport uses it when its
// Pacer field is set; it can also be used on its own, around any client.
//
// Observe reads a response's headers, in the forms servers send:
//
//	RateLimit: "name";r=42;t=30, "other";r=5;t=2   (draft-ietf-httpapi-ratelimit-headers, as Middleware writes it)
//	RateLimit: limit=100, remaining=42, reset=30  (earlier drafts)
//	RateLimit-Remaining: 42 and RateLimit-Reset: 30  (earlier drafts)
//	X-RateLimit-Remaining: 42 and X-RateLimit-Reset: 30  (seconds, or a Unix time)
//
// Each policy says r requests remain for the next t seconds. Wait then
// spaces the requests of the key t/r apart (the strictest policy's
// spacing, while its t lasts); when a policy has none left (r = 0), it
// holds the key's requests until the policy resets. An X-RateLimit-Reset
// of at least 10⁹ is read as a Unix time (seconds since 1970, as GitHub
// sends it), measured against the response's Date header if it has one;
// a smaller one as seconds from now. A fraction of a second is rounded up.
//
// The headers count time in whole seconds, rounded up, so pacing errs on
// the slow side: it keeps close to the allowed rate when a policy's quota
// is at least a second's worth of requests (against Middleware's token
// bucket, a burst of at least the rate per second), and runs slower than
// allowed, never faster, under a smaller one. It spreads the quota evenly
// rather than spending a burst at once.
//
// Garbage and hostile values are ignored or bounded: a field that does
// not parse is ignored, a wait never exceeds MaxPause and is never
// negative, and memory is bounded in bytes: per key, at most 8 policies
// (maxPacePolicies) whose names are kept copied and cut to 256 bytes
// (maxPaceName), so at most 2 KiB of names and about 600 bytes of
// policies, plus the key itself (copied); at most MaxHosts keys (past
// that, keys whose policies have all reset are dropped first, then any).
// Nothing a header holds is kept beyond that. Pacing is advice taken from the server: the server's
// own limit still decides, and a request refused anyway (429 with
// Retry-After) is Transport's to pause for.
//
// Set the fields before first use and do not change them afterwards. The
// zero Pacer is ready to use; it is safe for concurrent use and must not
// be copied after first use.
type Pacer struct {
	// Clock times the waits; nil means ratelimit.SystemClock(). Use the
	// Transport's clock.
	Clock ratelimit.Clock
	// MaxPause caps every wait and every reset read from a header; 0 (or
	// less) means DefaultMaxPause.
	MaxPause time.Duration
	// MaxHosts bounds the keys remembered; 0 means DefaultPacerHosts.
	MaxHosts int

	mu    sync.Mutex
	hosts map[string]*paceHost
}

// paceHost is what a Pacer knows of one key. Guarded by Pacer.mu.
type paceHost struct {
	policies []pacePolicy // at most maxPacePolicies
	next     time.Time    // the earliest time the next request may go
}

// pacePolicy is one policy's advice, valid until its reset.
type pacePolicy struct {
	name     string
	spacing  time.Duration // between two requests
	hold     time.Time     // no request before then (none remained)
	resetsAt time.Time     // after then the advice is stale
}

func (p *Pacer) clock() ratelimit.Clock {
	if p.Clock == nil {
		return ratelimit.SystemClock()
	}
	return p.Clock
}

func (p *Pacer) maxPause() time.Duration {
	if p.MaxPause <= 0 {
		return DefaultMaxPause
	}
	return p.MaxPause
}

// Observe records the rate-limit headers of a response for key. A
// response without any changes nothing.
func (p *Pacer) Observe(key string, h http.Header) {
	now := p.clock().Now()
	obs := parseQuota(h, now, p.maxPause())
	if len(obs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	host := p.hosts[key]
	if host == nil {
		host = p.newHostLocked(key, now)
	}
	for _, o := range obs {
		pol := pacePolicy{name: o.name, resetsAt: now.Add(o.reset)}
		if o.remaining == 0 {
			pol.hold = pol.resetsAt
		} else {
			pol.spacing = ceilDiv(o.reset, o.remaining)
		}
		host.setLocked(pol)
	}
}

// newHostLocked adds key, making room if MaxHosts are remembered.
// Requires p.mu held.
func (p *Pacer) newHostLocked(key string, now time.Time) *paceHost {
	if p.hosts == nil {
		p.hosts = make(map[string]*paceHost)
	}
	limit := p.MaxHosts
	if limit <= 0 {
		limit = DefaultPacerHosts
	}
	if len(p.hosts) >= limit {
		for k, h := range p.hosts { // keys with nothing left to say go first
			if h.staleAt(now) {
				delete(p.hosts, k)
			}
		}
		for k := range p.hosts { // then any, as many as needed
			if len(p.hosts) < limit {
				break
			}
			delete(p.hosts, k)
		}
	}
	h := &paceHost{}
	p.hosts[strings.Clone(key)] = h // not a part of a larger string kept alive
	return h
}

// staleAt reports whether h has no advice in force at now.
func (h *paceHost) staleAt(now time.Time) bool {
	if h.next.After(now) {
		return false
	}
	for _, pol := range h.policies {
		if pol.resetsAt.After(now) {
			return false
		}
	}
	return true
}

// setLocked replaces the policy of pol's name, or adds it, evicting the
// one that resets first when maxPacePolicies are known. The name is cut
// to maxPaceName bytes, and a new one copied (see maxPaceName).
func (h *paceHost) setLocked(pol pacePolicy) {
	if len(pol.name) > maxPaceName {
		pol.name = pol.name[:maxPaceName]
	}
	for i := range h.policies {
		if h.policies[i].name == pol.name {
			pol.name = h.policies[i].name // the copy already kept
			h.policies[i] = pol
			return
		}
	}
	pol.name = strings.Clone(pol.name)
	if len(h.policies) < maxPacePolicies {
		h.policies = append(h.policies, pol)
		return
	}
	first := 0
	for i := range h.policies {
		if h.policies[i].resetsAt.Before(h.policies[first].resetsAt) {
			first = i
		}
	}
	h.policies[first] = pol
}

// Reserve books the next turn of key and returns it: Delay says how long
// until it, in [0, MaxPause] (0 when the Pacer knows nothing of key), and
// Cancel gives the turn back, if it is not yet due and no later turn was
// booked. Callers that sleep on their own use it; most want Wait.
func (p *Pacer) Reserve(key string) *ratelimit.Reservation {
	clock := p.clock()
	at, undo := p.book(key, clock.Now())
	cancel := func(when time.Time) {
		if when.Before(at) {
			undo()
		}
	}
	return ratelimit.NewReservation(clock, true, ratelimit.Decision{Allowed: true}, at, cancel)
}

// book books the next turn of key at now and returns its time, in
// [now, now+MaxPause], with the function that gives it back if nothing
// was booked after it.
func (p *Pacer) book(key string, now time.Time) (time.Time, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[key]
	if h == nil {
		return now, func() {}
	}
	at := now
	if h.next.After(at) {
		at = h.next
	}
	var spacing time.Duration
	kept := h.policies[:0]
	for _, pol := range h.policies {
		if !pol.resetsAt.After(now) {
			continue // reset: a fresh quota, nothing known of it
		}
		kept = append(kept, pol)
		spacing = max(spacing, pol.spacing)
		if pol.hold.After(at) {
			at = pol.hold
		}
	}
	clear(h.policies[len(kept):])
	h.policies = kept
	if limit := now.Add(p.maxPause()); at.After(limit) {
		at = limit
	}
	next := at.Add(spacing)
	prev := h.next
	h.next = next
	return at, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if h.next.Equal(next) {
			h.next = prev
		}
	}
}

// Wait blocks until key's next turn: at once if the Pacer knows nothing of
// key, else after the spacing its policies ask for, at most MaxPause. If
// the wait would outlast ctx's deadline (measured in real time, whatever
// the Clock) it fails at once with an error matching ratelimit.ErrLimited
// and context.DeadlineExceeded; if ctx ends during the wait, with
// ctx.Err(). A failed wait gives its turn back if no later turn was booked.
func (p *Pacer) Wait(ctx context.Context, key string) error {
	_, err := p.waitTurn(ctx, key)
	return err
}

// waitTurn is Wait, also returning, on success, the function that gives
// the turn back after all (the request was not sent), if no later turn
// was booked.
func (p *Pacer) waitTurn(ctx context.Context, key string) (giveBack func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	clock := p.clock()
	now := clock.Now()
	at, undo := p.book(key, now)
	d := at.Sub(now)
	if d <= 0 {
		return undo, nil
	}
	if dl, ok := ctx.Deadline(); ok && d > time.Until(dl) {
		undo()
		return nil, &ratelimit.LimitError{RetryAfter: d, Deadline: true}
	}
	timer := clock.NewTimer(d)
	select {
	case <-timer.C():
		return undo, nil
	case <-ctx.Done():
		timer.Stop()
		undo()
		return nil, ctx.Err()
	}
}

// quota is one policy as a response describes it.
type quota struct {
	name      string
	remaining int64
	reset     time.Duration // in [0, maxPause]
}

// unixResetFloor: an X-RateLimit-Reset this large is a Unix time (2001 on).
const unixResetFloor = 1_000_000_000

// parseQuota reads every rate-limit header form of h into at most
// maxPacePolicies quotas, ignoring what does not parse.
func parseQuota(h http.Header, now time.Time, maxPause time.Duration) []quota {
	var out []quota
	add := func(q quota) bool {
		if len(out) < maxPacePolicies {
			q.reset = min(max(q.reset, 0), maxPause)
			out = append(out, q)
		}
		return len(out) < maxPacePolicies
	}
	for _, v := range h.Values(hdrRateLimit) {
		if len(out) == maxPacePolicies {
			break
		}
		parseRateLimitField(v, add)
	}
	for _, pair := range [...][2]string{
		{"Ratelimit-Remaining", "Ratelimit-Reset"},
		{hdrXRemaining, hdrXReset},
	} {
		r, okR := parseCount(lastValue(h, pair[0]))
		reset, okT := parseResetValue(lastValue(h, pair[1]), h, now, pair[1] == hdrXReset)
		if okR && okT {
			add(quota{name: pair[0], remaining: r, reset: reset})
		}
	}
	return out
}

func lastValue(h http.Header, key string) string {
	vs := h[key]
	if len(vs) == 0 {
		return ""
	}
	return strings.TrimSpace(vs[len(vs)-1])
}

// parseRateLimitField reads one RateLimit field line: a list of items
// "name";r=R;t=T, or the older dictionary limit=L, remaining=R, reset=T.
// add reports whether it has room for more; reading stops when it has
// not, so a huge line costs no more than its first items.
func parseRateLimitField(v string, add func(quota) bool) {
	if endsInString(v) {
		return // an unterminated string: nothing in this line is reliable
	}
	var old quota
	var oldR, oldT bool
	eachPart(v, ',', func(m string) bool {
		m = strings.TrimSpace(m)
		name, params, _ := cutOutsideString(m, ';')
		name = strings.TrimSpace(name)
		if k, val, ok := strings.Cut(name, "="); ok && !strings.HasPrefix(name, `"`) {
			// The older dictionary form: one member per field.
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "remaining":
				old.remaining, oldR = parseCount(strings.TrimSpace(val))
			case "reset":
				old.reset, oldT = parseSecondsUp(strings.TrimSpace(val))
			}
			return true
		}
		q := quota{name: unquoteString(name)}
		var hasR, hasT bool
		eachPart(params, ';', func(prm string) bool {
			k, val, ok := strings.Cut(prm, "=")
			if !ok {
				return true
			}
			switch strings.TrimSpace(k) {
			case "r":
				q.remaining, hasR = parseCount(strings.TrimSpace(val))
			case "t":
				q.reset, hasT = parseSecondsUp(strings.TrimSpace(val))
			}
			return true
		})
		return !(hasR && hasT) || add(q)
	})
	if oldR && oldT {
		old.name = hdrRateLimit
		add(old)
	}
}

// endsInString reports whether s ends inside a double-quoted string.
func endsInString(s string) bool {
	in := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && in:
			i++
		case s[i] == '"':
			in = !in
		}
	}
	return in
}

// cutOutsideString cuts s at the first sep outside a double-quoted string.
func cutOutsideString(s string, sep byte) (before, after string, found bool) {
	in := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && in:
			i++
		case c == '"':
			in = !in
		case c == sep && !in:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// eachPart calls fn with each part of s between seps outside double-quoted
// strings, left to right, until fn returns false.
func eachPart(s string, sep byte, fn func(string) bool) {
	for {
		part, rest, found := cutOutsideString(s, sep)
		if !fn(part) || !found {
			return
		}
		s = rest
	}
}

// unquoteString returns the content of a Structured Field string, or s if
// it is not one (a token).
func unquoteString(s string) string {
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

// parseResetValue reads a reset field: seconds from now or, for
// X-RateLimit-Reset, a Unix time when at least unixResetFloor.
func parseResetValue(v string, h http.Header, now time.Time, unix bool) (time.Duration, bool) {
	d, ok := parseSecondsUp(v)
	if !ok || !unix || d < unixResetFloor*time.Second {
		return d, ok
	}
	base := now
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		base = date
	}
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return time.Unix(secs, 0).Sub(base), true // Sub saturates
}

// parseCount reads a non-negative decimal integer, saturating at 2⁶²:
// more remaining than any spacing can tell apart from none at all.
func parseCount(v string) (int64, bool) {
	if v == "" || !allDecimal(v) {
		return 0, false
	}
	v = strings.TrimLeft(v, "0")
	if len(v) > 18 {
		return 1 << 62, true
	}
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 1 << 62, true
	}
	return min(n, 1<<62), true
}

// parseSecondsUp reads digits[.digits] seconds as a Duration, a fraction
// rounded up to the second, saturating at the longest Duration.
func parseSecondsUp(v string) (time.Duration, bool) {
	whole, frac, dot := strings.Cut(v, ".")
	if whole == "" || dot && frac == "" || !allDecimal(whole) || !allDecimal(frac) {
		return 0, false
	}
	secs, _ := parseCount(whole)
	if strings.Trim(frac, "0") != "" {
		secs++
	}
	const maxSecs = int64(1<<63-1) / int64(time.Second)
	if secs >= maxSecs {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(secs) * time.Second, true
}

func allDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ceilDiv is ⌈d / n⌉ for d >= 0, n > 0.
func ceilDiv(d time.Duration, n int64) time.Duration {
	q := int64(d) / n
	if int64(d)%n != 0 {
		q++
	}
	return time.Duration(q)
}
