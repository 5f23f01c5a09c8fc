package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/keys"
)

// The throughput run ends at the last outcome recorded: the latest finished_at of its
// tasks, not when the bench's poll noticed the empty backlog.
func TestLastFinishedIsTheLatestRecord(t *testing.T) {
	os.Unsetenv("DTQ_REDIS_URL")
	ctx := context.Background()
	e, err := setupEnv(ctx, options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	prefix := e.prefix()
	defer e.drop(prefix)
	q := keys.New(prefix).Queue(benchQueue)
	at := map[string]int64{"a": 1796000000123, "b": 1796000000987, "c": 1796000000456}
	var ids []string
	for id, ms := range at {
		e.rdb.HSet(ctx, q.Task(id), "status", "succeeded", "finished_at", ms)
		ids = append(ids, id)
	}
	recs, err := recordFields(ctx, e.rdb, prefix, ids, "status", "finished_at")
	if err != nil {
		t.Fatal(err)
	}
	if st := tally(recs, 0); st["succeeded"] != 3 {
		t.Fatalf("statuses of the one read: %v, want 3 succeeded", st)
	}
	got, err := lastFinished(ids, recs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.UnixMilli(1796000000987); !got.Equal(want) {
		t.Fatalf("lastFinished = %v, want %v (task b's)", got, want)
	}

	// a task with no recorded finish cannot end the run: the error names it
	e.rdb.HSet(ctx, q.Task("d"), "status", "running")
	ids = append(ids, "d")
	if recs, err = recordFields(ctx, e.rdb, prefix, ids, "status", "finished_at"); err != nil {
		t.Fatal(err)
	}
	if _, err := lastFinished(ids, recs, 1); err == nil || !strings.Contains(err.Error(), "task d") {
		t.Fatalf("a record without finished_at: err %v, want one naming task d", err)
	}
}
