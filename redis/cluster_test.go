package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// startCluster starts a Redis Cluster of three masters on loopback, the
// hash slots split between them, and returns a cluster client of it.
func startCluster(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	var addrs []string
	var nodes []*goredis.Client
	for range 3 {
		s, err := startServer(0, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			skipOrFail(t, err)
		}
		t.Cleanup(s.stop)
		addrs = append(addrs, s.addr)
		nodes = append(nodes, newClient(t, s.addr, true))
	}
	ctx := context.Background()
	for i, r := range [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}} {
		if err := nodes[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", addrs[i], err)
		}
	}
	host, port, _ := strings.Cut(addrs[0], ":")
	for _, n := range nodes[1:] {
		if err := n.ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < len(nodes); {
		info, err := nodes[i].ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready after 15s: %v %s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestCluster runs every algorithm on a Redis Cluster: the keys of one
// decision share a slot (the sliding log uses two), keys spread over the
// nodes, and decisions equal the in-memory ones.
func TestCluster(t *testing.T) {
	cc := startCluster(t)
	seen := map[string]bool{}
	for _, c := range conformanceCases() {
		kind, _, _ := strings.Cut(c.name, "(")
		if seen[kind] {
			continue // one parameter set per algorithm is enough here
		}
		seen[kind] = true
		t.Run(kind, func(t *testing.T) {
			mc := ratelimit.NewManualClock(start)
			core, rds := pairFor(t, c, mc, cc)
			runTrace(t, c, mc, core, rds, 5, 200)
			// The trace drops keys at rest at times: each key holds
			// something at the end.
			for _, k := range []string{"a", "b", "", "{x}"} {
				if _, err := rds.Reserve(context.Background(), k, 1); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// The keys landed on every node.
	ctx := context.Background()
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		if size := n.DBSize(ctx).Val(); size == 0 {
			return fmt.Errorf("node %s holds no key", n.Options().Addr)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// A prefix with braces would take over the hash tag: every key in one
	// slot, or one decision's keys over several (CROSSSLOT). Every
	// constructor refuses it.
	for _, prefix := range []string{"x{}:", "tenant{42}:", "a}b:", "{"} {
		for name, build := range map[string]func() error{
			"TokenBucket": func() error { _, err := NewTokenBucket(cc, ratelimit.PerSecond(1), 1, WithPrefix(prefix)); return err },
			"LeakyBucket": func() error { _, err := NewLeakyBucket(cc, ratelimit.PerSecond(1), 1, WithPrefix(prefix)); return err },
			"FixedWindow": func() error { _, err := NewFixedWindow(cc, ratelimit.PerSecond(1), WithPrefix(prefix)); return err },
			"SlidingLog":  func() error { _, err := NewSlidingLog(cc, ratelimit.PerSecond(1), WithPrefix(prefix)); return err },
			"SlidingWindowCounter": func() error {
				_, err := NewSlidingWindowCounter(cc, ratelimit.PerSecond(1), WithPrefix(prefix))
				return err
			},
			"Bulkhead": func() error { _, err := NewBulkhead(cc, 1, time.Second, WithPrefix(prefix)); return err },
		} {
			if err := build(); !errors.Is(err, ratelimit.ErrInvalidOption) {
				t.Errorf("%s with prefix %q: %v, want an error matching ErrInvalidOption", name, prefix, err)
			}
		}
	}
	// What such a prefix did: the sliding log's two keys in different
	// slots, so that every call failed on the cluster.
	bad := redisKey("x{}:", "k", ":sl")
	if cc.ClusterKeySlot(ctx, bad).Val() == cc.ClusterKeySlot(ctx, redisKey("x{}:", "k", ":slf")).Val() {
		t.Errorf("%q and its floor key share a slot: the check above guards nothing", bad)
	}
}
