package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/exact"
)

// Rate is a number of events per period: "N per Period". It is a value;
// build it with PerSecond, PerMinute, PerHour, PerDay, Per or Every, or
// ParseRate for configuration files. The zero Rate is invalid: limiters
// refuse it with ErrInvalidRate.
//
// Limiters keep rates exact: 3 per second spaces events 333,333,333⅓ ns
// apart, never rounded, so long runs do not drift.
type Rate struct {
	// N is the number of events in each period; it must be positive.
	N int64
	// Period is the length of the period; it must be positive.
	Period time.Duration
}

// Per returns a rate of n events per period.
func Per(n int64, period time.Duration) Rate { return Rate{N: n, Period: period} }

// PerSecond returns a rate of n events per second.
func PerSecond(n int64) Rate { return Rate{N: n, Period: time.Second} }

// PerMinute returns a rate of n events per minute.
func PerMinute(n int64) Rate { return Rate{N: n, Period: time.Minute} }

// PerHour returns a rate of n events per hour.
func PerHour(n int64) Rate { return Rate{N: n, Period: time.Hour} }

// PerDay returns a rate of n events per day of 24 hours.
func PerDay(n int64) Rate { return Rate{N: n, Period: 24 * time.Hour} }

// Every returns a rate of one event per interval.
func Every(interval time.Duration) Rate { return Rate{N: 1, Period: interval} }

// Valid reports whether both N and Period are positive.
func (r Rate) Valid() bool { return r.N > 0 && r.Period > 0 }

func (r Rate) validate() error {
	if !r.Valid() {
		return fmt.Errorf("%w: %d per %v (count and period must be positive)", ErrInvalidRate, r.N, r.Period)
	}
	return nil
}

// String formats the rate so that ParseRate reads it back: "10/s",
// "150/day", "5/2s", "7/1m30s".
func (r Rate) String() string {
	var unit string
	switch r.Period {
	case time.Nanosecond:
		unit = "ns"
	case time.Microsecond:
		unit = "us"
	case time.Millisecond:
		unit = "ms"
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	case 24 * time.Hour:
		unit = "day"
	default:
		unit = r.Period.String()
	}
	return strconv.FormatInt(r.N, 10) + "/" + unit
}

// units names the units ParseRate accepts, in lower case.
var units = map[string]time.Duration{
	"ns": time.Nanosecond, "nanosecond": time.Nanosecond, "nanoseconds": time.Nanosecond,
	"us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"microsecond": time.Microsecond, "microseconds": time.Microsecond,
	"ms": time.Millisecond, "millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// ParseRate reads a rate written as a count, "/" or the word "per", and a
// period: "2/s", "150/day", "1000/hr", "5 per 2s", "100 per minute",
// "5/2min", "10/2hours", "7/1m30s".
//
// The count is a positive whole number. The period is either a unit, a
// positive whole number followed by a unit ("2min", "3days", "2 hours"), or
// a Go duration as time.ParseDuration reads it ("1m30s", "1.5h", "250ms").
// The units, in any case, are:
//
//	ns, nanosecond(s)
//	us, µs, μs, microsecond(s)
//	ms, millisecond(s)
//	s, sec, secs, second(s)
//	m, min, mins, minute(s)
//	h, hr, hrs, hour(s)
//	d, day(s)    (24 hours)
//
// Spaces around the count and the period, and between a period's number
// and its unit, are ignored. The period must be positive and at most
// math.MaxInt64 nanoseconds (about 292 years). What Rate.String writes,
// ParseRate reads back. Errors match ErrInvalidRate and say what was wrong.
func ParseRate(s string) (Rate, error) {
	fail := func(why string) (Rate, error) {
		return Rate{}, fmt.Errorf("%w %q: %s", ErrInvalidRate, s, why)
	}
	t := strings.TrimSpace(s)
	var count, period string
	if i := strings.IndexByte(t, '/'); i >= 0 {
		count, period = t[:i], t[i+1:]
	} else if f := strings.Fields(t); len(f) >= 3 && strings.EqualFold(f[1], "per") {
		count, period = f[0], strings.Join(f[2:], " ")
	} else {
		return fail(`want "N/period" or "N per period", e.g. "10/s" or "5 per 2s"`)
	}
	count, period = strings.TrimSpace(count), strings.Join(strings.Fields(period), "")
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return fail(fmt.Sprintf("count %q is not an integer", count))
	}
	if n <= 0 {
		return fail("count must be positive")
	}
	d, ok := parsePeriod(period)
	if !ok {
		return fail(fmt.Sprintf("period %q is not a unit (s, sec, m, min, h, hr, d, day, ...), a number and a unit (2min), or a duration (1m30s)", period))
	}
	if d <= 0 {
		return fail("period must be positive")
	}
	return Rate{N: n, Period: d}, nil
}

// parsePeriod reads a period with its spaces removed.
func parsePeriod(p string) (time.Duration, bool) {
	lp := strings.ToLower(p)
	if d, ok := units[lp]; ok {
		return d, true
	}
	// A whole number and a unit: "2min", "3days", "10hrs".
	if i := strings.IndexFunc(lp, func(r rune) bool { return r < '0' || r > '9' }); i > 0 {
		if u, ok := units[lp[i:]]; ok {
			k, err := strconv.ParseInt(lp[:i], 10, 64)
			if err != nil || k > int64(1<<63-1)/int64(u) {
				return 0, false
			}
			return time.Duration(k) * u, true
		}
	}
	d, err := time.ParseDuration(p)
	if err != nil {
		return 0, false
	}
	return d, true
}

// readable formats a duration of ns nanoseconds for error text: a Go
// duration below two days ("1.5s", "36h"), days below a year ("400 days"),
// and years beyond ("36.5 years", "292 years").
func readable(ns int64) string { return readableNs(float64(ns)) }

func readableNs(ns float64) string {
	const day, year = float64(24 * time.Hour), 365.25 * float64(24*time.Hour)
	trim := func(v float64, unit string) string {
		s := strconv.FormatFloat(v, 'f', 1, 64)
		if v >= 100 {
			s = strconv.FormatFloat(v, 'f', 0, 64)
		}
		return strings.TrimSuffix(s, ".0") + " " + unit
	}
	switch a := max(ns, -ns); {
	case a >= year:
		return trim(ns/year, "years")
	case a >= 2*day:
		return trim(ns/day, "days")
	}
	s := time.Duration(ns).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// interval is the exact spacing of a rate, Period/N nanoseconds; ftime is
// an instant with a fraction of a nanosecond (see internal/exact).
type (
	interval = exact.Interval
	ftime    = exact.Time
)

func (r Rate) interval() interval { return exact.NewInterval(int64(r.Period), r.N) }
