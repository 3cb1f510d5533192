package redis

import (
	"strings"
	"sync"

	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// redisKey returns the Redis key of key: prefix + "{" + tag + "}" + suffix.
//
// The braces make tag the key's Redis Cluster hash tag, so every Redis key
// of one decision lands in one slot. tag is key itself when key is not
// empty and holds no '{', '}' or '\'; otherwise it is an escaped form
// ('\' becomes `\\`, '{' `\(`, '}' `\)`, and the empty key `\_`), so the
// tag is never empty (Redis would then hash the whole name) and never ends
// early, and distinct keys always get distinct Redis keys.
//
// A key longer than keyhash.Short (64 bytes) is first replaced by its
// bounded form (at most 78 bytes: a prefix of it and an HMAC-SHA-256
// digest of the whole key) under a secret derived from prefix, so that
// every instance with the same prefix agrees on it and a Redis key costs
// a bounded number of bytes whatever the key's length. Distinct long keys
// then get distinct Redis keys unless their digests collide (about 2^128
// work to find a pair, the secret being known to whoever knows prefix),
// and a long key never meets a short one (their forms differ in length).
func redisKey(prefix, key, suffix string) string {
	if keyhash.Long(key) {
		key = secretOf(prefix).Keep(key)
	}
	if key != "" && !strings.ContainsAny(key, `{}\`) {
		return prefix + "{" + key + "}" + suffix
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + len(suffix) + 8)
	b.WriteString(prefix)
	b.WriteByte('{')
	if key == "" {
		b.WriteString(`\_`)
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '{':
			b.WriteString(`\(`)
		case '}':
			b.WriteString(`\)`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('}')
	b.WriteString(suffix)
	return b.String()
}

// redisKeys sets keys[i] to redisKey(prefix, key, suffix[i]) for each
// suffix: the key's part (its bounded form, for a long key) is built
// once, and several keys share one allocation.
func redisKeys(keys []string, prefix, key string, suffix []string) {
	if len(suffix) == 1 {
		keys[0] = redisKey(prefix, key, suffix[0])
		return
	}
	base := redisKey(prefix, key, "")
	n := 0
	for _, sfx := range suffix {
		n += len(base) + len(sfx)
	}
	var b strings.Builder
	b.Grow(n)
	for _, sfx := range suffix {
		b.WriteString(base)
		b.WriteString(sfx)
	}
	all, at := b.String(), 0
	for i, sfx := range suffix {
		keys[i] = all[at : at+len(base)+len(sfx)]
		at += len(base) + len(sfx)
	}
}

// secrets caches the secret derived from each prefix in use.
var secrets sync.Map // prefix -> *keyhash.Secret

// secretOf returns the secret by which Redis keys under prefix keep long
// keys: the same in every process.
func secretOf(prefix string) *keyhash.Secret {
	if s, ok := secrets.Load(prefix); ok {
		return s.(*keyhash.Secret)
	}
	s, _ := secrets.LoadOrStore(prefix, keyhash.DeriveSecret("ratelimit/redis key", prefix))
	return s.(*keyhash.Secret)
}
