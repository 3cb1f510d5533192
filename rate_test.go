package ratelimit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRateConstructors(t *testing.T) {
	for _, tc := range []struct {
		got  Rate
		want Rate
	}{
		{PerSecond(10), Rate{10, time.Second}},
		{PerMinute(5), Rate{5, time.Minute}},
		{PerHour(1000), Rate{1000, time.Hour}},
		{PerDay(150), Rate{150, 24 * time.Hour}},
		{Per(5, 2*time.Second), Rate{5, 2 * time.Second}},
		{Every(250 * time.Millisecond), Rate{1, 250 * time.Millisecond}},
	} {
		if tc.got != tc.want {
			t.Errorf("got %+v, want %+v", tc.got, tc.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{
		"2/s":            PerSecond(2),
		"150/day":        PerDay(150),
		"150/d":          PerDay(150),
		"1000/h":         PerHour(1000),
		"5 per 2s":       Per(5, 2*time.Second),
		"100 per minute": PerMinute(100),
		"100 PER Minute": PerMinute(100),
		"3/seconds":      PerSecond(3),
		"7/1m30s":        Per(7, 90*time.Second),
		" 10 / ms ":      Per(10, time.Millisecond),
		"1/2d":           Per(1, 48*time.Hour),
		"10000/s":        PerSecond(10000),
		// A whole number and a unit, in the spellings config files use.
		"5/2min":                     Per(5, 2*time.Minute),
		"10/2sec":                    Per(10, 2*time.Second),
		"10/2secs":                   Per(10, 2*time.Second),
		"10/2hr":                     Per(10, 2*time.Hour),
		"10/2hrs":                    Per(10, 2*time.Hour),
		"10/2hours":                  Per(10, 2*time.Hour),
		"10/2days":                   Per(10, 48*time.Hour),
		"10/2day":                    Per(10, 48*time.Hour),
		"10/2minutes":                Per(10, 2*time.Minute),
		"10/3mins":                   Per(10, 3*time.Minute),
		"10/2seconds":                Per(10, 2*time.Second),
		"10/250ms":                   Per(10, 250*time.Millisecond),
		"10/5milliseconds":           Per(10, 5*time.Millisecond),
		"10/7us":                     Per(10, 7*time.Microsecond),
		"10/7µs":                     Per(10, 7*time.Microsecond),
		"10/7μs":                     Per(10, 7*time.Microsecond),
		"10/7microseconds":           Per(10, 7*time.Microsecond),
		"10/9ns":                     Per(10, 9),
		"10/9nanoseconds":            Per(10, 9),
		"10/hrs":                     PerHour(10),
		"10/secs":                    PerSecond(10),
		"10/mins":                    PerMinute(10),
		"10/Hours":                   PerHour(10),
		"10/2 hours":                 Per(10, 2*time.Hour),
		"5 per 2 minutes":            Per(5, 2*time.Minute),
		"5 per 2min":                 Per(5, 2*time.Minute),
		"5 per day":                  PerDay(5),
		"5 per 1.5h":                 Per(5, 90*time.Minute),
		"1/1m 30s":                   Per(1, 90*time.Second),
		"1/106751days":               Per(1, 106751*24*time.Hour),
		"1/2562047h47m16.854775807s": Every(1<<63 - 1),
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for in, wantMsg := range map[string]string{
		"":                       "want",
		"10":                     "want",
		"x/s":                    "count",
		"0/s":                    "positive",
		"-1/s":                   "positive",
		"10/fortnight":           "period",
		"10/-2s":                 "positive",
		"10/0s":                  "positive",
		"10 every s":             "want",
		"99999999999999999999/s": "count",
		"1/99999999999999999d":   "period",
		"1/106752days":           "period",
		"1/2.5min":               "period",
		"1/2 fortnights":         "period",
		"1/2hourss":              "period",
		"1/0days":                "positive",
		"5 per":                  "want",
	} {
		_, err := ParseRate(in)
		if !errors.Is(err, ErrInvalidRate) {
			t.Errorf("ParseRate(%q) error = %v, want ErrInvalidRate", in, err)
			continue
		}
		if !strings.Contains(err.Error(), wantMsg) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("ParseRate(%q) error %q does not say %q", in, err, wantMsg)
		}
	}
}

func TestRateStringRoundTrip(t *testing.T) {
	for _, r := range []Rate{PerSecond(2), PerDay(150), PerHour(1), Per(5, 2*time.Second),
		Per(7, 90*time.Second), Per(1, time.Nanosecond), Per(3, time.Millisecond), PerMinute(60)} {
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", r.String(), back, err, r)
		}
	}
	if got := PerDay(150).String(); got != "150/day" {
		t.Errorf("String = %q, want 150/day", got)
	}
}
