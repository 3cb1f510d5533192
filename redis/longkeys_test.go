package redis

import (
	"context"
	"encoding/binary"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/keyhash"
	goredis "github.com/redis/go-redis/v9"
)

// longKey returns a key of size bytes of 'x' with i in its last 8.
func longKey(size, i int) string {
	b := []byte(strings.Repeat("x", size))
	binary.LittleEndian.PutUint64(b[size-8:], uint64(i))
	return string(b)
}

// TestRedisKeyLong: a long key's Redis key is bounded whatever its length,
// the same from every call (every instance derives the same secret from
// the prefix), apart for keys one byte apart and for other prefixes, and
// keeps one hash tag per decision; short keys are as before.
func TestRedisKeyLong(t *testing.T) {
	a, b := longKey(1<<20, 1), longKey(1<<20, 2)
	ra := redisKey("p:", a, ":tb")
	if len(ra) > len("p:{}:tb")+keyhash.MaxKept {
		t.Fatalf("Redis key of a 1 MiB key: %d bytes", len(ra))
	}
	if ra != redisKey("p:", strings.Clone(a), ":tb") {
		t.Fatal("the same long key, two Redis keys")
	}
	if ra == redisKey("p:", b, ":tb") {
		t.Fatal("long keys one byte apart share a Redis key")
	}
	if hashTag(ra) != hashTag(redisKey("p:", a, ":other")) || hashTag(ra) == "" {
		t.Fatalf("hash tag %q", hashTag(ra))
	}
	if strings.TrimPrefix(redisKey("q:", a, ":tb"), "q:") == strings.TrimPrefix(ra, "p:") {
		t.Fatal("two prefixes, one digest")
	}
	short := strings.Repeat("y", keyhash.Short)
	if redisKey("p:", short, ":tb") != "p:{"+short+"}:tb" {
		t.Fatal("a 64-byte key is not kept as it is")
	}
	braces := "{" + strings.Repeat("}", 100) // escaped after it is kept
	if rk := redisKey("p:", braces, ":tb"); len(hashTag(rk)) < 10 || strings.ContainsAny(hashTag(rk), "{}") {
		t.Fatalf("long key of braces: %q", rk)
	}
}

// usedMemory returns Redis INFO's used_memory.
func usedMemory(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// TestRedisLongKeysMemory: 2,000 distinct keys of 64 KiB through a token
// bucket add at most 2 KiB of used_memory per key, on a Redis of the
// test's own.
func TestRedisLongKeysMemory(t *testing.T) {
	s := ownServer(t)
	c := newClient(t, s.addr, true)
	tb := newTB(t, c, ratelimit.PerHour(1), 5)
	before := usedMemory(t, c)
	const keys = 2000
	for i := range keys {
		if !tb.Allow(longKey(64<<10, i)) {
			t.Fatalf("key %d: a fresh key refused", i)
		}
	}
	added := usedMemory(t, c) - before
	t.Logf("%d B of used_memory per key", added/keys)
	if added > keys*2048 {
		t.Fatalf("%d B of used_memory per key, want ≤ 2048", added/keys)
	}
	// The same long key again is the same Redis key: its allowance is
	// used, not fresh.
	k := longKey(64<<10, 7)
	for range 4 {
		tb.Allow(k)
	}
	if tb.Allow(k) {
		t.Fatal("a long key's sixth event in an hour allowed: not the same Redis key")
	}
}

// TestDenyCacheLongKeys: a deny cache of 1,000 entries fed denials of
// 3,000 keys of 256 KiB holds at most 4 KiB of heap per entry, and tells
// long keys one byte apart apart.
func TestDenyCacheLongKeys(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	now := time.Unix(1000, 0)
	d := ratelimit.Decision{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}
	base := heap()
	c := newDenyCache(1000)
	buf := []byte(strings.Repeat("x", 256<<10))
	for i := range 3000 {
		binary.LittleEndian.PutUint64(buf[len(buf)-8:], uint64(i))
		c.add(string(buf), 1, now, d)
	}
	used := heap()
	n := len(c.m)
	runtime.KeepAlive(c)
	if n != 1000 {
		t.Fatalf("%d entries, want 1000", n)
	}
	if per := (int64(used) - int64(base)) / int64(n); per > 4<<10 {
		t.Fatalf("%d B of heap per entry, want ≤ 4096", per)
	} else {
		t.Logf("%d B per entry", per)
	}
	a, b := longKey(1<<16, 1), longKey(1<<16, 2)
	c = newDenyCache(10)
	c.add(a, 1, now, d)
	if _, ok := c.lookup(strings.Clone(a), 1, now); !ok {
		t.Fatal("a long key's denial not found")
	}
	if _, ok := c.lookup(b, 1, now); ok {
		t.Fatal("a long key one byte apart found another's denial")
	}
	c.forget(a)
	if _, ok := c.lookup(a, 1, now); ok {
		t.Fatal("forget left a long key's denial")
	}
}
