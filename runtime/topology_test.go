package runtime_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

// TestRedisCluster runs workers against a three-node Redis Cluster, through a
// redis+cluster:// URL, on queues whose keys live on three different nodes: tasks of
// every kind (each band, a retry, a delayed task, a unique key) succeed, each band
// ends empty, the scheduler moves due work on every node, and a drain's hand-back
// reaches a peer through the reaper on the entry's own node.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rdb, err := redisconn.Open(cl.URL(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("%s opened a %T, want a cluster client", cl.URL(), rdb)
	}
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	ks := keys.New(prefix)

	queues := cl.QueuesOnEveryNode(t, func(q string) string { return ks.Queue(q).Stream(0) })

	c := client.New(rdb, client.Options{Prefix: prefix})
	rec := newRecorder()
	b := newBlocking(1) // attempt 1 blocks until cancelled; later attempts succeed
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{MaxRetries: 0})
	cfg := testConfig(t, cl.URL(), prefix, map[string]string{
		"DTQ_QUEUES": strings.Join(queues, ","), "DTQ_DRAIN_TIMEOUT_S": "0.2",
		"DTQ_VISIBILITY_TIMEOUT_S": "20", "DTQ_HEARTBEAT_INTERVAL_S": "1"})
	first := startWorker(t, rdb, cfg, reg, rec)

	type want struct{ queue, id string }
	var tasks []want
	enqueue := func(tk client.Task) string {
		t.Helper()
		id, created, err := c.Enqueue(ctx, tk)
		if err != nil || !created {
			t.Fatalf("enqueue %+v: created=%v err=%v", tk, created, err)
		}
		return id
	}
	for _, q := range queues {
		for _, p := range []int{0, 5, 9} {
			tasks = append(tasks, want{q, enqueue(client.Task{Queue: q, Function: "echo", Priority: p, Payload: []byte(`{"q":"` + q + `"}`)})})
		}
		tasks = append(tasks, want{q, enqueue(client.Task{Queue: q, Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(2)})})
		tasks = append(tasks, want{q, enqueue(client.Task{Queue: q, Function: "noop", Delay: 200 * time.Millisecond})})
		id := enqueue(client.Task{Queue: q, Function: "noop", Unique: "once"})
		tasks = append(tasks, want{q, id})
		if again, created, err := c.Enqueue(ctx, client.Task{Queue: q, Function: "noop", Unique: "once"}); err != nil || created || again != id {
			t.Fatalf("%s: second enqueue with the unique key: id %s created %v err %v, want %s and nothing created", q, again, created, err, id)
		}
	}
	// One EnqueueMany over queues on every node: a batch per queue, each sent to its node.
	var many []client.Task
	for _, q := range queues {
		for _, p := range []int{2, 7} {
			many = append(many, client.Task{Queue: q, Function: "echo", Priority: p, Payload: []byte(`{"many":"` + q + `"}`)})
		}
	}
	res, err := c.EnqueueMany(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("EnqueueMany task %d (%s): %+v", i, many[i].Queue, r)
		}
		tasks = append(tasks, want{many[i].Queue, r.ID})
	}
	for _, tk := range tasks {
		rec.wait(t, "task "+tk.id, is(runtime.EventTaskSucceeded, tk.id))
	}
	for _, tk := range tasks {
		ti, err := c.Get(ctx, tk.queue, tk.id)
		if err != nil || ti.Status != "succeeded" {
			t.Fatalf("%s/%s: %+v %v, want succeeded", tk.queue, tk.id, ti, err)
		}
	}

	// A drain past its timeout hands the running task back; a peer's reaper, on
	// whichever node the entry lives, takes it at once.
	q := queues[len(queues)-1]
	id := enqueue(client.Task{Queue: q, Function: "block"})
	b.waitStart(t)
	peer := handBackToPeer(t, first, id, rdb, cfg, reg, rec)
	if ti, err := c.Get(ctx, q, id); err != nil || ti.Status != "succeeded" || ti.Attempt != 2 {
		t.Fatalf("handed-back task %+v %v: want succeeded at attempt 2", ti, err)
	}

	for _, q := range queues {
		for p := 0; p <= keys.MaxPriority; p++ {
			if n, err := rdb.XLen(ctx, ks.Queue(q).Stream(p)).Result(); err != nil || n != 0 {
				t.Fatalf("%s band %d: XLEN %d (%v) after every task ended, want 0", q, p, n, err)
			}
		}
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range ws {
		found = found || w.ID == peer.w.ID()
	}
	if !found {
		t.Fatalf("workers %+v: the live peer %s is missing", ws, peer.w.ID())
	}
}

// TestRedisSentinel runs a worker that finds its Redis through a sentinel
// (redis+sentinel:// URL): tasks run, retry and finish, and a drain's hand-back on the
// master it found reaches a peer.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.Options{})
	sen := redistest.StartSentinel(t, master, "dtqmaster")
	rdb, err := redisconn.Open(sen.URL(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	rec := newRecorder()
	b := newBlocking(1)
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{MaxRetries: 0})
	cfg := testConfig(t, sen.URL(), prefix, map[string]string{"DTQ_DRAIN_TIMEOUT_S": "0.2",
		"DTQ_VISIBILITY_TIMEOUT_S": "20", "DTQ_HEARTBEAT_INTERVAL_S": "1"})
	first := startWorker(t, rdb, cfg, reg, rec)
	var ids []string
	for _, tk := range []client.Task{
		{Queue: "default", Function: "echo", Priority: 9, Payload: []byte(`{}`)},
		{Queue: "default", Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(2)},
		{Queue: "default", Function: "noop", Delay: 100 * time.Millisecond},
	} {
		id, _, err := c.Enqueue(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "block"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitStart(t)
	handBackToPeer(t, first, id, rdb, cfg, reg, rec)
	// Everything went to the master the sentinel named.
	if n, err := master.Client(t).Exists(ctx, keys.New(prefix).Queue("default").Task(id)).Result(); err != nil || n != 1 {
		t.Fatalf("task %s on the master: %d %v", id, n, err)
	}
}

// handBackToPeer stops first, whose drain runs out while task id runs, waits for the
// hand-back, and starts a peer, returned once it has completed the task.
func handBackToPeer(t *testing.T, first *running, id string, rdb redis.UniversalClient, cfg runtime.Config, reg *runtime.Registry, rec *recorder) *running {
	t.Helper()
	first.stop()
	rec.wait(t, "hand-back", is(runtime.EventHandedBack, id))
	peer := startWorker(t, rdb, cfg, reg, rec)
	rec.wait(t, "peer completes the handed-back task", func(ev runtime.Event) bool {
		return ev.Type == runtime.EventTaskSucceeded && ev.TaskID == id && ev.Worker == peer.w.ID()
	})
	return peer
}

// TestRedisSentinelFailover: the master dies, the sentinel promotes its replica, and the
// worker, which found Redis through the sentinel, carries on against the new master:
// a task enqueued (and replicated) before the failover and tasks enqueued after it all
// succeed. (Writes the old master had not replicated are Redis's to lose, not tested.)
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	replica := redistest.Start(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	rc := replica.Client(t)
	eventually(t, "the replica's link to its master", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	sen := redistest.StartSentinel(t, master, "dtqfail",
		"sentinel down-after-milliseconds dtqfail 500", "sentinel failover-timeout dtqfail 5000")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr()})
	t.Cleanup(func() { _ = sc.Close() })
	eventually(t, "the sentinel to know the replica", func() bool {
		rs, err := sc.Replicas(ctx, "dtqfail").Result()
		return err == nil && len(rs) == 1
	})

	rdb, err := redisconn.Open(sen.URL(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	rec := newRecorder()
	startWorker(t, rdb, testConfig(t, sen.URL(), prefix, nil), nil, rec)
	before, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop", Delay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := master.Client(t).Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}

	master.Kill()
	eventually(t, "the sentinel to promote the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, "dtqfail").Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port)
	})
	var after []string
	for range 3 {
		var id string
		eventually(t, "an enqueue on the new master", func() bool {
			id, _, err = c.Enqueue(ctx, client.Task{Queue: "default", Function: "echo", Payload: []byte(`{}`)})
			return err == nil
		})
		after = append(after, id)
	}
	for _, id := range append(after, before) {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	for _, id := range append(after, before) {
		if ti, err := c.Get(ctx, "default", id); err != nil || ti.Status != "succeeded" {
			t.Fatalf("task %s: %+v %v, want succeeded", id, ti, err)
		}
	}
}
