package keyhash

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestKeepBound: every kept form is at most MaxKept bytes, a short key is
// kept as it is, and kept forms of distinct keys differ (random keys of
// random lengths around Short, including ones differing in one byte).
func TestKeepBound(t *testing.T) {
	s := NewSecret()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for i := 0; i < 20000; i++ {
		n := r.IntN(3 * Short)
		if i%100 == 0 {
			n = 1 << (16 + r.IntN(5)) // 64 KiB – 1 MiB
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = "ab€\xff"[r.IntN(4)]
		}
		key := string(b)
		k := s.Keep(key)
		if len(k) > MaxKept {
			t.Fatalf("kept form of a %d-byte key is %d bytes", n, len(k))
		}
		if n <= Short && k != key {
			t.Fatalf("short key %q kept as %q", key, k)
		}
		if n > Short && len(k) <= Short {
			t.Fatalf("long key kept as %d bytes, as short as a short key", len(k))
		}
		if o, ok := seen[k]; ok && o != key {
			t.Fatalf("two keys kept as %q", k)
		}
		seen[k] = key
		if n > Short {
			// one byte changed anywhere: another kept form
			c := []byte(key)
			c[r.IntN(n)] ^= 1
			if s.Keep(string(c)) == k {
				t.Fatalf("keys differing in one byte kept alike")
			}
			if utf8.ValidString(key[:32]) && !utf8.ValidString(k) {
				t.Fatalf("kept form of valid UTF-8 is not: %q", k)
			}
		}
	}
}

func TestSecrets(t *testing.T) {
	key := strings.Repeat("x", 1000)
	s1, s2 := NewSecret(), NewSecret()
	if s1.Keep(key) == s2.Keep(key) {
		t.Fatal("two random secrets keep a key alike")
	}
	d1, d2 := DeriveSecret("a", "b"), DeriveSecret("a", "b")
	if d1.Keep(key) != d2.Keep(key) {
		t.Fatal("derived secrets differ for the same parts")
	}
	if *DeriveSecret("ab", "") == *DeriveSecret("a", "b") {
		t.Fatal("parts run into each other")
	}
}

func TestKeepAllocs(t *testing.T) {
	s := NewSecret()
	key := strings.Repeat("k", Short)
	if n := testing.AllocsPerRun(100, func() { _ = s.Keep(key) }); n != 0 {
		t.Fatalf("a short key costs %v allocations", n)
	}
	long := strings.Repeat("k", 1<<20)
	if n := testing.AllocsPerRun(10, func() { _ = s.Keep(long) }); n > 10 { // hmac.New and the result: a few, none the key's size
		t.Fatalf("a long key costs %v allocations", n)
	}
}
