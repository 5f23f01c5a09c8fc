package runtime_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// sameEntryIDs makes the next entry of every band of every queue get one id, T-1, as
// entries one enqueue.lua call adds in one millisecond share theirs: each stream's last
// id is set to T-0 (a millisecond an hour ahead) by an entry added and deleted before
// any consumer reads it. It returns the id the entries will get.
func sameEntryIDs(t *testing.T, e *env, queues ...string) string {
	t.Helper()
	ms := time.Now().Add(time.Hour).UnixMilli()
	for _, name := range queues {
		q := keys.New(e.prefix).Queue(name)
		for p := 0; p <= keys.MaxPriority; p++ {
			s := q.Stream(p)
			if err := e.rdb.XGroupCreateMkStream(e.ctx, s, keys.Group, "0").Err(); err != nil {
				t.Fatal(err)
			}
			id := strconv.FormatInt(ms, 10) + "-0"
			if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: s, ID: id, Values: []any{"x", "y"}}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.rdb.XDel(e.ctx, s, id).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return strconv.FormatInt(ms, 10) + "-1"
}

// enqueueEveryBand enqueues, in one EnqueueMany, one task of function fn on every band
// of every queue, and checks their entries all got the id want.
func enqueueEveryBand(t *testing.T, e *env, fn string, queues ...string) (ids map[string]string) {
	t.Helper()
	var ts []client.Task
	for _, q := range queues {
		for p := 0; p <= keys.MaxPriority; p++ {
			ts = append(ts, client.Task{Queue: q, Function: fn, Priority: p, MaxRetries: client.Retries(3)})
		}
	}
	rs, err := e.c.EnqueueMany(e.ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	ids = map[string]string{}
	for i, r := range rs {
		if r.Err != nil || !r.Created {
			t.Fatalf("enqueue %d: %+v", i, r)
		}
		ids[r.ID] = ts[i].Queue
	}
	return ids
}

// entriesOf returns the entry id each task's record holds.
func entriesOf(t *testing.T, e *env, ids map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id, q := range ids {
		out[id] = e.rdb.HGet(e.ctx, keys.New(e.prefix).Queue(q).Task(id), "entry").Val()
	}
	return out
}

// Executions on different bands and queues whose entries share one id, running past
// twice the visibility timeout: the heartbeat keeps every one of them, so each runs
// once (keyed by the entry id alone, all but one were reclaimed while they ran, again
// and again, until dead).
func TestSharedEntryIDsAcrossBandsAndQueuesRunOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	queues := []string{"qa", "qb"}
	want := sameEntryIDs(t, e, queues...)
	vt := time.Second
	var mu sync.Mutex
	starts := map[string]int{}
	reg := runtime.NewRegistry()
	reg.Register("long", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		mu.Lock()
		starts[task.ID]++
		mu.Unlock()
		// the task outlives the visibility timeout more than twice over
		if !sleepFor(ctx, 5*vt/2) {
			return nil, ctx.Err()
		}
		return nil, nil
	}, runtime.FuncOptions{})
	rec := newRecorder()
	cfg := e.config(t, "DTQ_QUEUES", "qa,qb", "DTQ_WORKER_CONCURRENCY", "32",
		"DTQ_VISIBILITY_TIMEOUT_S", "1", "DTQ_HEARTBEAT_INTERVAL_S", "0.2")
	startWorker(t, e.rdb, cfg, reg, rec)
	ids := enqueueEveryBand(t, e, "long", queues...)
	for id := range ids {
		rec.wait(t, "task "+id+" to end", func(ev runtime.Event) bool {
			return ev.TaskID == id && (ev.Type == runtime.EventTaskSucceeded || ev.Type == runtime.EventTaskDead)
		})
	}
	for id, entry := range entriesOf(t, e, ids) {
		if entry != want {
			t.Fatalf("task %s ran from entry %s, want the shared id %s (the test lost its premise)", id, entry, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, q := range ids {
		ti, err := e.c.Get(e.ctx, q, id)
		if err != nil {
			t.Fatal(err)
		}
		if starts[id] != 1 || ti.Attempt != 1 || ti.Failures != 0 || ti.Reclaims != 0 || ti.Status != "succeeded" {
			t.Errorf("task %s (queue %s, band %d): %d starts, attempt %d, failures %d, reclaims %d, %s; want one start, succeeded at attempt 1",
				id, q, ti.Priority, starts[id], ti.Attempt, ti.Failures, ti.Reclaims, ti.Status)
		}
	}
	if n := rec.count(is(runtime.EventTaskReclaimed, "")); n != 0 {
		t.Errorf("%d reclaims of tasks whose worker was alive", n)
	}
}

// A drain that gives up hands back every running execution, including ones whose
// entries share an id across bands and queues; a peer then runs each once more, with
// no failure counted (keyed by the entry id alone, one of twenty was handed back).
func TestDrainHandsBackSharedEntryIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	queues := []string{"qa", "qb"}
	want := sameEntryIDs(t, e, queues...)
	b := newBlocking(1) // attempt 1 blocks until cancelled; the peer's attempt 2 succeeds
	reg := runtime.NewRegistry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	kv := []string{"DTQ_QUEUES", "qa,qb", "DTQ_WORKER_CONCURRENCY", "32",
		"DTQ_VISIBILITY_TIMEOUT_S", "30", "DTQ_HEARTBEAT_INTERVAL_S", "0.2", "DTQ_DRAIN_TIMEOUT_S", "0.1"}
	rec := newRecorder()
	first := startWorker(t, e.rdb, e.config(t, kv...), reg, rec)
	ids := enqueueEveryBand(t, e, "block", queues...)
	rec.logOnFailure(t)
	defer func() {
		if t.Failed() {
			for id, q := range ids {
				t.Logf("task %s %s: %v", q, id, e.rdb.HGetAll(e.ctx, keys.New(e.prefix).Queue(q).Task(id)).Val())
			}
		}
	}()
	for range ids {
		select {
		case <-b.started:
		case <-time.After(waitTimeout):
			t.Fatal("timed out waiting for the functions to start")
		}
	}
	for id, entry := range entriesOf(t, e, ids) {
		if entry != want {
			t.Fatalf("task %s runs from entry %s, want the shared id %s (the test lost its premise)", id, entry, want)
		}
	}
	first.stop()
	if n := rec.count(is(runtime.EventHandedBack, "")); n != len(ids) {
		t.Fatalf("%d of %d executions handed back at the drain deadline", n, len(ids))
	}
	for id, q := range ids {
		if hb := e.rdb.HGet(e.ctx, keys.New(e.prefix).Queue(q).Task(id), "handback").Val(); hb != "1" {
			t.Fatalf("task %s: handback %q, want attempt 1 marked handed back", id, hb)
		}
	}
	// The peer's reaper takes them at once (their idle clocks were set to the visibility
	// timeout), without counting a failure.
	startWorker(t, e.rdb, e.config(t, kv...), reg, rec)
	for id := range ids {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	for id, q := range ids {
		ti, err := e.c.Get(e.ctx, q, id)
		if err != nil {
			t.Fatal(err)
		}
		if ti.Status != "succeeded" || ti.Attempt != 2 || ti.Failures != 0 {
			t.Errorf("task %s: %s at attempt %d with %d failures; want succeeded at attempt 2, no failure", id, ti.Status, ti.Attempt, ti.Failures)
		}
	}
}

// sleepFor waits d or until ctx ends; it reports whether the full wait elapsed.
func sleepFor(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// Tasks started in a burst each get an executor while the pool has room: none waits
// for a running function to return (a job sent just as an idle executor took another
// used to find no executor, and waited behind functions that ran until released).
func TestBurstOfLongTasksAllStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := newBlocking(0)
	reg := runtime.NewRegistry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", "64", "DTQ_VISIBILITY_TIMEOUT_S", "60", "DTQ_HEARTBEAT_INTERVAL_S", "1"), reg, nil)
	for round := range 4 {
		var ts []client.Task
		for i := range 16 {
			ts = append(ts, client.Task{Queue: "default", Function: "block", Priority: (i + round) % 10})
		}
		if _, err := e.c.EnqueueMany(e.ctx, ts); err != nil {
			t.Fatal(err)
		}
		for range ts {
			b.waitStart(t)
		}
	}
	close(b.release)
}
