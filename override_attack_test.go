package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/keystore"
)

// This file pins what the overrides do with keys a client chooses: a key
// the store knows by a prefix, and keys that come and go at the cap.

// shortKeyStore gives l a store of one shard that tells keys apart by
// their first n bytes only, as the real store does past 4 GiB, so that a
// test can reach that rule with short keys. The store must be empty.
func shortKeyStore(t *testing.T, l testLimiter, n int) {
	t.Helper()
	switch l := l.(type) {
	case *TokenBucket:
		setShortKeyStore(&l.k, n)
	case *LeakyBucket:
		setShortKeyStore(&l.k, n)
	case *FixedWindow:
		setShortKeyStore(&l.k, n)
	case *SlidingLog:
		setShortKeyStore(&l.k, n)
	case *SlidingWindowCounter:
		setShortKeyStore(&l.k, n)
	case *LeakyMeter:
		setShortKeyStore(&l.k, n)
	default:
		t.Fatalf("no store in %T", l)
	}
}

func setShortKeyStore[S, P any, A algo[S, P]](k *keyed[S, P, A], n int) {
	k.st = keystore.New(keystore.Config{Shards: 1, MaxKeys: k.st.Stats().MaxKeys, MaxKeyLen: n}, k.initKey, k.keyAtRest)
}

// TestOverrideLongKeys: a key longer than the store tells apart is known
// by its prefix, by the overrides as by the store. Its override holds
// when the key is created after it, and through a drop at rest; a key
// that shares the prefix is the same key, with the same override; and the
// state is never read under parameters other than the override it was
// written under (for the token bucket that would take a TAT under a
// generation it never had).
func TestOverrideLongKeys(t *testing.T) {
	const prefix = 8
	a, b := "customer-a", "customer-b" // the same first 8 bytes
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			t.Run("CreatedAfter", func(t *testing.T) {
				l, _ := newSuiteLimiter(t, alg)
				shortKeyStore(t, l, prefix)
				setOverride(t, alg, l, a, bigLimit)
				if d := peekAt(t, l, a); d.Limit != bigLimit {
					t.Fatalf("a peek at a long key with an override of %d: %+v", bigLimit, d)
				}
				drainKey(t, l, a, bigLimit)
			})
			t.Run("HeldThenDropped", func(t *testing.T) {
				l, clk := newSuiteLimiter(t, alg)
				shortKeyStore(t, l, prefix)
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
			t.Run("SharedPrefix", func(t *testing.T) {
				// b then a on the short-key store against one key on
				// the real one: the same decisions.
				play := func(l testLimiter, a, b string) (n int) {
					if !l.Allow(b) {
						t.Fatal("a fresh key refused")
					}
					setOverride(t, alg, l, a, smallLimit)
					if r, ok := overrideOf(l, b); !ok || r != Per(smallLimit, suitePeriod) {
						t.Fatalf("Override(%q) = %v, %v: the key the store holds for it has one", b, r, ok)
					}
					if d := peekAt(t, l, b); d.Limit != smallLimit {
						t.Fatalf("%q, known as %q is: %+v, want the override's limit %d", b, a, d, smallLimit)
					}
					for l.Allow(b) || l.Allow(a) {
						if n++; n > suiteLimit {
							break
						}
					}
					l.RemoveOverride(b)
					if _, ok := overrideOf(l, a); ok {
						t.Fatalf("RemoveOverride(%q) left %q's override", b, a)
					}
					if d := peekAt(t, l, a); d.Limit != suiteLimit {
						t.Fatalf("after RemoveOverride: %+v, want the limiter's limit", d)
					}
					if _, err := l.AllowN(bg, a, bigLimit); !errors.Is(err, ErrExceedsLimit) {
						t.Fatalf("AllowN(%d) after the override is gone: %v, want ErrExceedsLimit", bigLimit, err)
					}
					return n
				}
				l, _ := newSuiteLimiter(t, alg)
				shortKeyStore(t, l, prefix)
				ref, _ := newSuiteLimiter(t, alg)
				if got, want := play(l, a, b), play(ref, "k", "k"); got != want {
					t.Fatalf("two spellings of a key allowed %d after the override, one spelling %d", got, want)
				}
			})
			t.Run("ShortKeysApart", func(t *testing.T) {
				l, _ := newSuiteLimiter(t, alg)
				shortKeyStore(t, l, prefix)
				setOverride(t, alg, l, "customer", bigLimit) // exactly the prefix
				if _, ok := overrideOf(l, "custome"); ok {
					t.Fatal("a shorter key shares the override")
				}
				if d := peekAt(t, l, "custome"); d.Limit != suiteLimit {
					t.Fatalf("a shorter key: %+v", d)
				}
				if d := peekAt(t, l, strings.Repeat("customer", 4)); d.Limit != bigLimit {
					t.Fatalf("a longer key with the prefix: %+v", d)
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
		e := k.ov.lookup(key[:min(len(key), k.st.MaxKeyLen())]) // the store's identity of key
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
// keys a client chooses (some known to the store by a shared prefix), on a
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
	keys := []string{"k0", "k1", "k2", "k3", "long-key-a", "long-key-b", "long-key"}
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 0x0e7e1de5))
				l, clk := newSuiteLimiter(t, alg, WithMaxKeys(3))
				shortKeyStore(t, l, len("long-key"))
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
// sweeps on more keys than the store's cap (some known by a shared
// prefix), so that keys are evicted and created again while another flips
// their overrides and a third changes the rate. Under -race. Once all are
// done, every key is flagged exactly when it has an override, its state
// in the parameters it decides under, and every decision on the way
// carried the limit of one of the configurations in play.
func TestOverrideExactRacingEviction(t *testing.T) {
	keys := []string{"k0", "k1", "k2", "long-key-a", "long-key-b", "long-key"}
	limits := []int{smallLimit, suiteLimit, bigLimit}
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			l, clk := newSuiteLimiter(t, alg, WithMaxKeys(2))
			shortKeyStore(t, l, len("long-key"))
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
