package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

// waitStatus polls the task record until it reaches a final status.
func (e *env) waitFinal(t *testing.T, id string) *client.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ti := e.task(t, id)
		if ti.Status == client.StatusSucceeded || ti.Status == client.StatusDead || ti.Status == client.StatusCancelled {
			return ti
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s", id, ti.Status)
		}
		waitTick()
	}
}

// A running task is stopped within a heartbeat of the request: its function's context
// ends with runtime.ErrCancelled as its cause, the task ends cancelled, never retried,
// and its entry is acknowledged and removed.
func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	e := setup(t)
	causes := make(chan error, 4)
	reg := runtime.NewRegistry()
	starts := make(chan int64, 4)
	reg.Register("wait", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		starts <- task.Attempt
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, runtime.FuncOptions{MaxRetries: 5})
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), reg, rec)
	id := e.enqueue(t, client.Task{Function: "wait"})
	<-starts
	out, err := e.c.CancelTask(e.ctx, "default", id)
	if err != nil || out != client.CancelRequested {
		t.Fatalf("CancelTask = %q, %v; want requested", out, err)
	}
	rec.wait(t, "TASK_CANCELLED", is(runtime.EventTaskCancelled, id))
	if c := <-causes; !errors.Is(c, runtime.ErrCancelled) {
		t.Fatalf("context cause = %v, want runtime.ErrCancelled", c)
	}
	ti := e.task(t, id)
	if ti.Status != client.StatusCancelled || ti.Attempt != 1 || ti.Failures != 0 || ti.FinishedAt == 0 {
		t.Fatalf("record = status %s attempt %d failures %d finished %v", ti.Status, ti.Attempt, ti.Failures, ti.FinishedAt)
	}
	q := keys.New(e.prefix).Queue("default")
	if n := e.rdb.XLen(e.ctx, q.Stream(0)).Val(); n != 0 {
		t.Fatalf("stream holds %d entries after the cancel", n)
	}
	if _, err := e.c.CancelTask(e.ctx, "default", id); !errors.Is(err, client.ErrWrongStatus) {
		t.Fatalf("second cancel: %v; want ErrWrongStatus", err)
	}
	select {
	case a := <-starts:
		t.Fatalf("the cancelled task ran again (attempt %d)", a)
	default:
	}
}

// A function that returns success although its context was cancelled keeps its
// outcome: the request came too late to stop the work.
func TestCancelledFunctionThatSucceedsKeepsItsOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := runtime.NewRegistry()
	started := make(chan struct{}, 1)
	reg.Register("stubborn", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return []byte("done anyway"), nil
	}, runtime.FuncOptions{})
	startWorker(t, e.rdb, e.config(t), reg, nil)
	id := e.enqueue(t, client.Task{Function: "stubborn"})
	<-started
	if out, err := e.c.CancelTask(e.ctx, "default", id); err != nil || out != client.CancelRequested {
		t.Fatalf("CancelTask = %q, %v", out, err)
	}
	ti := e.waitFinal(t, id)
	if ti.Status != client.StatusSucceeded || string(ti.Result) != "done anyway" {
		t.Fatalf("record = %s %q; want succeeded with its result", ti.Status, ti.Result)
	}
}

// Cancels racing completions: every task ends exactly once, cancelled or with its own
// outcome, as CancelTask said; none is retried, none runs twice.
func TestCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := runtime.NewRegistry()
	var mu sync.Mutex
	runs := map[string]int{}
	reg.Register("quick", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		select {
		case <-time.After(time.Duration(len(task.Payload)) * time.Millisecond):
			return []byte("ok"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, runtime.FuncOptions{MaxRetries: 3})
	startWorker(t, e.rdb, e.config(t, "DTQ_HEARTBEAT_INTERVAL_S", "0.02"), reg, nil)
	const n = 60
	ids := make([]string, n)
	said := make([]string, n)
	for i := range ids {
		// the task runs 0–29 ms; the cancel comes 0–39 ms after the enqueue: before the
		// start, while it runs, or after it ended
		id := e.enqueue(t, client.Task{Function: "quick", Payload: make([]byte, i%30)})
		ids[i] = id
		time.Sleep(time.Duration((i*7)%40) * time.Millisecond)
		out, err := e.c.CancelTask(e.ctx, "default", id)
		switch {
		case err == nil:
			said[i] = string(out)
		case errors.Is(err, client.ErrWrongStatus):
			said[i] = "too late"
		default:
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	kinds := map[string]int{}
	for _, s := range said {
		kinds[s]++
	}
	t.Logf("cancels: %v", kinds)
	for i, id := range ids {
		ti := e.waitFinal(t, id)
		mu.Lock()
		r := runs[id]
		mu.Unlock()
		if r > 1 {
			t.Errorf("%s ran %d times", id, r)
		}
		switch said[i] {
		case "cancelled": // was waiting: never ran
			if ti.Status != client.StatusCancelled || r != 0 {
				t.Errorf("%s: cancelled while waiting, but status %s after %d runs", id, ti.Status, r)
			}
		case "requested": // was running: cancelled, or its success got there first
			if ti.Status != client.StatusCancelled && ti.Status != client.StatusSucceeded {
				t.Errorf("%s: requested, then status %s", id, ti.Status)
			}
		case "too late":
			if ti.Status != client.StatusSucceeded {
				t.Errorf("%s: cancel refused, then status %s", id, ti.Status)
			}
		}
		if ti.Failures != 0 {
			t.Errorf("%s: %d failures counted", id, ti.Failures)
		}
	}
}

// A task whose worker died after a cancel was requested is ended cancelled by a peer's
// reaper, and its record and unique key then expire after that worker's
// DTQ_RESULT_TTL_S, as those of a task cancelled any other way do.
func TestReclaimedCancelExpiresWithTheRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := keys.New(e.prefix).Queue("default")
	id, created, err := e.c.Enqueue(e.ctx, client.Task{Queue: "default", Function: "noop", Unique: "only-one"})
	if err != nil || !created {
		t.Fatalf("enqueue: %v %v", created, err)
	}
	// a worker that dies right after its claim: the task is running, nobody touches it
	r, err := lua.Claim.Run(e.ctx, e.rdb, lua.ClaimArgs{Queue: q, Consumer: "ghost", NowMS: time.Now().UnixMilli(),
		Want: 1, MaxPayload: 1 << 20})
	if err != nil || len(r.Started) != 1 {
		t.Fatalf("ghost's claim = %+v, %v", r, err)
	}
	if out, err := e.c.CancelTask(e.ctx, "default", id); err != nil || out != client.CancelRequested {
		t.Fatalf("CancelTask = %q, %v; want requested", out, err)
	}
	rec := newRecorder()
	reg := runtime.NewRegistry()
	reg.Register("noop", func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	startWorker(t, e.rdb, e.config(t, "DTQ_RESULT_TTL_S", "600"), reg, rec)
	if ti := e.waitFinal(t, id); ti.Status != client.StatusCancelled {
		t.Fatalf("status %s; want cancelled", ti.Status)
	}
	for _, k := range []string{q.Task(id), q.Unique("only-one")} {
		if ttl := e.rdb.PTTL(e.ctx, k).Val(); ttl <= 0 || ttl > 600*time.Second {
			t.Errorf("%s lives %v; want at most DTQ_RESULT_TTL_S", k, ttl)
		}
	}
}
