package scaler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// TestRedisCluster serves the signal of queues on three different nodes of a Redis
// Cluster: GetMetrics counts each queue's lag, pending and due tasks on its own node,
// and StreamIsActive (which polls on a cluster: one XREAD cannot span slots) wakes on
// the first task and goes idle again when the backlog drains.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := ctxT(t)
	prefix := redistest.Prefix(t)
	ks := keys.New(prefix)
	queues := cl.QueuesOnEveryNode(t, func(q string) string { return ks.Queue(q).Stream(0) })

	cfg := testConfig(prefix)
	// Resynchronising reads far apart: on a cluster the push must come from polling
	// every PushPollMS, or it would not come before the test's deadline.
	cfg.PushMaxBlock = 300 * time.Second
	f := serve(t, c, cfg)

	s := seed{t, c, ks}
	// Queue i: i+1 undelivered on band 9, i+1 delivered and pending on band 3, one due.
	var want float64
	for i, q := range queues {
		s.add(q, 9, i+1)
		s.add(q, 3, i+1)
		s.deliver(q, 3, i+1)
		s.schedule(q, time.Now().Add(-time.Second), "due")
		want += float64(2*(i+1) + 1)
	}
	r := ref("queues", queues[0]+","+queues[1]+","+queues[2])
	got := metricValues(t, f, r)
	name := "dtq-" + queues[0] + "-" + queues[1] + "-" + queues[2]
	if got[name] != want {
		t.Fatalf("%s = %v, want %v (all: %v)", name, got[name], want, got)
	}

	// With a queue that does not exist: its EXISTS goes to its own node, it reads as
	// zero and stays out of the shared read.
	r = ref("queues", queues[0]+","+queues[1]+","+queues[2]+",absent")
	if got := metricValues(t, f, r); got[name+"-absent"] != want {
		t.Fatalf("with an absent queue: %v, want %v", got, want)
	}
	if w := sorted(f.s.sig.watched()); !slices.Equal(w, sorted(slices.Clone(queues[:3]))) {
		t.Fatalf("shared read = %v, want %v", w, queues[:3])
	}

	// Push on a queue of its own node.
	q := queues[2]
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.cli.StreamIsActive(pctx, ref("queues", q+"x"))
	if err != nil {
		t.Fatal(err)
	}
	if first, err := stream.Recv(); err != nil || first.Result {
		t.Fatalf("first message = %v, %v; want false", first, err)
	}
	ids := s.add(q+"x", 5, 1)
	if m, err := stream.Recv(); err != nil || !m.Result {
		t.Fatalf("after the first task: %v, %v; want true", m, err)
	}
	s.finish(q+"x", 5, ids...)
	if m, err := stream.Recv(); err != nil || m.Result {
		t.Fatalf("after the backlog drained: %v, %v; want false", m, err)
	}
}
