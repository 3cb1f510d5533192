package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// This file pins what the overrides do with keys a client chooses: a key
// the store knows by a prefix, and keys that come and go at the cap.

// longKey is a key longer than keyhash.Short, which the store keeps in
// its bounded form: strings.Repeat(base, 10) + tail.
func longKey(tail string) string { return strings.Repeat("long-key", 10) + tail }

// TestOverrideLongKeys: a key longer than keyhash.Short is kept in its
// bounded form, by the overrides as by the store. Its override holds when
// the key is created after it, and through a drop at rest; keys sharing
// all but their last byte are different keys, each with its own override
// or none; a key of exactly keyhash.Short bytes is kept as it is.
func TestOverrideLongKeys(t *testing.T) {
	a, b := longKey("a"), longKey("b")
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			t.Run("CreatedAfter", func(t *testing.T) {
				l, _ := newSuiteLimiter(t, alg)
				setOverride(t, alg, l, a, bigLimit)
				if d := peekAt(t, l, a); d.Limit != bigLimit {
					t.Fatalf("a peek at a long key with an override of %d: %+v", bigLimit, d)
				}
				drainKey(t, l, a, bigLimit)
			})
			t.Run("HeldThenDropped", func(t *testing.T) {
				l, clk := newSuiteLimiter(t, alg)
				if !l.Allow(a) {
					t.Fatal("a fresh key refused")
				}
				setOverride(t, alg, l, a, smallLimit)
				clk.Advance(3 * suitePeriod) // at rest under either
				l.Sweep()
				if s := l.Stats(); s.Keys != 0 {
					t.Fatalf("a key at rest under its override kept by Sweep: %+v", s)
				}
				if d := peekAt(t, l, a); d.Limit != smallLimit || d.Remaining != smallLimit {
					t.Fatalf("a long key dropped at rest and seen again: %+v, want its override's %d", d, smallLimit)
				}
				drainKey(t, l, a, smallLimit)
			})
			t.Run("OneByteApart", func(t *testing.T) {
				l, _ := newSuiteLimiter(t, alg)
				setOverride(t, alg, l, a, smallLimit)
				if _, ok := overrideOf(l, b); ok {
					t.Fatalf("%q has the override of a key differing in its last byte", b)
				}
				if d := peekAt(t, l, b); d.Limit != suiteLimit {
					t.Fatalf("%q: %+v, want the limiter's limit %d", b, d, suiteLimit)
				}
				drainKey(t, l, a, smallLimit)
				drainKey(t, l, b, suiteLimit)
				l.RemoveOverride(b)
				if _, ok := overrideOf(l, a); !ok {
					t.Fatalf("RemoveOverride(%q) removed %q's", b, a)
				}
				l.RemoveOverride(a)
				if _, err := l.AllowN(bg, a, bigLimit); !errors.Is(err, ErrExceedsLimit) {
					t.Fatalf("AllowN(%d) after the override is gone: %v, want ErrExceedsLimit", bigLimit, err)
				}
			})
			t.Run("ShortKeysApart", func(t *testing.T) {
				l, _ := newSuiteLimiter(t, alg)
				short := a[:64] // exactly keyhash.Short: kept as it is
				setOverride(t, alg, l, short, bigLimit)
				if _, ok := overrideOf(l, a); ok {
					t.Fatal("a longer key with the same first 64 bytes shares the override")
				}
				if d := peekAt(t, l, a); d.Limit != suiteLimit {
					t.Fatalf("a longer key: %+v", d)
				}
				if d := peekAt(t, l, short); d.Limit != bigLimit {
					t.Fatalf("the 64-byte key: %+v", d)
				}
			})
		})
	}
}

// overrideExact checks, for each of keys the store holds, the invariant
// the overrides keep: a key is flagged if and only if it has an override,
// and its state is expressed in the parameters it decides under: a token
// or leaky bucket's state carries the generation of its override if it is
// flagged, and one of the limiter's (never an override's) if not.
func overrideExact[S, P any, A algo[S, P]](k *keyed[S, P, A], keys []string, now int64) error {
	for _, key := range keys {
		h, fresh := k.st.Take(key, now, false)
		flagged, s := h.Flagged(), *h.State()
		h.Release()
		e := k.ov.lookup(k.storeKey(key)) // the store's identity of key
		if fresh {
			if flagged != (e != nil) {
				return fmt.Errorf("%q, not held: set up flagged %v, override %v", key, flagged, e != nil)
			}
			continue
		}
		if flagged != (e != nil) {
			return fmt.Errorf("%q: flagged %v, override %v", key, flagged, e != nil)
		}
		var gen uint32
		switch s := any(&s).(type) {
		case *tbState:
			gen = s.gen
		case *lbState:
			gen = s.gen
		default:
			continue // the windows' states read under any parameters
		}
		var want uint32
		switch p := any(k.ps.p.Load()).(type) {
		case *tbParams:
			want = p.gen
			if e != nil {
				want = any(&e.p).(*tbParams).gen
			}
		case *lbParams:
			want = p.gen
			if e != nil {
				want = any(&e.p).(*lbParams).gen
			}
		}
		if e != nil && gen != want || e == nil && (gen > want || gen >= ovGen0) {
			return fmt.Errorf("%q (flagged %v): state of generation %#x, decides under %#x", key, flagged, gen, want)
		}
	}
	return nil
}

func checkOverrideExact(l testLimiter, keys []string, now int64) error {
	switch l := l.(type) {
	case *TokenBucket:
		return overrideExact(&l.k, keys, now)
	case *LeakyBucket:
		return overrideExact(&l.k, keys, now)
	case *FixedWindow:
		return overrideExact(&l.k, keys, now)
	case *SlidingLog:
		return overrideExact(&l.k, keys, now)
	case *SlidingWindowCounter:
		return overrideExact(&l.k, keys, now)
	case *LeakyMeter:
		return overrideExact(&l.k, keys, now)
	}
	return fmt.Errorf("no store in %T", l)
}

// TestOverrideExactUnderChurn: random traces of every entry point on
// keys a client chooses (some longer than keyhash.Short), on a
// store capped below the keys in play, so that keys are evicted at the
// cap, dropped at rest and created again while overrides come and go and
// the rate changes. After every step each key is flagged exactly when it
// has an override and its state is in the parameters it decides under;
// no call panics or fails but with ErrExceedsLimit.
func TestOverrideExactUnderChurn(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	keys := []string{"k0", "k1", "k2", "k3", longKey("a"), longKey("b"), longKey("")}
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 0x0e7e1de5))
				l, clk := newSuiteLimiter(t, alg, WithMaxKeys(3))
				var held []*Reservation
				flagged, evicted := 0, uint64(0)
				for step := range 400 {
					key := keys[rng.IntN(len(keys))]
					limit := []int{smallLimit, suiteLimit, bigLimit}[rng.IntN(3)]
					var err error
					switch p := rng.IntN(100); {
					case p < 15:
						clk.Advance(time.Duration(rng.Int64N(int64(suitePeriod))))
					case p < 30:
						l.Allow(key)
					case p < 40:
						_, err = l.AllowN(ctx, key, rng.IntN(bigLimit+1))
					case p < 50:
						var r *Reservation
						if r, err = l.Reserve(ctx, key, 1+rng.IntN(bigLimit)); err == nil {
							held = append(held, r)
						}
					case p < 55:
						if len(held) > 0 {
							i := rng.IntN(len(held))
							held[i].Cancel()
							held = append(held[:i], held[i+1:]...)
						}
					case p < 60:
						other := keys[rng.IntN(len(keys))]
						_, err = AllowAll(ctx, 1+rng.IntN(smallLimit), []LimiterKey{{l, key}, {l, other}})
					case p < 75:
						err = alg.setOverride(l, key, Per(int64(limit), suitePeriod), limit)
						flagged++
					case p < 82:
						l.RemoveOverride(key)
					case p < 87:
						err = alg.setRate(l, Per(int64(limit), suitePeriod), limit)
					case p < 92:
						l.Reset(key)
					default:
						l.Sweep()
					}
					if err != nil && !errors.Is(err, ErrExceedsLimit) {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					if err := checkOverrideExact(l, keys, clk.Now().UnixNano()); err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
				}
				evicted += l.Stats().EvictedLRU
				if flagged == 0 || evicted == 0 {
					t.Fatalf("seed %d: trace too tame: %d overrides set, %d keys evicted at the cap", seed, flagged, evicted)
				}
			}
		})
	}
}

// TestOverrideExactRacingEviction: goroutines race decisions, resets and
// sweeps on more keys than the store's cap (some longer than
// keyhash.Short), so that keys are evicted and created again while another flips
// their overrides and a third changes the rate. Under -race. Once all are
// done, every key is flagged exactly when it has an override, its state
// in the parameters it decides under, and every decision on the way
// carried the limit of one of the configurations in play.
func TestOverrideExactRacingEviction(t *testing.T) {
	keys := []string{"k0", "k1", "k2", longKey("a"), longKey("b"), longKey("")}
	limits := []int{smallLimit, suiteLimit, bigLimit}
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			l, clk := newSuiteLimiter(t, alg, WithMaxKeys(2))
			done := make(chan error, 8)
			run := func(seed uint64, f func(rng *rand.Rand) error) {
				rng := rand.New(rand.NewPCG(seed, 0xe71c7))
				for range 1500 {
					if err := f(rng); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}
			for g := range 4 {
				go run(uint64(g), func(rng *rand.Rand) error {
					key := keys[rng.IntN(len(keys))]
					switch rng.IntN(4) {
					case 0:
						l.Allow(key)
					case 1:
						d, err := l.AllowN(ctx, key, rng.IntN(bigLimit+1))
						if err != nil && !errors.Is(err, ErrExceedsLimit) {
							return err
						}
						if err == nil && d.Limit != smallLimit && d.Limit != suiteLimit && d.Limit != bigLimit {
							return fmt.Errorf("%q: a decision with limit %d: %+v", key, d.Limit, d)
						}
					case 2:
						if r, err := l.Reserve(ctx, key, 1); err == nil {
							r.Cancel()
						}
					default:
						l.Reset(key)
					}
					return nil
				})
			}
			go run(10, func(rng *rand.Rand) error {
				key, limit := keys[rng.IntN(len(keys))], limits[rng.IntN(len(limits))]
				if rng.IntN(3) == 0 {
					l.RemoveOverride(key)
					return nil
				}
				return alg.setOverride(l, key, Per(int64(limit), suitePeriod), limit)
			})
			go run(11, func(rng *rand.Rand) error {
				switch rng.IntN(3) {
				case 0:
					limit := limits[rng.IntN(len(limits))]
					return alg.setRate(l, Per(int64(limit), suitePeriod), limit)
				case 1:
					clk.Advance(time.Duration(rng.Int64N(int64(suitePeriod / 4))))
				default:
					l.Sweep()
				}
				return nil
			})
			for range 6 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if err := checkOverrideExact(l, keys, clk.Now().UnixNano()); err != nil {
				t.Fatal(err)
			}
			if s := l.Stats(); s.EvictedLRU+s.EvictedAtRest == 0 {
				t.Fatalf("no key was evicted: %+v", s)
			}
		})
	}
}
