package redis

import "strings"

// redisKey returns the Redis key of key: prefix + "{" + tag + "}" + suffix.
//
// The braces make tag the key's Redis Cluster hash tag, so every Redis key
// of one decision lands in one slot. tag is key itself when key is not
// empty and holds no '{', '}' or '\'; otherwise it is an escaped form
// ('\' becomes `\\`, '{' `\(`, '}' `\)`, and the empty key `\_`), so the
// tag is never empty (Redis would then hash the whole name) and never ends
// early, and distinct keys always get distinct Redis keys.
func redisKey(prefix, key, suffix string) string {
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
