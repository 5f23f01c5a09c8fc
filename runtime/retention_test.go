package runtime_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/runtime"
)

// A worker trims what a poison producer leaves: its dead tasks beyond DTQ_DEAD_MAX go
// (records and unique keys), the queue's inspection and the leader's metric count them,
// and a dead task kept is requeued as before.
func TestDeadTasksTrimmedEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var off atomic.Int64 // the worker's clock runs this far ahead
	var heal atomic.Bool
	reg := runtime.NewRegistry()
	reg.Register("poison", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		if heal.Load() {
			return []byte("healed"), nil
		}
		return nil, runtime.SkipRetry(errors.New("poison"))
	}, runtime.FuncOptions{})
	rec := newRecorder()
	w, err := runtime.New(runtime.Options{Config: e.config(t, "DTQ_DEAD_MAX", "2"), Redis: e.rdb, Registry: reg,
		Observe: rec.observe, Now: func() time.Time { return time.Now().Add(time.Duration(off.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var ids []string
	for i := range 5 {
		ids = append(ids, e.enqueue(t, client.Task{Function: "poison", Unique: "u" + strconv.Itoa(i)}))
		rec.wait(t, "the task's death", is(runtime.EventTaskDead, ids[i]))
		off.Add(int64(time.Millisecond)) // each dies a millisecond after the one before at least
	}
	// the next sweep is due at once on the worker's clock
	off.Add(int64(time.Minute))
	var trimmed int
	rec.wait(t, "3 dead tasks trimmed", func(ev runtime.Event) bool {
		if ev.Type == runtime.EventDeadTrimmed && ev.Queue == "default" {
			n, _ := strconv.Atoi(ev.Detail)
			trimmed += n
		}
		return trimmed == 3
	})

	qi, err := e.c.Queue(e.ctx, "default")
	if err != nil || qi.Dead != 2 || qi.DeadTrimmed != 3 {
		t.Fatalf("inspect queue = %+v, %v; want 2 dead, 3 trimmed", qi, err)
	}
	rr := httptest.NewRecorder()
	w.Handler().ServeHTTP(rr, httptest.NewRequest("GET", runtime.PathMetrics, nil))
	if want := `dtq_worker_dead_trimmed_total{queue="default",worker_id="` + w.ID() + `"} 3`; !strings.Contains(rr.Body.String(), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
	for i, id := range ids {
		_, gerr := e.c.Get(e.ctx, "default", id)
		if kept := gerr == nil; kept != (i >= 3) {
			t.Fatalf("task %d: kept %v (%v), want only the 2 newest kept", i, kept, gerr)
		}
	}
	// a trimmed task's unique key is free again; a kept one's is still held
	if _, created, err := e.c.Enqueue(e.ctx, client.Task{Queue: "default", Function: "noop", Unique: "u0", Delay: time.Hour}); err != nil || !created {
		t.Fatalf("enqueue under a trimmed task's key: created=%v err=%v", created, err)
	}
	if id, created, _ := e.c.Enqueue(e.ctx, client.Task{Queue: "default", Function: "noop", Unique: "u4"}); created || id != ids[4] {
		t.Fatalf("enqueue under a kept task's key: created=%v holder %s, want %s", created, id, ids[4])
	}
	heal.Store(true)
	if err := e.c.Requeue(e.ctx, "default", ids[4]); err != nil {
		t.Fatalf("requeue of a kept dead task: %v", err)
	}
	rec.wait(t, "the requeued task's success", is(runtime.EventTaskSucceeded, ids[4]))
	if err := e.c.Requeue(e.ctx, "default", ids[0]); err == nil {
		t.Fatal("requeue of a trimmed task succeeded")
	}
}
