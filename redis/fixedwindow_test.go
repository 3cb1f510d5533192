package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func init() {
	hammerAlgorithms = append(hammerAlgorithms, hammerAlgo{"FixedWindow", true, func(c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewFixedWindow(c, ratelimit.Per(25, 35*24*time.Hour), opts...)
	}})
	benchAlgorithms = append(benchAlgorithms, benchAlgo{"FixedWindow", func(c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewFixedWindow(c, ratelimit.PerSecond(1_000_000), opts...)
	}})
	extraCases = append(extraCases,
		fixedWindowCase(ratelimit.PerSecond(5)),
		fixedWindowCase(ratelimit.Per(3, 1500*time.Millisecond)),
		fixedWindowCase(ratelimit.Per(4, 7*time.Nanosecond)),
		fixedWindowCase(ratelimit.Per(100, 24*time.Hour+1)),
		fixedWindowCase(ratelimit.Per(1, 35*24*time.Hour)),
	)
	vectorAlgorithms["fixedwindow"] = func(v *vectorFile, c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewFixedWindow(c, ratelimit.Per(v.Rate.N, time.Duration(v.Rate.PeriodNs)), opts...)
	}
}

func fixedWindowCase(rate ratelimit.Rate) algoCase {
	return windowCase("FixedWindow", rate, wrapCore(ratelimit.NewFixedWindow), wrapRedis(NewFixedWindow))
}

func TestWindowsInvalidInput(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	builders := map[string]func(ratelimit.Rate) error{
		"FixedWindow": func(r ratelimit.Rate) error { _, err := NewFixedWindow(c, r); return err },
		"SlidingLog":  func(r ratelimit.Rate) error { _, err := NewSlidingLog(c, r); return err },
		"SlidingWindowCounter": func(r ratelimit.Rate) error {
			_, err := NewSlidingWindowCounter(c, r)
			return err
		},
	}
	for name, build := range builders {
		for _, r := range []ratelimit.Rate{{}, ratelimit.PerSecond(0), ratelimit.Per(1, -time.Second),
			ratelimit.Per(1<<40+1, time.Second), ratelimit.Per(1, 35*24*time.Hour+1)} {
			if err := build(r); !errors.Is(err, ratelimit.ErrInvalidRate) {
				t.Errorf("%s(%v): %v, want ErrInvalidRate", name, r, err)
			}
		}
		if err := build(ratelimit.Per(1<<20, 35*24*time.Hour)); err != nil {
			t.Errorf("%s(2^20 per 35 days): %v", name, err)
		}
	}
	if _, err := NewSlidingLog(c, ratelimit.PerSecond(1<<20+1)); !errors.Is(err, ratelimit.ErrInvalidRate) {
		t.Errorf("SlidingLog of 2^20+1: %v", err)
	}
	if _, err := NewFixedWindow(nil, ratelimit.PerSecond(1)); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
}
