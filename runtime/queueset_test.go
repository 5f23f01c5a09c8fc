package runtime_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// The queue set deleted under load, again and again: delayed tasks of a queue no
// worker serves still move (the leader keeps the queues it knew and puts them back),
// and the served queue comes back with the next heartbeat.
func TestQueueSetDeletedUnderLoad(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	set := keys.New(e.prefix).Queues()
	other := func() string {
		t.Helper()
		id, created, err := e.c.Enqueue(e.ctx, client.Task{Queue: "other", Function: "noop", Delay: 20 * time.Millisecond})
		if err != nil || !created {
			t.Fatalf("enqueue: %v", err)
		}
		return id
	}
	queued := func(id string) func() bool {
		return func() bool {
			ti, err := e.c.Get(e.ctx, "other", id)
			return err == nil && ti.Status == "queued"
		}
	}
	eventually(t, "the first delayed task of a queue nobody serves moved", queued(other()))
	for range 5 {
		for range 20 { // load on the served queue
			e.enqueue(t, client.Task{Function: "noop"})
		}
		if err := e.rdb.Del(e.ctx, set).Err(); err != nil {
			t.Fatal(err)
		}
		// the same client: it adds "other" again only after client.RegisterEvery
		eventually(t, "a delayed task after the set was deleted moved", queued(other()))
	}
	eventually(t, "both queues back in the set", func() bool {
		got := e.rdb.SMembers(e.ctx, set).Val()
		return slices.Contains(got, "other") && slices.Contains(got, "default")
	})
}
