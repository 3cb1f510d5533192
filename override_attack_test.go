package ratelimit

import (
	"errors"
	"strings"
	"testing"

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
	default:
		t.Fatalf("no store in %T", l)
	}
}

func setShortKeyStore[S, P any, A algo[S, P]](k *keyed[S, P, A], n int) {
	k.st = keystore.New(keystore.Config{Shards: 1, MaxKeyLen: n}, k.initKey, k.keyAtRest)
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
