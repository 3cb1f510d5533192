package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func TestWindowsInvalidInput(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	for _, a := range testAlgorithms {
		if a.bucket {
			continue
		}
		name := a.name
		build := func(r ratelimit.Rate) error { _, err := a.redis(c, r, 0); return err }
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
