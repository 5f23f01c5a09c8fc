package runtime_test

import (
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// Workers idle in their blocking read when the operator pauses the queue: the entries
// enqueued next are delivered to them anyway (their reads were issued before the pause),
// and each goes back unstarted. Nothing starts until the resume, nothing is lost, and
// after it every task runs once.
func TestPauseStopsIdleWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	rec.logOnFailure(t)
	const workers = 3
	var ws []*running
	for range workers {
		// a long block: the workers stay in the reads they issued before the pause
		ws = append(ws, startWorker(t, e.rdb, e.config(t, "DTQ_POLL_BLOCK_MS", "60000"), nil, rec))
	}
	q := keys.New(e.prefix).Queue("default")
	eventually(t, "every worker idle and registered for a hand-off", func() bool {
		return e.rdb.ZCard(e.ctx, q.Waiting()).Val() == workers
	})
	if err := e.c.Pause(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	var ts []client.Task
	for p := 0; p <= keys.MaxPriority; p++ {
		ts = append(ts, client.Task{Queue: "default", Function: "noop", Priority: p})
	}
	rs, err := e.c.EnqueueMany(e.ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil || !r.Created {
			t.Fatalf("enqueue: %+v", r)
		}
	}
	// Every worker's read returns an entry (a put-back is a new entry, which wakes the
	// next reader still blocked): wait until each has either returned one or started one.
	for _, w := range ws {
		id := w.w.ID()
		rec.wait(t, "worker "+id+" to meet the pause", func(ev runtime.Event) bool {
			return ev.Worker == id && (ev.Type == runtime.EventReturned || ev.Type == runtime.EventTaskStarted)
		})
	}
	resumed := runtime.Event{Type: "TEST_RESUMED"}
	rec.observe(resumed)
	rec.mu.Lock()
	for _, ev := range rec.events {
		if ev.Type == runtime.EventTaskStarted {
			t.Errorf("task %s started on %s while its queue was paused", ev.TaskID, ev.Worker)
		}
	}
	rec.mu.Unlock()
	var n int64
	for p := 0; p <= keys.MaxPriority; p++ {
		n += e.rdb.XLen(e.ctx, q.Stream(p)).Val()
	}
	if n != int64(len(rs)) {
		t.Errorf("the bands hold %d entries while paused, want %d (one a task)", n, len(rs))
	}
	for _, r := range rs {
		if ti := e.task(t, r.ID); ti.Status != "queued" || ti.Attempt != 0 {
			t.Errorf("task %s is %s at attempt %d while paused, want queued at 0", r.ID, ti.Status, ti.Attempt)
		}
	}
	if err := e.c.Resume(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		rec.wait(t, "task "+r.ID+" after the resume", is(runtime.EventTaskSucceeded, r.ID))
	}
	for _, r := range rs {
		if c := rec.count(is(runtime.EventTaskStarted, r.ID)); c != 1 {
			t.Errorf("task %s started %d times, want once", r.ID, c)
		}
	}
}
