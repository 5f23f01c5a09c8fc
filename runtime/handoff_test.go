package runtime_test

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

func metricsOf(r *running) string {
	rw := httptest.NewRecorder()
	r.w.Handler().ServeHTTP(rw, httptest.NewRequest("GET", runtime.PathMetrics, nil))
	return rw.Body.String()
}

// registered reports whether worker waits for a hand-off on queue q.
func (e *env) registered(q keys.Queue, worker string) bool {
	_, err := e.rdb.ZScore(e.ctx, q.Waiting(), lua.WaitingMember(client.DefaultMaxPayload, worker)).Result()
	return err == nil
}

// An idle worker gets each new task from the enqueue itself (no claim round trip) and
// tells its next claim, so the task's hand-back mark is cleared; at drain it leaves.
func TestIdleWorkerTakesHandoffs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := keys.New(e.prefix).Queue("default")
	rec := newRecorder()
	r := startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", "2"), nil, rec)
	const n = 5
	for i := range n {
		eventually(t, "the idle worker registered", func() bool { return e.registered(q, r.w.ID()) })
		id := e.enqueue(t, client.Task{Function: "noop", Priority: i})
		rec.wait(t, "the task done", is(runtime.EventTaskSucceeded, id))
		ti := e.task(t, id)
		if ti.Attempt != 1 || ti.Worker != r.w.ID() || ti.Failures != 0 {
			t.Fatalf("task %+v", ti)
		}
		eventually(t, "the hand-off told to the next claim", func() bool {
			p, err := e.rdb.XPending(e.ctx, q.Inbox(r.w.ID()), keys.Group).Result()
			return e.rdb.HGet(e.ctx, q.Task(id), "handback").Val() == "" &&
				e.rdb.XLen(e.ctx, q.Inbox(r.w.ID())).Val() == 0 && err == nil && p.Count == 0
		})
	}
	want := `dtq_worker_handoffs_total{worker_id="` + r.w.ID() + `"} 5`
	if body := metricsOf(r); !strings.Contains(body, want) {
		t.Fatalf("metrics lack %q", want)
	}
	r.stop()
	if e.registered(q, r.w.ID()) || e.rdb.Exists(e.ctx, q.Inbox(r.w.ID())).Val() != 0 {
		t.Fatal("the stopped worker is still registered or its inbox is left")
	}
	id := e.enqueue(t, client.Task{Function: "noop"})
	if ti := e.task(t, id); ti.Status != "queued" {
		t.Fatalf("a task after the drain is %q, want queued", ti.Status)
	}
}

// A worker SIGKILLed while it waits idle leaves one registration behind, and the next
// task is handed to it. The scheduler leader puts that task back on its stream a second
// later (rescue.lua): a peer runs it at attempt 1 with no failure counted, long before
// the visibility timeout (a minute here) would have let anyone reclaim it.
func TestKill9IdleWorkerHandoffRescued(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := keys.New(e.prefix).Queue("default")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"DTQ_REDIS_URL="+e.srv.URL(), "DTQ_KEY_PREFIX="+e.prefix, "DTQ_WORKER_ID=idle-victim",
		"DTQ_VISIBILITY_TIMEOUT_S=60", "DTQ_HEARTBEAT_INTERVAL_S=0.2",
		"DTQ_SCHEDULER_INTERVAL_S=0.1", "DTQ_SCHEDULER_LOCK_TTL_MS=300", "PORT=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	eventually(t, "the child registered", func() bool { return e.registered(q, "idle-victim") })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	id := e.enqueue(t, client.Task{Function: "noop", MaxRetries: client.Retries(0)})
	if ti := e.task(t, id); ti.Status != "running" || ti.Worker != "idle-victim" {
		t.Fatalf("task %+v, want handed to the dead worker", ti)
	}
	rec := newRecorder()
	peer := startWorker(t, e.rdb, e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "60", "DTQ_HEARTBEAT_INTERVAL_S", "0.2",
		"DTQ_SCHEDULER_INTERVAL_S", "0.1", "DTQ_SCHEDULER_LOCK_TTL_MS", "300"), function.Registry(), rec)
	rec.wait(t, "the peer rescuing the task", is(runtime.EventHandoffRescued, id))
	rec.wait(t, "the peer completing the task", is(runtime.EventTaskSucceeded, id))
	ti := e.task(t, id)
	if ti.Status != "succeeded" || ti.Attempt != 1 || ti.Worker != peer.w.ID() || ti.Failures != 0 {
		t.Fatalf("task %+v: want succeeded by the peer at attempt 1, no failure counted", ti)
	}
	want := `dtq_worker_handoffs_rescued_total{worker_id="` + peer.w.ID() + `"} 1`
	if body := metricsOf(peer); !strings.Contains(body, want) {
		t.Fatalf("metrics lack %q", want)
	}
}

// A malformed row on a worker's inbox is dropped with a warning (and deleted); the
// worker goes on taking hand-offs.
func TestMalformedInboxRowIsDropped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := keys.New(e.prefix).Queue("default")
	rec := newRecorder()
	r := startWorker(t, e.rdb, e.config(t), nil, rec)
	eventually(t, "the idle worker registered", func() bool { return e.registered(q, r.w.ID()) })
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: q.Inbox(r.w.ID()), Values: []string{"b", "99", "i", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker registered again", func() bool { return e.registered(q, r.w.ID()) })
	id := e.enqueue(t, client.Task{Function: "noop"})
	rec.wait(t, "the next task done", is(runtime.EventTaskSucceeded, id))
	eventually(t, "the bad row deleted", func() bool { return e.rdb.XLen(e.ctx, q.Inbox(r.w.ID())).Val() == 0 })
}
