package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// commandCalls returns INFO commandstats' call counts by command.
func commandCalls(t *testing.T, c *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				var n int64
				for _, d := range v {
					n = n*10 + int64(d-'0')
				}
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// TestFunctionsAndFallback: decisions run by FCALL of the library where
// Redis has Functions; after FUNCTION FLUSH and on a fresh server the
// library is loaded again; where Functions are unavailable (FCALL and
// FUNCTION renamed away, as on a Redis before 7.0) the same scripts run by
// EVALSHA. Every path decides as the in-memory limiter does.
func TestFunctionsAndFallback(t *testing.T) {
	c := tokenBucketCase(ratelimit.PerSecond(3), 5)
	t.Run("functions", func(t *testing.T) {
		srv := ownServer(t)
		client := newClient(t, srv.addr, true)
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		fns := rds.(*TokenBucket).fns
		runTrace(t, c, mc, core, rds, 1, 100)
		calls := commandCalls(t, client)
		if calls["fcall"] == 0 || calls["evalsha"] != 0 || calls["eval"] != 0 {
			t.Errorf("decisions not by FCALL alone: %v", calls)
		}
		if n := fns.loads.Load(); n != 1 {
			t.Errorf("library loaded %d times on a fresh server, want 1", n)
		}
		// FUNCTION FLUSH: the next call loads it again, and decides alike.
		if err := client.FunctionFlush(bg).Err(); err != nil {
			t.Fatal(err)
		}
		runTrace(t, c, mc, core, rds, 2, 100)
		if n := fns.loads.Load(); n != 2 {
			t.Errorf("library loaded %d times after FUNCTION FLUSH, want 2", n)
		}
		// A restarted server (no persistence) has neither keys nor the
		// library: loaded again.
		srv.kill()
		srv.restart(t)
		mc2 := ratelimit.NewManualClock(start)
		core2, rds2 := pairFor(t, c, mc2, client)
		runTrace(t, c, mc2, core2, rds2, 3, 100)
		if n := rds2.(*TokenBucket).fns.loads.Load(); n != 1 {
			t.Errorf("library loaded %d times by a new limiter after a restart, want 1", n)
		}
	})
	t.Run("no functions", func(t *testing.T) {
		s, err := startServer(0, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")
		if err != nil {
			skipOrFail(t, err)
		}
		t.Cleanup(s.stop)
		client := newClient(t, s.addr, true)
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		runTrace(t, c, mc, core, rds, 4, 100)
		calls := commandCalls(t, client)
		if calls["evalsha"] == 0 || calls["fcall"] != 0 {
			t.Errorf("decisions not by EVALSHA: %v", calls)
		}
		if !rds.(*TokenBucket).fns.none.Load() {
			t.Error("the limiter did not note that Redis lacks Functions")
		}
	})
	t.Run("functions not allowed", func(t *testing.T) {
		srv := ownServer(t)
		admin := newClient(t, srv.addr, true)
		if err := admin.Do(bg, "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "+@all", "-fcall", "-function").Err(); err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(&goredis.Options{Addr: srv.addr, Username: "limiter", Password: "pw", ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		mc := ratelimit.NewManualClock(start)
		core, rds := pairFor(t, c, mc, client)
		runTrace(t, c, mc, core, rds, 5, 100)
		if !rds.(*TokenBucket).fns.none.Load() {
			t.Error("the limiter did not fall back from Functions refused by an ACL")
		}
	})
}
