package client_test

import (
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/redistest"
)

// The statuses the scripts write read back as the client's constants.
func TestStatusesAsWritten(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	now, _, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	later, _, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop", Delay: time.Hour, Unique: "u"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]client.Status{now: client.StatusQueued, later: client.StatusScheduled} {
		if ti, err := c.Get(ctx, "q", id); err != nil || ti.Status != want {
			t.Fatalf("task %s: %+v, %v; want %s", id, ti, err, want)
		}
	}
	if err := c.Cancel(ctx, "q", later); err != nil {
		t.Fatal(err)
	}
	ti, err := c.WaitFor(ctx, "q", later, time.Millisecond, client.StatusCancelled)
	if err != nil || ti.Status != client.StatusCancelled || !ti.Status.Finished() {
		t.Fatalf("cancelled task: %+v, %v", ti, err)
	}
	rs, err := c.EnqueueMany(ctx, []client.Task{{Queue: "q", Function: "noop", Unique: "u"}})
	if err != nil || rs[0].Err != nil || rs[0].Created || rs[0].HolderStatus != client.StatusCancelled {
		t.Fatalf("enqueue on a cancelled task's unique key: %+v, %v", rs, err)
	}
}

// Workers returns the client's own types, judged as liveness judges them.
func TestWorkersTyped(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	now := time.Now()
	c := client.New(rdb, client.Options{Prefix: prefix, Now: func() time.Time { return now }})
	ctx := t.Context()
	if ws, err := c.Workers(ctx); err != nil || ws != nil {
		t.Fatalf("no workers: %v, %v", ws, err)
	}
	ks := keys.New(prefix)
	for id, hb := range map[string]struct {
		status liveness.Status
		age    time.Duration
	}{"fresh": {liveness.Busy, time.Second}, "old": {liveness.Ready, time.Hour}, "done": {liveness.Stopped, time.Second}} {
		if err := rdb.HSet(ctx, ks.Worker(id), liveness.FieldWorkerID, id, liveness.FieldStatus, string(hb.status),
			liveness.FieldLastHeartbeat, now.Add(-hb.age).UnixMilli(), liveness.FieldIntervalMS, 5000).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.SAdd(ctx, ks.Workers(), id)
	}
	rdb.SAdd(ctx, ks.Workers(), "expired")
	ws, err := c.Workers(ctx)
	if err != nil || len(ws) != 4 {
		t.Fatalf("workers: %+v, %v", ws, err)
	}
	want := map[string]struct {
		status   client.WorkerStatus
		liveness client.Liveness
	}{
		"fresh":   {client.WorkerBusy, client.LivenessLive},
		"old":     {client.WorkerReady, client.LivenessStale},
		"done":    {client.WorkerStopped, client.LivenessStopped},
		"expired": {"", client.LivenessStale},
	}
	for _, w := range ws {
		if wt, ok := want[w.ID]; !ok || w.Status != wt.status || w.Liveness != wt.liveness {
			t.Fatalf("worker %s: %s/%s, want %+v", w.ID, w.Status, w.Liveness, wt)
		}
	}
}
