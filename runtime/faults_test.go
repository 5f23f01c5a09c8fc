package runtime_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/runtime"
)

// startLoggedWorker starts a worker whose log goes to the returned buffer.
func startLoggedWorker(t *testing.T, e *env, cfg runtime.Config, rec *recorder) *syncbuf.Buffer {
	t.Helper()
	lb := &syncbuf.Buffer{}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: e.rdb, Registry: function.Registry(), Observe: rec.observe,
		Logger: slog.New(slog.NewTextHandler(lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return lb
}

// A band stream of the worker's first queue turned into a string: the other bands of
// that queue and every other queue are still served, the log names the key, and once
// the key is mended its band is served again.
func TestBrokenBandStopsNothingElse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qa := keys.New(e.prefix).Queue("qa")
	if err := e.rdb.Set(e.ctx, qa.Stream(5), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	lb := startLoggedWorker(t, e, e.config(t, "DTQ_QUEUES", "qa,qb"), rec)
	var ids []string
	for _, task := range []client.Task{
		{Queue: "qa", Function: "noop", Priority: 9},
		{Queue: "qa", Function: "noop", Priority: 3},
		{Queue: "qb", Function: "noop", Priority: 5},
	} {
		ids = append(ids, e.enqueue(t, task))
	}
	for _, id := range ids {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	eventually(t, "a log line naming the broken key", func() bool { return lb.Contains(qa.Stream(5)) })
	if err := e.rdb.Del(e.ctx, qa.Stream(5)).Err(); err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(t, client.Task{Queue: "qa", Function: "noop", Priority: 5})
	rec.wait(t, "the mended band's task", is(runtime.EventTaskSucceeded, id))
}

// A schedule zset of another type in one queue: delayed tasks of the other queues still
// move, and the log names the key.
func TestBrokenScheduleStopsNoOtherQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qa := keys.New(e.prefix).Queue("qa")
	// qa is known (the leader schedules every known queue), its schedule broken
	e.enqueue(t, client.Task{Queue: "qa", Function: "noop"})
	if err := e.rdb.Set(e.ctx, qa.Schedule(), "not a zset", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	lb := startLoggedWorker(t, e, e.config(t, "DTQ_QUEUES", "qb,qa"), rec)
	id := e.enqueue(t, client.Task{Queue: "qb", Function: "noop", Delay: 50 * time.Millisecond})
	rec.wait(t, "the other queue's delayed task", is(runtime.EventTaskSucceeded, id))
	eventually(t, "a log line naming the broken key", func() bool { return lb.Contains(qa.Schedule()) })
}

// A band broken while the worker is blocked on it: the idle read, which fails as a
// whole, leaves that band out from then on; the poll loop does not fail.
func TestBandBrokenUnderTheIdleRead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qa := keys.New(e.prefix).Queue("qa")
	rec := newRecorder()
	lb := startLoggedWorker(t, e, e.config(t, "DTQ_QUEUES", "qa,qb", "DTQ_POLL_BLOCK_MS", "60000"), rec)
	eventually(t, "the worker idle on both queues", func() bool {
		return e.rdb.ZCard(e.ctx, qa.Waiting()).Val() == 1 && e.rdb.ZCard(e.ctx, keys.New(e.prefix).Queue("qb").Waiting()).Val() == 1
	})
	if err := e.rdb.Set(e.ctx, qa.Stream(0), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		id := e.enqueue(t, client.Task{Queue: "qb", Function: "noop", Priority: 4})
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	eventually(t, "a log line naming the broken key", func() bool { return lb.Contains(qa.Stream(0)) })
	if lb.Contains("loop failed") {
		t.Fatalf("the poll loop failed on the broken band:\n%s", lb.String())
	}
}

// A task fails while its queue's schedule is of another type: its retry cannot be
// filed, so nothing is recorded and its entry stays pending; once the schedule is
// mended the task is retried and succeeds (the record used to say "retrying" with no
// schedule entry, and the task never ran again).
func TestRetryRefusedByABrokenScheduleIsNotLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qa := keys.New(e.prefix).Queue("default")
	e.enqueue(t, client.Task{Function: "noop"}) // the queue's keys exist
	if err := e.rdb.Set(e.ctx, qa.Schedule(), "not a zset", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	lb := startLoggedWorker(t, e, e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "1", "DTQ_HEARTBEAT_INTERVAL_S", "0.2"), rec)
	id := e.enqueue(t, client.Task{Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(3)})
	eventually(t, "the refused outcome logged with the key", func() bool {
		return lb.Contains("outcome refused") && lb.Contains(qa.Schedule()+" is a string")
	})
	if ti := e.task(t, id); ti.Status == "retrying" {
		t.Fatalf("task %+v says retrying with no schedule to hold it", ti)
	}
	if err := e.rdb.Del(e.ctx, qa.Schedule()).Err(); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the task retried once the schedule is mended", is(runtime.EventTaskSucceeded, id))
}

// A completion that Redis refuses for a key's sake (the band stream replaced by a
// string under a running task) does not hold up the other queues' completions.
func TestRefusedCompletionHoldsUpNoOtherQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qa := keys.New(e.prefix).Queue("qa")
	b := newBlocking(0)
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "qa,qb"), reg, rec)
	e.enqueue(t, client.Task{Queue: "qa", Function: "block", Priority: 3})
	b.waitStart(t)
	if err := e.rdb.Set(e.ctx, qa.Stream(3), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	close(b.release) // its completion fails on the string
	for range 3 {
		id := e.enqueue(t, client.Task{Queue: "qb", Function: "noop"})
		rec.wait(t, "the other queue's task recorded", is(runtime.EventTaskSucceeded, id))
	}
}
