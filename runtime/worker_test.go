package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// eventually polls cond until it holds; the deadline only turns a hang into a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func TestRunsTasksOfEveryPriority(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	var ids []string
	for p := 0; p <= keys.MaxPriority; p++ {
		ids = append(ids, e.enqueue(t, client.Task{Function: "echo", Priority: p, Payload: []byte(fmt.Sprintf(`{"p":%d}`, p))}))
	}
	for p, id := range ids {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
		ti := e.task(t, id)
		if ti.Status != "succeeded" || ti.Result != fmt.Sprintf(`{"p":%d}`, p) || ti.Attempt != 1 || ti.Priority != p {
			t.Fatalf("task %+v: want succeeded with its payload echoed, attempt 1", ti)
		}
	}
	ks := keys.New(e.prefix).Queue("default")
	for p := 0; p <= keys.MaxPriority; p++ {
		if n := e.rdb.XLen(e.ctx, ks.Stream(p)).Val(); n != 0 {
			t.Fatalf("band %d holds %d entries after completion, want 0 (ACK + XDEL)", p, n)
		}
	}
}

func TestUrgentBandsFirst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	// Enqueue before any worker exists, then start one worker with one slot: the order of
	// starts follows the bands, p9 first.
	var ids []string
	for _, p := range []int{0, 3, 9, 5} {
		ids = append(ids, e.enqueue(t, client.Task{Function: "noop", Priority: p}))
	}
	startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", "1"), nil, rec)
	for _, id := range ids {
		rec.wait(t, "task "+id, is(runtime.EventTaskSucceeded, id))
	}
	var order []string
	rec.mu.Lock()
	for _, ev := range rec.events {
		if ev.Type == runtime.EventTaskStarted {
			order = append(order, ev.TaskID)
		}
	}
	rec.mu.Unlock()
	want := []string{ids[2], ids[3], ids[1], ids[0]}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("start order %v, want %v (p9, p5, p3, p0)", order, want)
	}
}

func TestRetriesUntilSucceeded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	id := e.enqueue(t, client.Task{Function: "fail", Payload: []byte(`{"times":2}`), MaxRetries: client.Retries(3)})
	rec.wait(t, "success after retries", is(runtime.EventTaskSucceeded, id))
	ti := e.task(t, id)
	if ti.Status != "succeeded" || ti.Attempt != 3 || ti.Failures != 2 {
		t.Fatalf("task %+v: want succeeded at attempt 3 after 2 failures", ti)
	}
	if n := rec.count(is(runtime.EventTaskRetrying, id)); n != 2 {
		t.Fatalf("%d retry events, want 2", n)
	}
}

func TestRetriesExhaustedIsDead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	id := e.enqueue(t, client.Task{Function: "fail", Payload: []byte(`{"times":5}`), MaxRetries: client.Retries(2)})
	rec.wait(t, "dead", is(runtime.EventTaskDead, id))
	ti := e.task(t, id)
	if ti.Status != "dead" || ti.Attempt != 3 || !strings.Contains(ti.Error, "planned failure 3 of 5") {
		t.Fatalf("task %+v: want dead after attempt 3, keeping the last error", ti)
	}
	dead, err := e.c.Dead(e.ctx, "default", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("dead list = %+v, %v", dead, err)
	}
	// Requeue: runs again with a fresh budget (and fails again: still 5 planned failures).
	if err := e.c.Requeue(e.ctx, "default", id); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "requeued run", func(ev runtime.Event) bool {
		return ev.Type == runtime.EventTaskStarted && ev.TaskID == id && ev.Attempt == 4
	})
}

func TestFunctionErrorsPanicsAndTimeouts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	reg := function.Registry()
	reg.Register("panics", func(context.Context, *runtime.Task) ([]byte, error) { panic("boom") }, runtime.FuncOptions{MaxRetries: 0})
	reg.Register("skip", func(context.Context, *runtime.Task) ([]byte, error) {
		return nil, runtime.SkipRetry(errors.New("bad input"))
	}, runtime.FuncOptions{MaxRetries: 5})
	startWorker(t, e.rdb, e.config(t), reg, rec)

	p := e.enqueue(t, client.Task{Function: "panics"})
	s := e.enqueue(t, client.Task{Function: "skip"})
	slow := e.enqueue(t, client.Task{Function: "sleep", Payload: []byte(`{"ms":60000}`), Timeout: 50 * time.Millisecond, MaxRetries: client.Retries(0)})
	after := e.enqueue(t, client.Task{Function: "noop"})
	for _, c := range []struct{ id, want string }{
		{p, "function panicked: boom"},
		{s, "bad input"},
		{slow, "timed out after 50ms"},
	} {
		rec.wait(t, "dead "+c.id, is(runtime.EventTaskDead, c.id))
		if ti := e.task(t, c.id); ti.Status != "dead" || !strings.Contains(ti.Error, c.want) || ti.Attempt != 1 {
			t.Fatalf("task %+v: want dead at attempt 1 with error %q", ti, c.want)
		}
	}
	rec.wait(t, "a task after the failures", is(runtime.EventTaskSucceeded, after))
}

func TestUnknownFunctionIsRetriedThenDead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	id := e.enqueue(t, client.Task{Function: "nope", MaxRetries: client.Retries(1)})
	ok := e.enqueue(t, client.Task{Function: "noop"})
	rec.wait(t, "dead", is(runtime.EventTaskDead, id))
	ti := e.task(t, id)
	if ti.Status != "dead" || ti.Attempt != 2 || !strings.Contains(ti.Error, `unknown function "nope"`) {
		t.Fatalf("task %+v: want dead after 2 attempts naming the function", ti)
	}
	rec.wait(t, "the next task", is(runtime.EventTaskSucceeded, ok))
}

func TestMalformedEntriesAndOversizedPayload(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	cfg := e.config(t, "DTQ_MAX_PAYLOAD_BYTES", "100")
	startWorker(t, e.rdb, cfg, nil, rec)
	q := keys.New(e.prefix).Queue("default")
	// Written by someone else straight into the stream.
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: q.Stream(4), Values: []any{"junk", strings.Repeat("x", 10000)}})
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: q.Stream(4), Values: []any{"task", "ghost", "attempt", "0"}})
	// A payload over the worker's limit (the producer's limit is larger).
	big := e.enqueue(t, client.Task{Function: "echo", Payload: []byte(strings.Repeat("y", 500))})
	good := e.enqueue(t, client.Task{Function: "noop", Priority: 4})

	rec.wait(t, "the good task", is(runtime.EventTaskSucceeded, good))
	rec.wait(t, "oversized task dead", is(runtime.EventTaskDead, big))
	if ti := e.task(t, big); ti.Status != "dead" || !strings.Contains(ti.Error, "over the limit of 100") {
		t.Fatalf("oversized task %+v", ti)
	}
	eventually(t, "two invalid-entry events", func() bool { return rec.count(is(runtime.EventInvalidEntry, "")) == 2 })
	dead, err := e.c.Dead(e.ctx, "default", 10)
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead = %d records, err %v; want 3", len(dead), err)
	}
	raws := 0
	for _, d := range dead {
		if strings.Contains(d.Raw, "junk") || strings.Contains(d.Raw, "ghost") {
			raws++
		}
	}
	if raws != 2 {
		t.Fatalf("dead records keep raw data of %d malformed entries, want 2", raws)
	}
	if n := e.rdb.XLen(e.ctx, q.Stream(4)).Val(); n != 0 {
		t.Fatalf("band 4 holds %d entries, want 0", n)
	}
}

func TestDelayedTaskRunsWhenDue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	startWorker(t, e.rdb, e.config(t), nil, rec)
	at := time.Now().Add(300 * time.Millisecond)
	id := e.enqueue(t, client.Task{Function: "noop", RunAt: at})
	if ti := e.task(t, id); ti.Status != "scheduled" {
		t.Fatalf("status %q, want scheduled", ti.Status)
	}
	ev := rec.wait(t, "delayed task", is(runtime.EventTaskStarted, id))
	if ev.Time.Before(at) {
		t.Fatalf("delayed task started at %v, before its run-at %v", ev.Time, at)
	}
	rec.wait(t, "delayed task done", is(runtime.EventTaskSucceeded, id))
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	if err := e.c.Pause(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "default,other"), nil, rec)
	held := e.enqueue(t, client.Task{Function: "noop"})
	other := e.enqueue(t, client.Task{Queue: "other", Function: "noop"})
	rec.wait(t, "the other queue's task", is(runtime.EventTaskSucceeded, other))
	if ti := e.task(t, held); ti.Status != "queued" {
		t.Fatalf("task on a paused queue: status %q, want queued", ti.Status)
	}
	if err := e.c.Resume(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "task after resume", is(runtime.EventTaskSucceeded, held))
}

// A resume takes effect within a second even when the idle block is long: the worker
// does not read a paused queue, so nothing wakes it but its own recheck.
func TestResumeSeenDespiteLongBlock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	if err := e.c.Pause(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "default,other", "DTQ_POLL_BLOCK_MS", "60000"), nil, rec)
	held := e.enqueue(t, client.Task{Function: "noop"})
	other := e.enqueue(t, client.Task{Queue: "other", Function: "noop"})
	rec.wait(t, "the other queue's task", is(runtime.EventTaskSucceeded, other))
	if err := e.c.Resume(e.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the task after the resume, without waiting out the minute-long block", is(runtime.EventTaskSucceeded, held))
}

func TestDrainFinishesInflightWork(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	b := newBlocking(0)
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	r := startWorker(t, e.rdb, e.config(t, "DTQ_DRAIN_TIMEOUT_S", "30"), reg, rec)
	id := e.enqueue(t, client.Task{Function: "block"})
	b.waitStart(t)
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	eventually(t, "draining", r.w.Draining)
	if r.w.Ready() {
		t.Fatal("ready while draining")
	}
	// Work enqueued during the drain is left for others.
	later := e.enqueue(t, client.Task{Function: "noop"})
	close(b.release)
	<-stopped
	if ti := e.task(t, id); ti.Status != "succeeded" || ti.Result != "released" {
		t.Fatalf("in-flight task %+v: want succeeded", ti)
	}
	if ti := e.task(t, later); ti.Status != "queued" {
		t.Fatalf("task enqueued during drain: %q, want queued", ti.Status)
	}
	q := keys.New(e.prefix).Queue("default")
	entry := e.rdb.HGet(e.ctx, q.Task(id), "entry").Val()
	pend, _ := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: q.Stream(0), Group: keys.Group, Start: "-", End: "+", Count: 10}).Result()
	for _, p := range pend {
		if p.ID == entry {
			t.Fatalf("the finished task's entry is still pending: not ACKed")
		}
		// Only the late task can be here: delivered to the blocked read as the drain
		// began, and handed back (idle = visibility timeout) for a peer.
		if p.Idle < 2*time.Second {
			t.Fatalf("late delivery pending with idle %v: not handed back", p.Idle)
		}
	}
	rec.wait(t, "WORKER_STOPPED", is(runtime.EventWorkerStopped, ""))
	h := e.rdb.HGetAll(e.ctx, keys.New(e.prefix).Worker(r.w.ID())).Val()
	if h["status"] != "stopped" {
		t.Fatalf("final heartbeat status %q, want stopped", h["status"])
	}
}

func TestDrainTimeoutHandsBackToPeer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	b := newBlocking(1) // attempt 1 blocks; later attempts succeed at once
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{MaxRetries: 0})
	// Visibility timeout 20 s: without the hand-back a peer would wait 20 s.
	cfg := e.config(t, "DTQ_DRAIN_TIMEOUT_S", "0.2", "DTQ_VISIBILITY_TIMEOUT_S", "20", "DTQ_HEARTBEAT_INTERVAL_S", "1")
	first := startWorker(t, e.rdb, cfg, reg, rec)
	id := e.enqueue(t, client.Task{Function: "block"})
	b.waitStart(t)
	first.stop()
	ti := e.task(t, id)
	if ti.Status != "running" || ti.Attempt != 1 {
		t.Fatalf("cancelled task %+v: want still running (not ACKed, not failed)", ti)
	}
	q := keys.New(e.prefix).Queue("default")
	pend, _ := e.rdb.XPending(e.ctx, q.Stream(0), keys.Group).Result()
	if pend.Count != 1 {
		t.Fatalf("pending = %d, want 1: a cancelled task is never ACKed", pend.Count)
	}
	rec.wait(t, "hand-back", is(runtime.EventHandedBack, id))

	start := time.Now()
	peer := startWorker(t, e.rdb, cfg, reg, rec)
	rec.wait(t, "peer completes", func(ev runtime.Event) bool {
		return ev.Type == runtime.EventTaskSucceeded && ev.TaskID == id && ev.Worker == peer.w.ID()
	})
	if waited := time.Since(start); waited >= 20*time.Second {
		t.Fatalf("peer took %v: the hand-back did not make the entry reclaimable at once", waited)
	}
	ti = e.task(t, id)
	if ti.Status != "succeeded" || ti.Attempt != 2 || ti.Failures != 0 {
		t.Fatalf("task %+v: want succeeded at attempt 2 with no failure counted for the hand-back", ti)
	}
}

func TestIdleWorkerExitsWithoutWaitingForItsBlock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	// A one-minute blocking read: the drain must interrupt it (CLIENT UNBLOCK).
	r := startWorker(t, e.rdb, e.config(t, "DTQ_POLL_BLOCK_MS", "60000"), nil, rec)
	id := e.enqueue(t, client.Task{Function: "noop"})
	rec.wait(t, "a task", is(runtime.EventTaskSucceeded, id))
	eventually(t, "the worker blocked on its read", func() bool {
		for _, c := range strings.Split(e.rdb.ClientList(e.ctx).Val(), "\n") {
			if strings.Contains(c, "cmd=xreadgroup") && strings.Contains(c, "flags=b") {
				return true
			}
		}
		return false
	})
	start := time.Now()
	r.stop()
	if d := time.Since(start); d >= 60*time.Second {
		t.Fatalf("idle worker took %v to stop: it waited out its block", d)
	}
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	r := startWorker(t, e.rdb, e.config(t), nil, rec)
	srv := httptest.NewServer(r.w.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, "ready", r.w.Ready)
	if code, _ := get(runtime.PathReadyz); code != 200 {
		t.Fatalf("readyz = %d, want 200", code)
	}
	id := e.enqueue(t, client.Task{Function: "noop"})
	rec.wait(t, "task", is(runtime.EventTaskSucceeded, id))
	code, body := get(runtime.PathMetrics)
	for _, want := range []string{
		`dtq_worker_inflight{worker_id="` + r.w.ID() + `"} 0`,
		`dtq_worker_tasks_total{function="noop",outcome="succeeded",worker_id="` + r.w.ID() + `"} 1`,
		`dtq_worker_task_duration_seconds_count{function="noop"`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("metrics (%d) lack %q:\n%s", code, want, body)
		}
	}
	r.stop()
	if code, _ := get(runtime.PathReadyz); code != 503 {
		t.Fatalf("readyz after stop = %d, want 503", code)
	}
	if code, body := get(runtime.PathHealthz); code != 200 || !strings.Contains(body, `"worker_id":"`+r.w.ID()+`"`) {
		t.Fatalf("healthz = %d %s, want 200 naming the worker", code, body)
	}
	resp, err := http.Get(srv.URL + runtime.PathReadyz)
	if err != nil {
		t.Fatal(err)
	}
	var ready map[string]any
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "application/json" || ready["ready"] != false || ready["reason"] != "draining" {
		t.Fatalf("readyz after stop: %s %v %v", resp.Header.Get("Content-Type"), ready, err)
	}
	// the endpoints read, nothing else: another method is refused, an unknown path is 404
	resp, err = http.Post(srv.URL+runtime.PathMetrics, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /metrics = %d, want 405", resp.StatusCode)
	}
	if code, _ := get("/nosuch"); code != http.StatusNotFound {
		t.Fatalf("GET /nosuch = %d, want 404", code)
	}
}

func TestWorkersReportLiveness(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := startWorker(t, e.rdb, e.config(t), nil, nil)
	eventually(t, "a live, ready worker", func() bool {
		ws, err := e.c.Workers(e.ctx)
		return err == nil && len(ws) == 1 && ws[0].ID == r.w.ID() && ws[0].Liveness == "live" && ws[0].Status == "ready"
	})
	r.stop()
	ws, err := e.c.Workers(e.ctx)
	if err != nil || len(ws) != 1 || ws[0].Status != "stopped" || ws[0].Liveness != "stopped" {
		t.Fatalf("workers after stop = %+v, %v", ws, err)
	}
}

// A ScaledJob's worker: it stops by itself after DTQ_WORKER_MAX_TASKS tasks, and the
// rest stay queued for the next Job.
func TestMaxTasksThenExit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.enqueue(t, client.Task{Function: "noop"}))
	}
	r := startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_MAX_TASKS", "3", "DTQ_WORKER_CONCURRENCY", "1"), nil, nil)
	select {
	case <-r.done:
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not stop by itself")
	}
	counts := map[client.Status]int{}
	for _, id := range ids {
		counts[e.task(t, id).Status]++
	}
	if counts["succeeded"] != 3 || counts["queued"] != 2 {
		t.Fatalf("statuses %v, want 3 succeeded and 2 queued", counts)
	}
}

// DTQ_WORKER_IDLE_EXIT_S: with nothing to do for that long, the worker stops by itself.
func TestIdleExit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.enqueue(t, client.Task{Function: "noop"})
	r := startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_IDLE_EXIT_S", "0.3"), nil, nil)
	select {
	case <-r.done:
	case <-time.After(waitTimeout):
		t.Fatal("the idle worker did not stop by itself")
	}
	if ti := e.task(t, id); ti.Status != "succeeded" {
		t.Fatalf("task %+v, want succeeded before the idle exit", ti)
	}
}

// The scheduler leader renews its lock once a third of the lock's TTL has passed, not
// on every pass: the TTL runs down between renewals and is topped up again, and the
// worker stays the leader throughout.
func TestLeaderRenewsItsLockEveryThirdOfItsTTL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	cfg := e.config(t, "DTQ_SCHEDULER_INTERVAL_S", "0.02", "DTQ_SCHEDULER_LOCK_TTL_MS", "1500")
	startWorker(t, e.rdb, cfg, function.Registry(), rec)
	rec.wait(t, "leadership", is(runtime.EventLeaderAcquired, ""))
	lock := keys.New(e.prefix).SchedulerLock()
	pttl := func() time.Duration { return e.rdb.PTTL(e.ctx, lock).Val() }
	// A pass comes every 20–24 ms: renewed on each, the TTL would stay above 1.47 s.
	eventually(t, "the lock's TTL running down between renewals", func() bool {
		d := pttl()
		return d > 0 && d < 1300*time.Millisecond
	})
	eventually(t, "a renewal", func() bool { return pttl() > 1400*time.Millisecond })
	if n := rec.count(is(runtime.EventLeaderLost, "")); n != 0 {
		t.Fatalf("the leader lost its lock %d times", n)
	}
	if holder := e.rdb.Get(e.ctx, lock).Val(); holder != cfg.WorkerID {
		t.Fatalf("lock held by %q, want %q", holder, cfg.WorkerID)
	}
}
