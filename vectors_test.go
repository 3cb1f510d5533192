package ratelimit

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Test vectors: a trace of (time, key, n, op) with the decision each step
// must get, stored as JSON under testdata/vectors so that every backend
// (this package's and the Redis one) replays the very same table. The
// format is described in testdata/vectors/README.md.
//
// go test -run TestVectors -update-vectors rewrites the files from this
// package's implementations; review the diff before committing it.
var updateVectors = flag.Bool("update-vectors", false, "rewrite testdata/vectors from the in-memory limiters")

type vectorFile struct {
	Algorithm   string       `json:"algorithm"`
	Description string       `json:"description"`
	Rate        vectorRate   `json:"rate"`
	Capacity    int          `json:"capacity,omitempty"`
	EpochUnixNs int64        `json:"epoch_unix_ns"`
	Steps       []vectorStep `json:"steps,omitempty"`
}

type vectorRate struct {
	N        int64 `json:"n"`
	PeriodNs int64 `json:"period_ns"`
}

type vectorStep struct {
	TNs  int64        `json:"t_ns"`
	Key  string       `json:"key"`
	N    int          `json:"n"`
	Op   string       `json:"op"` // "allow" (AllowN) or "reserve" (Reserve)
	Want vectorResult `json:"want"`
}

type vectorResult struct {
	OK           bool  `json:"ok"` // reserve only: Reservation.OK
	Allowed      bool  `json:"allowed"`
	Limit        int   `json:"limit"`
	Remaining    int   `json:"remaining"`
	RetryAfterNs int64 `json:"retry_after_ns"`
	ResetAfterNs int64 `json:"reset_after_ns"`
}

// vectorAlgorithms builds each algorithm of the registry
// (algorithms_test.go) from a vector file's parameters, by its name in the
// files.
var vectorAlgorithms = func() map[string]func(v *vectorFile, clk Clock) (Limiter, error) {
	m := map[string]func(v *vectorFile, clk Clock) (Limiter, error){}
	for _, alg := range algorithms {
		m[alg.vectors] = func(v *vectorFile, clk Clock) (Limiter, error) {
			l, err := alg.build(v.rate(), v.Capacity, WithClock(clk))
			if err != nil {
				return nil, err
			}
			return l, nil
		}
	}
	return m
}()

func (v *vectorFile) rate() Rate { return Per(v.Rate.N, time.Duration(v.Rate.PeriodNs)) }

// vectorParams are the parameter sets the generator writes a file for,
// per algorithm: a whole-nanosecond interval, a fractional one, a slow one.
var vectorParams = []struct {
	name     string
	rate     Rate
	capacity int
}{
	{"2_per_s_cap4", PerSecond(2), 4},
	{"3_per_s_cap5", PerSecond(3), 5},
	{"10_per_13s_cap3", Per(10, 13*time.Second), 3},
}

func TestVectors(t *testing.T) {
	if *updateVectors {
		writeVectors(t)
	}
	files, err := filepath.Glob("testdata/vectors/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		v := readVectorFile(t, f)
		seen[v.Algorithm] = true
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := replayVectors(v, vectorAlgorithms[v.Algorithm]); err != nil {
				t.Fatal(err)
			}
		})
	}
	for name := range vectorAlgorithms {
		if !seen[name] {
			t.Errorf("no vector file for %s: run go test -run TestVectors -update-vectors", name)
		}
	}
}

func readVectorFile(t *testing.T, path string) *vectorFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &v
}

// replayVectors runs a vector file against a limiter built by build on a
// manual clock and reports the first step that differs.
func replayVectors(v *vectorFile, build func(*vectorFile, Clock) (Limiter, error)) error {
	if build == nil {
		return fmt.Errorf("unknown algorithm %q", v.Algorithm)
	}
	start := time.Unix(0, v.EpochUnixNs)
	clk := NewManualClock(start)
	lim, err := build(v, clk)
	if err != nil {
		return err
	}
	for i, s := range v.Steps {
		clk.Set(start.Add(time.Duration(s.TNs)))
		got, err := vectorDo(lim, s)
		if err != nil {
			return fmt.Errorf("step %d: %v", i, err)
		}
		if got != s.Want {
			return fmt.Errorf("step %d (t=%dns key=%q n=%d %s):\n got %+v\nwant %+v", i, s.TNs, s.Key, s.N, s.Op, got, s.Want)
		}
	}
	return nil
}

func vectorDo(lim Limiter, s vectorStep) (vectorResult, error) {
	var d Decision
	var ok bool
	switch s.Op {
	case "allow":
		var err error
		if d, err = lim.AllowN(bg, s.Key, s.N); err != nil {
			return vectorResult{}, err
		}
	case "reserve":
		r, err := lim.Reserve(bg, s.Key, s.N)
		if err != nil {
			return vectorResult{}, err
		}
		d, ok = r.Decision(), r.OK()
	default:
		return vectorResult{}, fmt.Errorf("unknown op %q", s.Op)
	}
	return vectorResult{OK: ok, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfterNs: int64(d.RetryAfter), ResetAfterNs: int64(d.ResetAfter)}, nil
}

// writeVectors generates a seeded random trace per algorithm and parameter
// set and records this package's decisions on it.
func writeVectors(t *testing.T) {
	names := make([]string, 0, len(vectorAlgorithms))
	for name := range vectorAlgorithms {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for pi, p := range vectorParams {
			v := &vectorFile{
				Algorithm:   name,
				Description: fmt.Sprintf("%s, rate %v, capacity %d (capacity is ignored by the window algorithms): a seeded random trace of bursts, pauses, peeks (n=0) and reservations on 3 keys", name, p.rate, p.capacity),
				Rate:        vectorRate{N: p.rate.N, PeriodNs: int64(p.rate.Period)},
				Capacity:    p.capacity,
				EpochUnixNs: epoch.UnixNano(),
			}
			lim, err := vectorAlgorithms[name](v, NewManualClock(epoch))
			if err != nil {
				t.Fatal(err)
			}
			limit := lim.(interface{ Limit() int }).Limit()
			h := fnv.New64a()
			h.Write([]byte(name)) // a seed per algorithm that adding another does not shift
			rng := rand.New(rand.NewPCG(h.Sum64(), uint64(pi)))
			interval := int64(p.rate.Period) / p.rate.N
			var now int64
			for i := 0; i < 300; i++ {
				switch r := rng.IntN(10); {
				case r < 5: // same instant: a burst
				case r < 9:
					now += rng.Int64N(interval * 2)
				default:
					now += rng.Int64N(int64(p.rate.Period) * 3)
				}
				s := vectorStep{TNs: now, Key: string(rune('a' + rng.IntN(3))), N: rng.IntN(limit + 1), Op: "allow"}
				if rng.IntN(8) == 0 {
					s.Op, s.N = "reserve", 1+rng.IntN(limit)
				}
				v.Steps = append(v.Steps, s)
			}
			// Record the in-memory decisions.
			clk := NewManualClock(epoch)
			lim, _ = vectorAlgorithms[name](v, clk)
			for i := range v.Steps {
				clk.Set(epoch.Add(time.Duration(v.Steps[i].TNs)))
				if v.Steps[i].Want, err = vectorDo(lim, v.Steps[i]); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join("testdata", "vectors", name+"_"+p.name+".json")
			if err := os.WriteFile(path, formatVectors(t, v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// formatVectors writes a vector file with one step per line, for readable
// diffs.
func formatVectors(t *testing.T, v *vectorFile) []byte {
	steps := v.Steps
	v.Steps = nil
	head, err := json.MarshalIndent(v, "", " ")
	v.Steps = steps
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	out = append(out, head[:len(head)-2]...) // drop the closing "\n}"
	out = append(out, ",\n \"steps\": [\n"...)
	for i, s := range steps {
		line, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "  "...)
		out = append(out, line...)
		if i < len(steps)-1 {
			out = append(out, ',')
		}
		out = append(out, '\n')
	}
	return append(out, " ]\n}\n"...)
}
