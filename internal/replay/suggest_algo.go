package replay

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Algorithm names the limiter Suggest sizes.
type Algorithm uint8

// The algorithms Suggest sizes, and what it sizes of each: the token
// bucket's burst and the leaky bucket's capacity at each candidate rate,
// the windows' limit per window at each candidate window.
const (
	TokenBucket Algorithm = iota
	LeakyBucket
	FixedWindow
	SlidingLog
	SlidingCounter
)

var algorithmNames = [...]string{"tokenbucket", "leakybucket", "fixedwindow", "slidinglog", "slidingcounter"}

// String returns the algorithm's name as ParseAlgorithm reads it.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// Windowed reports whether the algorithm is sized by a limit per window
// (its rate is that limit per the window) rather than a bucket at a rate.
func (a Algorithm) Windowed() bool { return a >= FixedWindow && a <= SlidingCounter }

// ParseAlgorithm reads tokenbucket, leakybucket, fixedwindow, slidinglog
// or slidingcounter (case, spaces, "-" and "_" ignored).
func ParseAlgorithm(s string) (Algorithm, error) {
	w := strings.NewReplacer(" ", "", "-", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
	for i, n := range algorithmNames {
		if w == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q: want %s", s, strings.Join(algorithmNames[:], ", "))
}

// SuggestAlgorithm is Suggest for any of the algorithms. For the token
// bucket it is Suggest itself, and windows are not used. For the leaky
// bucket each row is a rate of rates and the limit searched (Outcome.Burst)
// is the capacity. For the windows each row is a window of windows, its
// Rate that window with N the limit found for no refusal, and the limit
// searched is the limit per window (Outcome.Burst).
//
// The search is a bisection over replays of the trace through the
// library's own limiter, which is exact because each algorithm's outcome
// is monotone in the limit. Write A_L(t) for how many of a key's requests
// up to t a limit L admits. Every one of these limiters decides a request
// from the key's admitted requests before it only, and L+1 admits whatever
// L would given the same admitted history, so A_{L+1}(t) >= A_L(t) at
// every t: at the first request t where it would fail, L+1 refuses and L
// admits with equal counts just before t, so L+1 must see more admitted
// in its look-back than L, that is fewer admitted up to an earlier instant,
// contradicting dominance there. The look-backs are: the fixed window's
// count since the window's start; the sliding log's count in the last
// window; the sliding counter's estimate w·(A(s)-A(s-W)) + (A(t-)-A(s)),
// s the current window's start and w in [0, 1], which with A(t-) equal is
// at L+1 the smaller, by dominance at s and s-W; the token
// bucket's level, the least over earlier instants s of L + r·(t-s) minus
// the admitted in between. So the requests refused (arrivals less
// admitted) do not grow with the limit, and a key refused nothing at L is
// refused nothing at L+1 (its admitted count is all its arrivals at L, so
// at L+1 too): the keys refused do not grow either. The leaky bucket is
// the degenerate case: a replay never waits, and Allow admits only when
// the key's queue is empty, whatever its capacity, so its outcome is the
// same at every capacity of 1 or more: each cell is capacity 1 if the
// rate meets the target, and unmet (Cell.Unmet) if no capacity does.
// TestSuggestMonotoneInLimit checks all of this on random traces.
//
// The upper end of a window's search is the most requests of any one key,
// which no window algorithm can refuse (each admits while fewer than the
// limit were admitted); the lower end, limit 0, refuses everything. Each
// cell is checked the way the bisection ends: its limit meets the target
// and one less does not (Cell.Smaller, nil at limit 1: limit 0 refuses
// everything).
func (t *Trace) SuggestAlgorithm(a Algorithm, rates []ratelimit.Rate, windows []time.Duration, targets []float64, ofKeys bool) ([]Row, error) {
	switch {
	case a == TokenBucket:
		return t.Suggest(rates, targets, ofKeys)
	case a != LeakyBucket && !a.Windowed():
		return nil, fmt.Errorf("unknown algorithm %v", a)
	}
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
	if a == LeakyBucket {
		for _, rate := range rates {
			if !rate.Valid() {
				return nil, fmt.Errorf("invalid rate %v", rate)
			}
			o, err := t.ReplayAlgorithm(a, rate, 1)
			if err != nil {
				return nil, err
			}
			row := Row{Rate: rate, NoRefusal: 1}
			if o.Refused != 0 {
				row.NoRefusal = 0
			}
			for _, p := range targets {
				c := Cell{Target: p, At: o}
				c.Unmet = !t.meets(o, p, ofKeys)
				row.Cells = append(row.Cells, c)
			}
			rows = append(rows, row)
		}
		return rows, nil
	}
	most := t.mostPerKey()
	for _, w := range windows {
		if w <= 0 {
			return nil, fmt.Errorf("window %v is not positive", w)
		}
		memo := map[int]Outcome{}
		eval := func(n int) (Outcome, error) {
			if o, ok := memo[n]; ok {
				return o, nil
			}
			o, err := t.ReplayAlgorithm(a, ratelimit.Rate{N: int64(n), Period: w}, n)
			if err == nil {
				memo[n] = o
			}
			return o, err
		}
		top, err := eval(most)
		if err != nil {
			return nil, err
		}
		if top.Refused != 0 {
			return nil, fmt.Errorf("%v of %v: limit %d, the most requests of any key, refuses %d", a, w, most, top.Refused)
		}
		search := func(p float64) (int, error) {
			lo, hi := 0, most // lo fails (0 refuses everything), hi meets
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				o, err := eval(mid)
				if err != nil {
					return 0, err
				}
				if t.meets(o, p, ofKeys) {
					hi = mid
				} else {
					lo = mid
				}
			}
			return hi, nil
		}
		zero, err := search(-1) // nothing refused: meets only a share of 0 refused, strictly
		if err != nil {
			return nil, err
		}
		row := Row{Rate: ratelimit.Rate{N: int64(zero), Period: w}, NoRefusal: zero}
		for _, p := range targets {
			n, err := search(p)
			if err != nil {
				return nil, err
			}
			at, err := eval(n)
			if err != nil {
				return nil, err
			}
			c := Cell{Target: p, At: at}
			if n > 1 {
				s, err := eval(n - 1)
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

// meets reports whether o refuses at most the share p of the requests (or
// of the keys); a negative p is met only by refusing nothing.
func (t *Trace) meets(o Outcome, p float64, ofKeys bool) bool {
	if p < 0 {
		return o.Refused == 0
	}
	if ofKeys {
		return float64(o.KeysRefused) <= p*float64(len(t.names))
	}
	return float64(o.Refused) <= p*float64(len(t.reqs))
}

// refuseAll is the outcome of limit 0: everything refused.
func (t *Trace) refuseAll() Outcome {
	return Outcome{Refused: int64(len(t.reqs)), KeysRefused: int64(len(t.names)), Share: 1, KeyShare: 1}
}

// mostPerKey is the most requests any one key made.
func (t *Trace) mostPerKey() int {
	n := make([]int, len(t.names))
	most := 0
	for _, r := range t.reqs {
		n[r.key]++
		most = max(most, n[r.key])
	}
	return most
}

// ReplayAlgorithm runs the sorted trace through the library's limiter of
// algorithm a, rate and limit (the buckets' burst or capacity; the windows
// take theirs from the rate, and limit only labels the outcome), on a
// clock set from the trace, and counts what it refuses. Limit 0 refuses
// everything.
func (t *Trace) ReplayAlgorithm(a Algorithm, rate ratelimit.Rate, limit int) (Outcome, error) {
	if a == TokenBucket {
		return t.Replay(rate, limit)
	}
	if limit == 0 {
		return t.refuseAll(), nil
	}
	c := &Clock{}
	var lim ratelimit.Limiter
	var err error
	switch a {
	case LeakyBucket:
		lim, err = ratelimit.NewLeakyBucket(rate, limit, ratelimit.WithClock(c))
	case FixedWindow:
		lim, err = ratelimit.NewFixedWindow(rate, ratelimit.WithClock(c))
	case SlidingLog:
		lim, err = ratelimit.NewSlidingLog(rate, ratelimit.WithClock(c))
	case SlidingCounter:
		lim, err = ratelimit.NewSlidingWindowCounter(rate, ratelimit.WithClock(c))
	default:
		err = fmt.Errorf("unknown algorithm %v", a)
	}
	if err != nil {
		return Outcome{Burst: limit}, err
	}
	if cl, ok := lim.(io.Closer); ok {
		defer cl.Close()
	}
	return t.count(limit, c, lim.Allow), nil
}

// count replays the sorted trace through allow on clock c.
func (t *Trace) count(limit int, c *Clock, allow func(string) bool) Outcome {
	o := Outcome{Burst: limit}
	hit := make([]bool, len(t.names))
	for _, r := range t.reqs {
		c.set(r.t)
		if !allow(t.names[r.key]) {
			o.Refused++
			if !hit[r.key] {
				hit[r.key] = true
				o.KeysRefused++
			}
		}
	}
	o.Share = float64(o.Refused) / float64(len(t.reqs))
	o.KeyShare = float64(o.KeysRefused) / float64(len(t.names))
	return o
}
