package observer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/runtime"
)

// cancelField is the "cancel" field of a task's record: the ms its stop was requested
// ("" when it never was).
func (e *env) cancelField(queue, id string) string {
	e.t.Helper()
	v, err := e.rdb.HGet(context.Background(), e.ks.Queue(queue).Task(id), "cancel").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		e.t.Fatalf("the cancel field of %s: %v", id, err)
	}
	return v
}

// A running task has its Cancel button on the queue's running tab and on its task page.
// Pressed, the button asks the task's worker to stop it, says so, and the worker ends the
// task cancelled at its next heartbeat. A queued task's Cancel still cancels it at once.
func TestUICancelRunningTask(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan string, 4)
	release := make(chan struct{})
	reg := runtime.NewRegistry()
	reg.Register("hold", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		started <- task.ID
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-release:
			return nil, nil
		}
	}, runtime.FuncOptions{MaxRetries: 3})
	startWorkerWith(t, e, reg, map[string]string{
		"DTQ_QUEUES": "jobs", "DTQ_HEARTBEAT_INTERVAL_S": "0.2", "DTQ_DRAIN_TIMEOUT_S": "0",
	})
	t.Cleanup(func() { close(release) }) // first: a test that failed lets the functions end

	a := e.enqueue(client.Task{Queue: "jobs", Function: "hold"})
	b := e.enqueue(client.Task{Queue: "jobs", Function: "hold"})
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("timed out waiting for the tasks to start")
		}
	}

	tb := openTab(t, e, 1280, 900)
	tb.open("#/queues/jobs")
	tb.useToken(token)
	tb.click(`button[data-key="tab:running"]`)
	tb.waitText(`tr[data-task="`+b+`"]`, "running")
	tb.waitText(`button[data-key="cancel:`+b+`"]`, "Cancel")
	tb.waitText(`button[data-key="cancel:`+a+`"]`, "Cancel")
	if got := eval[string](tb, `document.querySelector('button[data-key="cancel:`+a+`"]').getAttribute('aria-label')`); got != "Cancel "+a {
		t.Fatalf("label of the Cancel button: %q", got)
	}

	// From the running tab.
	tb.click(`button[data-key="cancel:` + a + `"]`)
	tb.waitText("#status", "Cancel requested for "+a+"; its worker stops it.")
	if e.cancelField("jobs", a) == "" {
		t.Fatal("the record of the task has no cancel request")
	}
	tb.waitFor("the worker to end the task cancelled", func() bool { return e.status("jobs", a) == client.StatusCancelled })
	tb.waitFor("its row to leave the running tab", func() bool { return tb.text(`tr[data-task="`+a+`"]`) == "" })
	if s := e.status("jobs", b); s != client.StatusRunning {
		t.Fatalf("the other task: %s, want running", s)
	}

	// From the task page.
	tb.open("#/queues/jobs/tasks/" + b)
	tb.waitText(`[data-field="status"] dd`, "running")
	tb.waitText(`button[data-key="cancel"]`, "Cancel")
	tb.click(`button[data-key="cancel"]`)
	tb.waitText("#status", "Cancel requested for "+b+"; its worker stops it.")
	if e.cancelField("jobs", b) == "" {
		t.Fatal("the record of the task has no cancel request")
	}
	tb.waitFor("the worker to end the task cancelled", func() bool { return e.status("jobs", b) == client.StatusCancelled })
	tb.waitText(`[data-field="status"] dd`, "cancelled")
	tb.waitFor("the Cancel button gone", func() bool { return tb.text(`button[data-key="cancel"]`) == "" })
	select {
	case id := <-started:
		t.Fatalf("the cancelled task %s ran again", id)
	default:
	}

	// A queued task (of a queue no worker serves) is cancelled at once.
	c := e.enqueue(client.Task{Queue: "idle", Function: "hold"})
	tb.open("#/queues/idle")
	tb.click(`button[data-key="cancel:` + c + `"]`)
	tb.waitText("#status", "Cancelled "+c+".")
	if s := e.status("idle", c); s != client.StatusCancelled {
		t.Fatalf("the queued task: %s, want cancelled", s)
	}
	if e.cancelField("idle", c) != "" {
		t.Fatal("a queued task's cancel was recorded as a request")
	}
}
