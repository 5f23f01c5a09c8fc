package runtime

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/lua"
)

// A touch that finds the task finished warns of a lost task only when the execution's
// outcome had not gone to the completer: a completion landing between the heartbeat's
// snapshot and its touch is no reclaim.
func TestTouchWarnsOnlyOfTasksReallyLost(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	w := unstartedWorker(t, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	rdb := w.rdb
	q := w.queues[0]
	ctx := context.Background()
	for _, id := range []string{"done", "lost"} {
		// records of tasks no longer running from the entries the worker holds
		rdb.HSet(ctx, q.Task(id), "status", "succeeded", "attempt", "1", "entry", "1-1")
		e := &execution{queue: q.Name, s: lua.Started{ID: id, Entry: "1-1", Band: map[string]int{"done": 0, "lost": 1}[id], Attempt: 1}}
		e.recorded.Store(id == "done")
		w.hold.add(e)
	}
	w.touchHeld(ctx)
	out := logs.String()
	if !strings.Contains(out, "task=lost") {
		t.Fatalf("no warning for the task really lost:\n%s", out)
	}
	if strings.Contains(out, "task=done") {
		t.Fatalf("a warning for a task whose completion came first:\n%s", out)
	}
}
