package redis

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// The core's test vectors (../testdata/vectors, format in its README),
// replayed against Redis: each step sets a manual clock, which the scripts
// read instead of TIME (withClockTime), and the decision must equal the
// recorded one field for field.

type vectorFile struct {
	Algorithm   string `json:"algorithm"`
	Description string `json:"description"`
	Rate        struct {
		N        int64 `json:"n"`
		PeriodNs int64 `json:"period_ns"`
	} `json:"rate"`
	Capacity    int          `json:"capacity"`
	EpochUnixNs int64        `json:"epoch_unix_ns"`
	Steps       []vectorStep `json:"steps"`
}

type vectorStep struct {
	TNs  int64        `json:"t_ns"`
	Key  string       `json:"key"`
	N    int          `json:"n"`
	Op   string       `json:"op"`
	Want vectorResult `json:"want"`
}

type vectorResult struct {
	OK           bool  `json:"ok"`
	Allowed      bool  `json:"allowed"`
	Limit        int   `json:"limit"`
	Remaining    int   `json:"remaining"`
	RetryAfterNs int64 `json:"retry_after_ns"`
	ResetAfterNs int64 `json:"reset_after_ns"`
}

// vectorAlgorithms builds each algorithm of algorithms
// (algorithms_test.go) on Redis from a vector file, by its name there.
var vectorAlgorithms = func() map[string]func(v *vectorFile, c Client, opts ...Option) (ratelimit.Limiter, error) {
	m := map[string]func(v *vectorFile, c Client, opts ...Option) (ratelimit.Limiter, error){}
	for _, a := range testAlgorithms {
		m[a.vectors] = func(v *vectorFile, c Client, opts ...Option) (ratelimit.Limiter, error) {
			return a.redis(c, ratelimit.Per(v.Rate.N, time.Duration(v.Rate.PeriodNs)), v.Capacity, opts...)
		}
	}
	return m
}()

func TestVectors(t *testing.T) {
	files, err := filepath.Glob("../testdata/vectors/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in ../testdata/vectors: %v", err)
	}
	client := newClient(t, redisAddr(t), true)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v vectorFile
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			build := vectorAlgorithms[v.Algorithm]
			if build == nil {
				t.Fatalf("no Redis implementation of %q", v.Algorithm)
			}
			start := time.Unix(0, v.EpochUnixNs)
			mc := ratelimit.NewManualClock(start)
			lim, err := build(&v, client, WithClock(mc), withClockTime(60_000), WithPrefix(testPrefix(t)),
				WithTimeout(5*time.Second), WithOnError(func(key string, err error) { t.Errorf("%q: %v", key, err) }))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, s := range v.Steps {
				mc.Set(start.Add(time.Duration(s.TNs)))
				var d ratelimit.Decision
				var ok bool
				switch s.Op {
				case "allow":
					d, err = lim.AllowN(ctx, s.Key, s.N)
				case "reserve":
					var r *ratelimit.Reservation
					if r, err = lim.Reserve(ctx, s.Key, s.N); err == nil {
						d, ok = r.Decision(), r.OK()
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.Op)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := vectorResult{OK: ok, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
					RetryAfterNs: int64(d.RetryAfter), ResetAfterNs: int64(d.ResetAfter)}
				if got != s.Want {
					t.Fatalf("step %d (t=%dns key=%q n=%d %s):\n got %+v\nwant %+v", i, s.TNs, s.Key, s.N, s.Op, got, s.Want)
				}
			}
		})
	}
}
