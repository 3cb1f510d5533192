package redis

import (
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/keyhash"
)

// denyCache remembers, per key, that n or more events are denied until a
// local instant (see WithDenyCache). It holds at most max keys; when full,
// it drops expired entries and, if none expired, caches nothing new. A key
// longer than keyhash.Short is cached by its bounded form (at most 78
// bytes) under a secret of the cache's own, so an entry costs a bounded
// number of bytes whatever the key's length.
type denyCache struct {
	secret *keyhash.Secret // keeps long keys
	mu     sync.Mutex
	m      map[string]denyEntry
	max    int
	// earliest is no later than any entry's until: a full cache is not
	// scanned for expired entries before then.
	earliest time.Time
}

type denyEntry struct {
	n      int
	limit  int
	until  time.Time // RetryAfter ends
	resets time.Time // ResetAfter ends
}

func newDenyCache(max int) *denyCache {
	return &denyCache{secret: keyhash.NewSecret(), m: make(map[string]denyEntry), max: max}
}

// kept returns key as the cache keeps it: itself if short, else its
// bounded form.
func (c *denyCache) kept(key string) string {
	if keyhash.Long(key) {
		return c.secret.Keep(key)
	}
	return key
}

// lookup returns the cached denial of n events for key at now, if any.
func (c *denyCache) lookup(key string, n int, now time.Time) (ratelimit.Decision, bool) {
	key = c.kept(key)
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && !now.Before(e.until) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || n < e.n {
		return ratelimit.Decision{}, false
	}
	return ratelimit.Decision{
		Limit:      e.limit,
		RetryAfter: e.until.Sub(now),
		ResetAfter: max(e.resets.Sub(now), 0),
	}, true
}

// add caches the denial d of n events for key, decided when now was read.
func (c *denyCache) add(key string, n int, now time.Time, d ratelimit.Decision) {
	if d.RetryAfter <= 0 {
		return
	}
	key = c.kept(key)
	e := denyEntry{n: n, limit: d.Limit, until: now.Add(d.RetryAfter), resets: now.Add(d.ResetAfter)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		if now.Before(c.earliest) {
			return
		}
		var earliest time.Time
		for k, old := range c.m {
			if !now.Before(old.until) {
				delete(c.m, k)
			} else if earliest.IsZero() || old.until.Before(earliest) {
				earliest = old.until
			}
		}
		c.earliest = earliest
		if len(c.m) >= c.max {
			return
		}
	}
	if len(c.m) == 0 || e.until.Before(c.earliest) {
		c.earliest = e.until
	}
	c.m[key] = e
}

// forget drops the cached denial of key, if any.
func (c *denyCache) forget(key string) {
	key = c.kept(key)
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// clear forgets every denial.
func (c *denyCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
