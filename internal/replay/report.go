package replay

import "time"

// Report is what a replay found. Times are UTC.
type Report struct {
	Lines          int64       `json:"lines"`
	Requests       int64       `json:"requests"`
	Malformed      int64       `json:"malformed"`
	MalformedLines []Sample    `json:"malformed_lines,omitempty"`
	Late           int64       `json:"late"`
	LateLines      []Sample    `json:"late_lines,omitempty"`
	First          int64       `json:"-"`
	Last           int64       `json:"-"`
	Sets           []SetReport `json:"rule_sets"`
}

// Sample quotes one line that was malformed or late.
type Sample struct {
	File  string `json:"file"`
	Line  int64  `json:"line"`
	Error string `json:"error"`
}

// SetReport is one rule set's answer to the trace.
type SetReport struct {
	Name     string       `json:"name"`
	Requests int64        `json:"requests"`
	Refused  int64        `json:"refused"` // by an enforced rule
	Exempt   int64        `json:"exempt"`
	NoKey    int64        `json:"no_key"` // lacking the user or address a rule counts by
	Rules    []RuleReport `json:"rules"`
}

// RuleReport is one rule's answer.
type RuleReport struct {
	Name              string     `json:"name"`
	Scope             string     `json:"scope"`
	Shadow            bool       `json:"shadow,omitempty"`
	Seen              int64      `json:"seen"`
	Refused           int64      `json:"refused"` // would-refuse for a shadow rule
	Share             float64    `json:"share"`
	DistinctKeys      int64      `json:"distinct_keys_refused"`
	DistinctAtLeast   bool       `json:"distinct_keys_lower_bound,omitempty"`
	TopKeys           []KeyCount `json:"top_keys,omitempty"`
	FirstRefusal      *time.Time `json:"first_refusal,omitempty"`
	LastRefusal       *time.Time `json:"last_refusal,omitempty"`
	PeakMinute        *time.Time `json:"peak_minute,omitempty"`
	PeakMinuteRefused int64      `json:"peak_minute_refused,omitempty"`
	// With Options.Detail only:
	Limit     int64         `json:"limit,omitempty"`  // the rule's rate: Limit per Period
	Period    time.Duration `json:"period,omitempty"` // nanoseconds
	Minutes   []MinuteCount `json:"minutes,omitempty"`
	PeakRates []PeakBucket  `json:"peak_rates,omitempty"`
}

// MinuteCount is what a rule saw and refused in one minute.
type MinuteCount struct {
	Minute  time.Time `json:"minute"`
	Seen    int64     `json:"seen"`
	Refused int64     `json:"refused"`
}

// PeakBucket counts the keys whose peak (the most requests in one period
// of the rule's rate) was at most Upto times the rule's limit per period,
// and more than the bucket before's (Upto 0: more than the last bound).
type PeakBucket struct {
	Upto float64 `json:"upto"`
	Keys int64   `json:"keys"`
}

// peakBounds are the buckets of PeakRates, as multiples of the limit.
var peakBounds = []float64{0.25, 0.5, 1, 2, 4, 0}

func peakBuckets(peaks map[string]*peakState, limit int64) []PeakBucket {
	out := make([]PeakBucket, len(peakBounds))
	for i, b := range peakBounds {
		out[i].Upto = b
	}
	for _, p := range peaks {
		i := len(peakBounds) - 1
		for j, b := range peakBounds[:len(peakBounds)-1] {
			if float64(p.peak) <= b*float64(limit) {
				i = j
				break
			}
		}
		out[i].Keys++
	}
	return out
}

// KeyCount is a key and how many of its requests a rule refused.
type KeyCount struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}
