package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/route"
)

// Trace is the requests of one scope (per ip, per user, global), and of
// one class if one is given, held for Suggest: each request's time and
// key, 12 bytes a request (unlike a replay, it is held whole: Suggest
// passes over it many times).
type Trace struct {
	keyer
	scope   ratelimit.Scope
	mux     *http.ServeMux // nil: every request
	class   string
	matches map[string]bool
	rbuf    []byte
	reqs    []traced
	ids     map[string]int32
	names   []string
	// Lines, BadLines, NoKey and Other count the lines read, the lines
	// that could not be, the requests of the class without the key the
	// scope needs, and the requests of other classes.
	Lines, BadLines, NoKey, Other int64
}

type traced struct {
	t   int64
	key int32
}

// NewTrace returns an empty trace of the requests of class (a ServeMux
// pattern; "" or "*" for every request) keyed by scope.
func NewTrace(scope ratelimit.Scope, class string, ipv6Prefix int) (*Trace, error) {
	if scope != ratelimit.PerIP && scope != ratelimit.PerUser && scope != ratelimit.Global {
		return nil, fmt.Errorf("unknown scope %v", scope)
	}
	if ipv6Prefix == 0 {
		ipv6Prefix = 64
	}
	if ipv6Prefix < 1 || ipv6Prefix > 128 {
		return nil, fmt.Errorf("IPv6 prefix must be in [1, 128], got %d", ipv6Prefix)
	}
	t := &Trace{keyer: newKeyer(ipv6Prefix), scope: scope, ids: make(map[string]int32), matches: make(map[string]bool)}
	if class != "" && class != "*" {
		mux, err := route.Mux([]string{class})
		if err != nil {
			return nil, err
		}
		t.mux, t.class = mux, class
	}
	return t, nil
}

// Malformed counts a line that could not be read.
func (t *Trace) Malformed(string, int64, error) { t.Lines++; t.BadLines++ }

// Add records the request of one line if it is of the trace's class.
func (t *Trace) Add(_ string, _ int64, e *accesslog.Entry) {
	t.Lines++
	if t.mux != nil && !t.match(e.Method, e.Path) {
		t.Other++
		return
	}
	var key string
	switch t.scope {
	case ratelimit.PerIP:
		key = t.ipKey(e.IP)
	case ratelimit.PerUser:
		key = t.userKey(e.User)
	}
	if key == "" && t.scope != ratelimit.Global {
		t.NoKey++
		return
	}
	id, ok := t.ids[key]
	if !ok {
		id = int32(len(t.names))
		t.ids[key] = id
		t.names = append(t.names, key)
	}
	t.reqs = append(t.reqs, traced{t: e.Time, key: id})
}

func (t *Trace) match(method, target []byte) bool {
	path := target
	if i := indexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	t.rbuf = append(append(append(t.rbuf[:0], method...), ' '), path...)
	if m, ok := t.matches[string(t.rbuf)]; ok {
		return m
	}
	m := false
	if req := requestOf(string(method), string(path)); req != nil {
		_, pattern := t.mux.Handler(req)
		m = pattern == t.class
	}
	if len(t.matches) >= maxRoutes {
		clear(t.matches)
	}
	t.matches[string(t.rbuf)] = m
	return m
}

// Requests returns how many requests the trace holds, and Keys how many
// distinct keys.
func (t *Trace) Requests() int { return len(t.reqs) }

// Keys returns how many distinct keys made the trace's requests.
func (t *Trace) Keys() int { return len(t.names) }

// Span returns the first and last instants of the trace.
func (t *Trace) Span() (first, last time.Time) {
	t.sort()
	if len(t.reqs) == 0 {
		return
	}
	return time.Unix(0, t.reqs[0].t).UTC(), time.Unix(0, t.reqs[len(t.reqs)-1].t).UTC()
}

func (t *Trace) sort() {
	slices.SortStableFunc(t.reqs, func(a, b traced) int { return cmp.Compare(a.t, b.t) })
}

// Outcome is what a token bucket of a given rate and burst refuses of the
// trace.
type Outcome struct {
	Burst       int     `json:"burst"`
	Refused     int64   `json:"refused"`      // requests refused
	KeysRefused int64   `json:"keys_refused"` // keys refused at least once
	Share       float64 `json:"share"`
	KeyShare    float64 `json:"key_share"`
}

// Cell is the answer for one rate and one target: the smallest burst whose
// share refused is at most the target, and what one less refuses (nil when
// the burst is 1). For the other algorithms (SuggestAlgorithm), Burst is
// the limit searched; Unmet says no limit meets the target, At then being
// the outcome at the largest limit tried.
type Cell struct {
	Target  float64  `json:"target"`
	At      Outcome  `json:"at"`
	Smaller *Outcome `json:"one_less,omitempty"`
	Unmet   bool     `json:"unmet,omitempty"`
}

// Row is the answers for one rate: NoRefusal is the smallest burst that
// refuses nothing, computed from the trace directly. For the other
// algorithms (SuggestAlgorithm) it is the smallest limit that refuses
// nothing, 0 for a leaky bucket's rate that refuses something at every
// capacity; a window's row has Rate NoRefusal per the window.
type Row struct {
	Rate      ratelimit.Rate
	NoRefusal int
	Cells     []Cell
}

// Suggest returns, for each rate and each target share (of the requests
// refused, or of the keys refused at least once if ofKeys), the smallest
// burst of a token bucket at that rate that meets the target on the trace.
//
// The burst that refuses nothing follows from the trace: replaying every
// request as allowed, a key's backlog (its theoretical arrival time past
// the request's instant, in units of the rate's interval) after each
// request is the burst it needs; the largest over the trace is the answer.
// Below it, refusals change the backlog, and the smallest burst meeting a
// share is found by bisection between 0 and that burst, each step a replay
// of the trace through the library's token bucket; the answer is checked
// the way the bisection ends: the burst meets the target and one less does
// not (Cell.Smaller).
func (t *Trace) Suggest(rates []ratelimit.Rate, targets []float64, ofKeys bool) ([]Row, error) {
	if len(t.reqs) == 0 {
		return nil, errors.New("no requests in the trace")
	}
	for _, p := range targets {
		if !(p >= 0 && p < 1) {
			return nil, fmt.Errorf("target share %v is not in [0, 1)", p)
		}
	}
	t.sort()
	var rows []Row
	for _, rate := range rates {
		if !rate.Valid() {
			return nil, fmt.Errorf("invalid rate %v", rate)
		}
		zero, err := t.noRefusalBurst(rate)
		if err != nil {
			return nil, err
		}
		row := Row{Rate: rate, NoRefusal: zero}
		memo := map[int]Outcome{}
		eval := func(b int) (Outcome, error) {
			if o, ok := memo[b]; ok {
				return o, nil
			}
			o, err := t.Replay(rate, b)
			if err == nil {
				memo[b] = o
			}
			return o, err
		}
		for _, p := range targets {
			meets := func(o Outcome) bool {
				if ofKeys {
					return float64(o.KeysRefused) <= p*float64(len(t.names))
				}
				return float64(o.Refused) <= p*float64(len(t.reqs))
			}
			lo, hi := 0, zero // lo fails (burst 0 refuses everything), hi meets
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				o, err := eval(mid)
				if err != nil {
					return nil, err
				}
				if meets(o) {
					hi = mid
				} else {
					lo = mid
				}
			}
			at, err := eval(hi)
			if err != nil {
				return nil, err
			}
			c := Cell{Target: p, At: at}
			if hi > 1 {
				s, err := eval(hi - 1)
				if err != nil {
					return nil, err
				}
				c.Smaller = &s
			}
			row.Cells = append(row.Cells, c)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// noRefusalBurst is the largest backlog of any key with every request
// allowed, in whole intervals, rounded up: exact, in units of 1/N ns.
func (t *Trace) noRefusalBurst(rate ratelimit.Rate) (int, error) {
	n, period := uint64(rate.N), uint64(rate.Period)
	t0 := t.reqs[0].t
	tat := make([]uint64, len(t.names)) // scaled: ns × N since t0
	var worst uint64
	for _, r := range t.reqs {
		hi, now := bits.Mul64(uint64(r.t-t0), n)
		if hi != 0 {
			return 0, fmt.Errorf("rate %v over a trace of %v is beyond the exact arithmetic", rate, time.Duration(r.t-t0))
		}
		k := &tat[r.key]
		*k = max(*k, now) + period
		if *k < period {
			return 0, fmt.Errorf("rate %v over this trace is beyond the exact arithmetic", rate)
		}
		worst = max(worst, *k-now)
	}
	b := (worst + period - 1) / period
	if b > math.MaxInt32 {
		return 0, fmt.Errorf("rate %v would need a burst of %d", rate, b)
	}
	return int(b), nil
}

// Replay runs the trace through the library's token bucket of rate and
// burst, on a clock set from the trace, and counts what it refuses.
func (t *Trace) Replay(rate ratelimit.Rate, burst int) (Outcome, error) {
	o := Outcome{Burst: burst}
	if burst == 0 {
		o.Refused, o.KeysRefused = int64(len(t.reqs)), int64(len(t.names))
		o.Share, o.KeyShare = 1, 1
		return o, nil
	}
	c := &Clock{}
	tb, err := ratelimit.NewTokenBucket(rate, burst, ratelimit.WithClock(c))
	if err != nil {
		return o, err
	}
	defer tb.Close()
	hit := make([]bool, len(t.names))
	for _, r := range t.reqs {
		c.set(r.t)
		if !tb.Allow(t.names[r.key]) {
			o.Refused++
			if !hit[r.key] {
				hit[r.key] = true
				o.KeysRefused++
			}
		}
	}
	o.Share = float64(o.Refused) / float64(len(t.reqs))
	o.KeyShare = float64(o.KeysRefused) / float64(len(t.names))
	return o, nil
}

// ParseScope reads "ip", "per ip", "user", "per user" or "global".
func ParseScope(s string) (ratelimit.Scope, error) {
	switch strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "per ")) {
	case "ip":
		return ratelimit.PerIP, nil
	case "user":
		return ratelimit.PerUser, nil
	case "global":
		return ratelimit.Global, nil
	}
	return 0, fmt.Errorf("unknown scope %q: want ip, user or global", s)
}
