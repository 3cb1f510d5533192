package redis

import (
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func init() {
	hammerAlgorithms = append(hammerAlgorithms, hammerAlgo{"SlidingLog", true, func(c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewSlidingLog(c, ratelimit.PerHour(25), opts...)
	}})
	benchAlgorithms = append(benchAlgorithms, benchAlgo{"SlidingLog", func(c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewSlidingLog(c, ratelimit.PerSecond(1000), opts...)
	}})
	extraCases = append(extraCases,
		slidingLogCase(ratelimit.PerSecond(5)),
		slidingLogCase(ratelimit.Per(3, 1500*time.Millisecond)),
		slidingLogCase(ratelimit.Per(1, 7*time.Nanosecond)),
		slidingLogCase(ratelimit.Per(40, 24*time.Hour+1)),
		slidingLogCase(ratelimit.Per(2500, time.Minute)), // pushes of more than 1000 instants
	)
	vectorAlgorithms["slidinglog"] = func(v *vectorFile, c Client, opts ...Option) (ratelimit.Limiter, error) {
		return NewSlidingLog(c, ratelimit.Per(v.Rate.N, time.Duration(v.Rate.PeriodNs)), opts...)
	}
}

func slidingLogCase(rate ratelimit.Rate) algoCase {
	return windowCase("SlidingLog", rate, wrapCore(ratelimit.NewSlidingLog), wrapRedis(NewSlidingLog))
}
