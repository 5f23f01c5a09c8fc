package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters only, each a redis-server process, with the
// 16384 slots split evenly between them.
type Cluster struct {
	Nodes []*Server
}

// URL is the redis+cluster:// URL that names every node.
func (c *Cluster) URL() string {
	u := "redis+cluster://" + c.Nodes[0].Addr()
	for i, n := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr()
	}
	return u
}

// Client is a cluster client closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeOf returns the index of the node that serves key.
func (c *Cluster) NodeOf(t testing.TB, key string) int {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr()})
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %s: %v", key, err)
	}
	per := 16384 / len(c.Nodes)
	return min(int(slot)/per, len(c.Nodes)-1)
}

// QueuesOnEveryNode returns queue names ("q0", "q1", …), one served by each node, for
// a key schema that maps a queue name to one of its keys.
func (c *Cluster) QueuesOnEveryNode(t testing.TB, keyOf func(queue string) string) []string {
	t.Helper()
	var queues []string
	nodes := map[int]bool{}
	for i := 0; len(nodes) < len(c.Nodes) && i < 1000; i++ {
		q := fmt.Sprintf("q%d", i)
		if n := c.NodeOf(t, keyOf(q)); !nodes[n] {
			nodes[n] = true
			queues = append(queues, q)
		}
	}
	if len(nodes) < len(c.Nodes) {
		t.Fatalf("redistest: found queues on %d of %d nodes only", len(nodes), len(c.Nodes))
	}
	return queues
}

// StartCluster starts n redis-server processes in cluster mode, gives each an equal
// range of slots, joins them, and waits until every node reports the cluster ok and
// knows every node's slots. They stop when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		dir := t.TempDir()
		s, err := start(dir, Options{Args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000"}})
		if err != nil {
			t.Fatalf("redistest: cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	ctx := context.Background()
	per := 16384 / n
	for i, s := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		hi := (i+1)*per - 1
		if i == n-1 {
			hi = 16383
		}
		err := rdb.ClusterAddSlotsRange(ctx, i*per, hi).Err()
		if err == nil && i > 0 {
			err = rdb.ClusterMeet(ctx, "127.0.0.1", c.Nodes[0].Addr()[len("127.0.0.1:"):]).Err()
		}
		_ = rdb.Close()
		if err != nil {
			t.Fatalf("redistest: cluster setup of %s: %v", s.Addr(), err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			shards, serr := rdb.ClusterShards(ctx).Result()
			if err == nil && serr == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) && len(shards) == n {
				break
			}
			if time.Now().After(deadline) {
				_ = rdb.Close()
				t.Fatalf("redistest: cluster on %s not ready in 30 s: %v %v\n%s", s.Addr(), err, serr, info)
			}
			time.Sleep(20 * time.Millisecond) // polling the cluster's gossip with a deadline
		}
		_ = rdb.Close()
	}
	return c
}
