package runtime_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// A running worker meets everything someone else can write into its keys — task records
// with corrupt fields, task keys of the wrong type, entries with absurd attempts, queue
// names no producer may use in the set of queues, a retrying task whose priority is out
// of range — and answers each with a dead record that says why, keeps running (no loop
// restarts: nothing wedges a loop), and runs every good task around them.
func TestWorkerSurvivesHostileKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	ks := keys.New(e.prefix)
	q := ks.Queue("default")

	corrupt := map[string][]any{
		"status":  {"status", "exploded"},
		"attempt": {"attempt", "abc"},
		"huge":    {"attempt", "1e30"},
	}
	// The hostile keys are in place before the worker starts: it meets them all at once.
	var bad []string
	for name, fields := range corrupt {
		id := e.enqueue(t, client.Task{Function: "noop", Payload: []byte(name), Priority: 3})
		if err := e.rdb.HSet(e.ctx, q.Task(id), fields...).Err(); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, id)
	}
	e.rdb.Set(e.ctx, q.Task("clobbered"), "not a hash", 0)
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: q.Stream(3), Values: []any{"task", "clobbered", "attempt", 0}})
	victim := e.enqueue(t, client.Task{Function: "noop", Priority: 3})
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: q.Stream(3), Values: []any{"task", victim, "attempt", "100000000000000000"}})
	e.rdb.SAdd(e.ctx, ks.Queues(), "bad{queue}", "a:b", strings.Repeat("q", 10000))
	// A retrying task whose priority was overwritten out of range: it runs (at p0).
	retry := e.enqueue(t, client.Task{Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(2)})
	var good []string
	for p := 0; p <= keys.MaxPriority; p++ {
		good = append(good, e.enqueue(t, client.Task{Function: "echo", Payload: []byte("ok"), Priority: p}))
	}
	r := startWorker(t, e.rdb, e.config(t), nil, rec)
	rec.wait(t, "the retrying task's first failure", is(runtime.EventTaskRetrying, retry))
	e.rdb.HSet(e.ctx, q.Task(retry), "priority", "99")

	for _, id := range append(good, victim, retry) {
		rec.wait(t, "good task "+id, is(runtime.EventTaskSucceeded, id))
	}
	for _, id := range bad {
		ti := e.task(t, id)
		if ti.Status != "dead" || !strings.HasPrefix(ti.Error, "corrupt task record") {
			t.Errorf("corrupt task %s: %q %q, want dead with the reason", id, ti.Status, ti.Error)
		}
	}
	eventually(t, "the clobbered key's entry to become a dead record", func() bool {
		dead, err := e.c.Dead(e.ctx, "default", 100)
		if err != nil {
			return false
		}
		for _, d := range dead {
			if strings.Contains(d.Error, "clobbered is not a hash") && strings.Contains(d.Raw, `"task":"clobbered"`) {
				return true
			}
		}
		return false
	})
	if ti := e.task(t, victim); ti.Attempt != 1 {
		t.Fatalf("victim ran at attempt %d: the absurd entry attempt leaked into its record", ti.Attempt)
	}
	for p := 0; p <= keys.MaxPriority; p++ {
		if n := e.rdb.XLen(e.ctx, q.Stream(p)).Val(); n != 0 {
			t.Fatalf("band %d holds %d entries at the end", p, n)
		}
	}
	rw := httptest.NewRecorder()
	r.w.Handler().ServeHTTP(rw, httptest.NewRequest("GET", runtime.PathMetrics, nil))
	if strings.Contains(rw.Body.String(), "dtq_worker_loop_restarts_total{") {
		t.Fatalf("a loop restarted on hostile keys:\n%s", rw.Body.String())
	}
	if !r.w.Ready() {
		t.Fatal("the worker is not ready any more")
	}
}

// A band's stream turned into another type under running tasks costs the tasks of the
// other bands nothing: their outcomes, and the broken band's own (their records still
// say they are current), are recorded once, on attempt 1, with nothing left pending for
// a reaper to run again. The outcomes of both bands finish together, so they share
// completion calls.
func TestABrokenBandCostsTheOtherBandsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	b := newBlocking(0)
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	startWorker(t, e.rdb, e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "2", "DTQ_HEARTBEAT_INTERVAL_S", "0.5"), reg, rec)
	q := keys.New(e.prefix).Queue("default")
	var ids []string
	for _, prio := range []int{2, 3, 2, 3} {
		ids = append(ids, e.enqueue(t, client.Task{Function: "block", Priority: prio}))
	}
	for range ids {
		b.waitStart(t)
	}
	if err := e.rdb.Set(e.ctx, q.Stream(2), "clobbered", 0).Err(); err != nil {
		t.Fatal(err)
	}
	close(b.release)
	for _, id := range ids {
		rec.wait(t, "the task's success", is(runtime.EventTaskSucceeded, id))
	}
	for _, id := range ids {
		if ti := e.task(t, id); ti.Status != "succeeded" || ti.Attempt != 1 {
			t.Errorf("task %s: status %q attempt %d, want succeeded on attempt 1", id, ti.Status, ti.Attempt)
		}
	}
	if p := e.rdb.XPending(e.ctx, q.Stream(3), keys.Group).Val(); p == nil || p.Count != 0 {
		t.Fatalf("band 3 keeps %+v pending, want nothing for a reaper", p)
	}
	if len(b.started) != 0 {
		t.Fatalf("a task started again: %s", <-b.started)
	}
}
