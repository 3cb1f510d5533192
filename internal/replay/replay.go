// Package replay runs the requests of access logs through rules on a clock
// driven by the logs' timestamps, and reports what the rules would have
// refused.
//
// Rules:
//  1. Each request is decided by the rules' own Check, at the instant its
//     log line names, through the limiters ParseRules builds: the decision
//     is the one the in-process limiters make fed the same trace, request
//     for request (the property test checks it for the five algorithms).
//  2. Requests are decided in time order, ties in the order read. Each
//     line is held back until a line later than it by more than the
//     reorder window has been read (or the input ends). A line earlier
//     than the last instant decided is late: it is counted, the first few
//     are reported, and it is decided at that last instant (the clock
//     never goes back).
//  3. Memory is bounded by the keys held, not by the length of the logs:
//     the limiters hold at most the key cap, the reorder buffer at most
//     the lines of one window, the interned keys and routes at most a
//     fixed number each (then they start afresh), the refused keys
//     counted per rule at most MaxTracked (then distinct counts are lower
//     bounds, flagged).
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/route"
)

// RuleFile is one set of rules to replay, as ParseRules reads it.
type RuleFile struct {
	Name string // how the report names the set (a file name)
	Text string
}

// Options configures a replay. The zero value is usable.
type Options struct {
	// MaxKeys caps the keys each limiter holds (WithMaxKeys); 0: 1,000,000.
	MaxKeys int
	// Reorder is how long a line may be held back for earlier ones.
	Reorder time.Duration
	// IPv6Prefix groups IPv6 clients, as httplimit.ClientIP does; 0: 64.
	IPv6Prefix int
	// MaxTracked bounds the refused keys counted per rule; 0: 1<<20.
	MaxTracked int
	// Samples is how many malformed and late lines are quoted; 0: 5.
	Samples int
	// Top is how many of the keys refused most are listed; 0: 5.
	Top int
	// Decided, if not nil, is told each decision: the index of the set,
	// the subject and the set's MultiDecision (nil for an exempt request
	// or one without a key).
	Decided func(set int, at time.Time, who ratelimit.Subject, d *ratelimit.MultiDecision)
	// Detail keeps, per rule, the requests seen and refused minute by
	// minute and each key's peak count per rate period, for the HTML
	// report (Report.Sets[i].Rules[j].Minutes and PeakRates); it costs a
	// map update per rule and request, and memory per minute of the logs
	// and per key (at most MaxTracked keys per rule).
	Detail bool
	// Build, if not nil, builds a set's rules instead of ParseRules(text,
	// opts...); tests use it to replay other algorithms.
	Build func(text string, opts ...ratelimit.Option) (*ratelimit.Rules, error)
}

// Replayer decides requests; it is not safe for concurrent use.
type Replayer struct {
	opts   Options
	clock  *Clock
	sets   []*setState
	routes map[string][]*classState
	keyer
	rbuf    []byte
	pending pendingHeap
	seq     int64
	maxSeen int64
	started bool
	decided bool // r.now is the instant of the last decision
	now     int64
	rep     Report
}

const (
	maxRoutes = 1 << 14
	maxKeys   = 1 << 16
)

// New returns a replay of the given rule sets.
func New(files []RuleFile, opts Options) (*Replayer, error) {
	if len(files) == 0 {
		return nil, errors.New("no rules to replay")
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.IPv6Prefix == 0 {
		opts.IPv6Prefix = 64
	}
	if opts.IPv6Prefix < 1 || opts.IPv6Prefix > 128 {
		return nil, fmt.Errorf("IPv6 prefix must be in [1, 128], got %d", opts.IPv6Prefix)
	}
	if opts.Reorder < 0 {
		return nil, fmt.Errorf("reorder window must not be negative, got %v", opts.Reorder)
	}
	if opts.MaxTracked == 0 {
		opts.MaxTracked = 1 << 20
	}
	if opts.Samples == 0 {
		opts.Samples = 5
	}
	if opts.Top == 0 {
		opts.Top = 5
	}
	build := opts.Build
	if build == nil {
		build = ratelimit.ParseRules
	}
	r := &Replayer{opts: opts, clock: &Clock{}, routes: make(map[string][]*classState), keyer: newKeyer(opts.IPv6Prefix)}
	for _, f := range files {
		s := &setState{name: f.Name, r: r, byName: make(map[string]int)}
		rules, err := build(f.Text, ratelimit.WithClock(r.clock), ratelimit.WithObserver(s), ratelimit.WithMaxKeys(opts.MaxKeys))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		s.rules = rules
		if err := s.index(); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		r.sets = append(r.sets, s)
	}
	return r, nil
}

// Close releases the rules' limiters.
func (r *Replayer) Close() {
	for _, s := range r.sets {
		s.rules.Close()
	}
}

// Malformed counts a line that could not be read.
func (r *Replayer) Malformed(file string, line int64, err error) {
	r.rep.Lines++
	r.rep.Malformed++
	if len(r.rep.MalformedLines) < r.opts.Samples {
		r.rep.MalformedLines = append(r.rep.MalformedLines, Sample{File: file, Line: line, Error: err.Error()})
	}
}

// Add replays the request of one log line. The entry's bytes are not kept.
func (r *Replayer) Add(file string, line int64, e *accesslog.Entry) {
	r.AddPrepared(file, line, r.Prepare(e))
}

// Prepared is a request whose keys and classes have been found (by
// Prepare), ready to be decided (by AddPrepared).
type Prepared struct{ p pending }

// Prepare finds the keys and classes of the request of e, keeping nothing
// of e's bytes. Prepare and AddPrepared may run on two goroutines, each
// call of either on one goroutine only, in the order of the lines: that
// is a pipeline, the lines' reading and preparing on one goroutine, their
// deciding on another.
func (r *Replayer) Prepare(e *accesslog.Entry) Prepared {
	return Prepared{pending{t: e.Time, ip: r.ipKey(e.IP), user: r.userKey(e.User), classes: r.route(e.Method, e.Path)}}
}

// AddPrepared replays a prepared request of one log line.
func (r *Replayer) AddPrepared(file string, line int64, pr Prepared) {
	r.rep.Lines++
	r.rep.Requests++
	p := pr.p
	if !r.started {
		r.started, r.maxSeen = true, p.t
	}
	if r.decided && p.t < r.now {
		r.rep.Late++
		if len(r.rep.LateLines) < r.opts.Samples {
			r.rep.LateLines = append(r.rep.LateLines, Sample{File: file, Line: line,
				Error: fmt.Sprintf("%v, %v before a decided line", time.Unix(0, p.t).UTC().Format(time.RFC3339Nano), time.Duration(r.now-p.t))})
		}
		p.t = r.now
	}
	r.maxSeen = max(r.maxSeen, p.t)
	if r.opts.Reorder == 0 {
		r.decide(&p)
		return
	}
	r.seq++
	p.seq = r.seq
	r.pending.push(p)
	limit := r.maxSeen - int64(r.opts.Reorder)
	for len(r.pending) > 0 && r.pending[0].t <= limit {
		q := r.pending.pop()
		r.decide(&q)
	}
}

// Finish decides the lines still held back and returns the report.
func (r *Replayer) Finish() *Report {
	for len(r.pending) > 0 {
		q := r.pending.pop()
		r.decide(&q)
	}
	rep := r.rep
	rep.Last = r.now
	for _, s := range r.sets {
		rep.Sets = append(rep.Sets, s.report(r.opts.Top))
	}
	return &rep
}

func (r *Replayer) decide(p *pending) {
	if !r.decided {
		r.decided, r.rep.First = true, p.t
	}
	r.now = p.t
	r.clock.set(p.t)
	who := ratelimit.Subject{IP: p.ip, User: p.user}
	for i, s := range r.sets {
		d := s.decide(p.classes[i], who)
		if r.opts.Decided != nil {
			r.opts.Decided(i, r.clock.Now(), who, d)
		}
	}
}

// keyer derives the keys of requests as the middleware would, interning
// them: at most maxKeys of each table, then the table starts afresh.
type keyer struct {
	ipv6   int
	keys   map[string]string
	groups map[netip.Prefix]string // IPv6 groups' keys
	buf    []byte
}

func newKeyer(ipv6 int) keyer {
	return keyer{ipv6: ipv6, keys: make(map[string]string), groups: make(map[netip.Prefix]string)}
}

// ipKey returns the key of a client address as the middleware derives it:
// the address, an IPv4-mapped one as IPv4, IPv6 grouped by its prefix; a
// client that is not an address (a host name) is keyed as written.
func (r *keyer) ipKey(b []byte) string {
	if len(b) == 0 || len(b) == 1 && b[0] == '-' {
		return ""
	}
	if k, ok := r.keys[string(b)]; ok {
		return k
	}
	s := string(b)
	a, err := netip.ParseAddr(s)
	if err != nil {
		r.intern(s, s)
		return s
	}
	a = a.Unmap().WithZone("")
	if !a.Is6() || r.ipv6 == 128 {
		k := a.String()
		r.intern(s, k)
		return k
	}
	// An IPv6 client is looked up by its group, not interned by address:
	// clients that change their address within the group (privacy
	// addresses) would otherwise fill the table with one-off entries.
	p, _ := a.Prefix(r.ipv6)
	if k, ok := r.groups[p]; ok {
		return k
	}
	if len(r.groups) >= maxKeys {
		clear(r.groups)
	}
	k := p.String()
	r.groups[p] = k
	return k
}

func (r *keyer) userKey(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	// Users and addresses share the table: a user id that is also an
	// address's text must not map to the address's group.
	r.buf = append(append(r.buf[:0], 'u', ':'), b...)
	if k, ok := r.keys[string(r.buf)]; ok {
		return k
	}
	k := string(b)
	r.intern(string(r.buf), k)
	return k
}

func (r *keyer) intern(from, to string) {
	if len(r.keys) >= maxKeys {
		clear(r.keys)
	}
	r.keys[from] = to
}

// route returns each set's class of method and target, found as
// ServeMux would (the query left out). The slice is never changed once
// returned.
func (r *Replayer) route(method, target []byte) []*classState {
	path := target
	if i := indexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	r.rbuf = append(append(append(r.rbuf[:0], method...), ' '), path...)
	if c, ok := r.routes[string(r.rbuf)]; ok {
		return c
	}
	if len(r.routes) >= maxRoutes {
		clear(r.routes)
	}
	req := requestOf(string(method), string(path))
	classes := make([]*classState, len(r.sets))
	for i, s := range r.sets {
		classes[i] = s.classOf(req)
	}
	r.routes[string(r.rbuf)] = classes
	return classes
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// requestOf returns a request ServeMux can route: nil if path is not a
// request target it can read.
func requestOf(method, path string) *http.Request {
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil
	}
	return &http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}}
}

// setState is one rule set and what it refused.
type setState struct {
	name    string
	r       *Replayer
	rules   *ratelimit.Rules
	mux     *http.ServeMux
	every   *classState
	classes map[string]*classState
	stats   []ruleStats
	byName  map[string]int
	last    ratelimit.MultiDecision // the last decision (kept here, not on the heap per call)
	// counts
	requests, refused, exempt, noKey int64
}

type classState struct {
	set              *ratelimit.RuleSet
	rules            []int // index in stats of each rule of set
	needUser, needIP bool  // a rule of set counts per user, per ip
}

func (s *setState) index() error {
	s.classes = make(map[string]*classState)
	newStat := func(rule ratelimit.Rule) {
		if _, ok := s.byName[rule.Name]; !ok {
			s.byName[rule.Name] = len(s.stats)
			s.stats = append(s.stats, ruleStats{name: rule.Name, shadow: rule.Shadow, scope: rule.Scope.String(), scopeV: rule.KeyScope(), rate: rule.Rate, minutes: make(map[int64]int64)})
			if s.r.opts.Detail {
				st := &s.stats[len(s.stats)-1]
				st.seenMin, st.peaks = make(map[int64]int64), make(map[string]*peakState)
			}
		}
	}
	every := s.rules.For("*").Rules()
	isEvery := make(map[string]bool)
	for _, rule := range every {
		isEvery[rule.Name] = true
	}
	var patterns []string
	for _, class := range s.rules.Classes() {
		if class == "*" {
			continue
		}
		patterns = append(patterns, class)
		for _, rule := range s.rules.For(class).Rules() {
			if !isEvery[rule.Name] {
				newStat(rule)
			}
		}
	}
	for _, rule := range every { // the rules of every class, listed last
		newStat(rule)
	}
	add := func(class string) *classState {
		set := s.rules.For(class)
		c := &classState{set: set}
		for _, rule := range set.Rules() {
			c.rules = append(c.rules, s.byName[rule.Name])
			c.needUser = c.needUser || rule.KeyScope() == ratelimit.PerUser
			c.needIP = c.needIP || rule.KeyScope() == ratelimit.PerIP
		}
		return c
	}
	for _, class := range patterns {
		s.classes[class] = add(class)
	}
	s.every = add("*")
	mux, err := route.Mux(patterns)
	if err != nil {
		return err
	}
	s.mux = mux
	return nil
}

func (s *setState) classOf(req *http.Request) *classState {
	if req == nil {
		return s.every
	}
	_, pattern := s.mux.Handler(req)
	if c, ok := s.classes[pattern]; ok {
		return c
	}
	return s.every
}

func (s *setState) decide(c *classState, who ratelimit.Subject) *ratelimit.MultiDecision {
	s.requests++
	if c.set.Exempt(who) {
		s.exempt++
		return nil
	}
	if c.needUser && who.User == "" || c.needIP && who.IP == "" {
		s.noKey++ // as Check would answer (ErrNoKey), without building its error
		return nil
	}
	d, err := c.set.Check(context.Background(), who, 1)
	if err != nil {
		s.noKey++
		return nil
	}
	s.last = d
	for j, i := range c.rules {
		st := &s.stats[i]
		st.seen++
		key := ""
		switch st.scopeV {
		case ratelimit.PerIP:
			key = who.IP
		case ratelimit.PerUser:
			key = who.User
		}
		if st.seenMin != nil {
			st.detail(key, s.r.now, s.r.opts.MaxTracked)
		}
		if !st.shadow && !d.At(j).Allowed {
			st.refuse(key, s.r.now, s.r.opts.MaxTracked)
		}
	}
	if !d.Allowed {
		s.refused++
	}
	return &s.last
}

// Observe counts a shadow rule's would-refusal (an enforced rule's refusal
// is read from the set's decision).
func (s *setState) Observe(e ratelimit.Event) {
	if e.Allowed || e.Kind != ratelimit.EventDecision {
		return
	}
	i, ok := s.byName[e.Limiter]
	if !ok || !s.stats[i].shadow || !e.Shadow {
		return
	}
	s.stats[i].refuse(e.Key, s.r.now, s.r.opts.MaxTracked)
}

type ruleStats struct {
	name, scope   string
	scopeV        ratelimit.Scope // what keys the rule (Rule.KeyScope): a fair rule its tenant
	shadow        bool
	seen, refused int64
	keys          map[string]int64
	untracked     bool
	first, last   int64
	minutes       map[int64]int64
	rate          ratelimit.Rate
	// With Options.Detail: requests seen per minute, each key's peak.
	seenMin map[int64]int64
	peaks   map[string]*peakState
}

func (st *ruleStats) refuse(key string, now int64, maxTracked int) {
	if st.refused == 0 {
		st.first = now
		st.keys = make(map[string]int64)
	}
	st.refused++
	st.last = now
	st.minutes[floorDiv(now, int64(time.Minute))]++
	if n, ok := st.keys[key]; ok {
		st.keys[key] = n + 1
	} else if len(st.keys) < maxTracked {
		st.keys[key] = 1
	} else {
		st.untracked = true
	}
}

// peakState is a key's count in the current period of the rule's rate
// (periods aligned to the Unix epoch) and the most it had in one.
type peakState struct{ period, n, peak int64 }

func (st *ruleStats) detail(key string, now int64, maxTracked int) {
	st.seenMin[floorDiv(now, int64(time.Minute))]++
	p, ok := st.peaks[key]
	if !ok {
		if len(st.peaks) >= maxTracked {
			return
		}
		p = &peakState{period: math.MinInt64}
		st.peaks[key] = p
	}
	if w := floorDiv(now, int64(st.rate.Period)); w != p.period {
		p.period, p.n = w, 0
	}
	p.n++
	p.peak = max(p.peak, p.n)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (s *setState) report(top int) SetReport {
	out := SetReport{Name: s.name, Requests: s.requests, Refused: s.refused, Exempt: s.exempt, NoKey: s.noKey}
	for i := range s.stats {
		st := &s.stats[i]
		rr := RuleReport{Name: st.name, Scope: st.scope, Shadow: st.shadow, Seen: st.seen, Refused: st.refused,
			DistinctKeys: int64(len(st.keys)), DistinctAtLeast: st.untracked}
		if st.seen > 0 {
			rr.Share = float64(st.refused) / float64(st.seen)
		}
		if st.refused > 0 {
			rr.FirstRefusal, rr.LastRefusal = ptime(st.first), ptime(st.last)
			var best, bestN int64
			for m, n := range st.minutes {
				if n > bestN || n == bestN && m < best {
					best, bestN = m, n
				}
			}
			rr.PeakMinute, rr.PeakMinuteRefused = ptime(best*int64(time.Minute)), bestN
			for k, n := range st.keys {
				rr.TopKeys = append(rr.TopKeys, KeyCount{Key: k, Count: n})
			}
			slices.SortFunc(rr.TopKeys, func(a, b KeyCount) int {
				if c := cmp.Compare(b.Count, a.Count); c != 0 {
					return c
				}
				return cmp.Compare(a.Key, b.Key)
			})
			if len(rr.TopKeys) > top {
				rr.TopKeys = rr.TopKeys[:top]
			}
		}
		if st.seenMin != nil {
			rr.Limit = st.rate.N
			rr.Period = st.rate.Period
			ms := make([]int64, 0, len(st.seenMin))
			for m := range st.seenMin {
				ms = append(ms, m)
			}
			slices.Sort(ms)
			for _, m := range ms {
				rr.Minutes = append(rr.Minutes, MinuteCount{Minute: time.Unix(0, m*int64(time.Minute)).UTC(), Seen: st.seenMin[m], Refused: st.minutes[m]})
			}
			rr.PeakRates = peakBuckets(st.peaks, st.rate.N)
		}
		out.Rules = append(out.Rules, rr)
	}
	return out
}

func ptime(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}

// pending is a request held back in the reorder window.
type pending struct {
	t, seq   int64
	ip, user string
	classes  []*classState // per set
}

type pendingHeap []pending

func (h pendingHeap) less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].seq < h[j].seq
}

func (h *pendingHeap) push(p pending) {
	*h = append(*h, p)
	a := *h
	for i := len(a) - 1; i > 0; {
		up := (i - 1) / 2
		if !a.less(i, up) {
			break
		}
		a[i], a[up] = a[up], a[i]
		i = up
	}
}

func (h *pendingHeap) pop() pending {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = pending{}
	a = a[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && a.less(l, small) {
			small = l
		}
		if l+1 < n && a.less(l+1, small) {
			small = l + 1
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
	return top
}
