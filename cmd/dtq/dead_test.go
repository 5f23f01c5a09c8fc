package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// dead requeue --all, dead delete ID|--all and run-now act and say what they did; bad
// use exits 2 with one line.
func TestDeadActionsAndRunNow(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix}
	rdb := srv.Client(t)
	ctx := context.Background()
	q := keys.New(prefix).Queue("mail")
	dead := func(id string) {
		t.Helper()
		if err := rdb.HSet(ctx, q.Task(id), "status", "dead", "attempt", 1, "function", "echo", "priority", 0).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.ZAdd(ctx, q.Dead(), redisZ(id))
	}
	dead("a")
	dead("b")
	dead("c")
	out, errOut, code := dtq(t, env, "dead", "delete", "--queue", "mail", "a", "nosuch")
	var r client.DeadResult
	if code != 1 || json.Unmarshal([]byte(out), &r) != nil || r.Deleted != 1 || len(r.NotFound) != 1 || !strings.Contains(errOut, "not found") && !strings.Contains(errOut, "no such") {
		t.Fatalf("dead delete a nosuch: exit %d, %s, %s", code, out, errOut)
	}
	out, _, code = dtq(t, env, "dead", "requeue", "--queue", "mail", "--all")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Requeued != 2 {
		t.Fatalf("dead requeue --all: exit %d, %s", code, out)
	}
	dead("d")
	out, _, code = dtq(t, env, "dead", "delete", "--queue", "mail", "--all")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Deleted != 1 {
		t.Fatalf("dead delete --all: exit %d, %s", code, out)
	}
	out, _, code = dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--delay", "1h")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatal("enqueue")
	}
	out, _, code = dtq(t, env, "run-now", "--queue", "mail", id)
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("run-now: exit %d, %q", code, out)
	}
	if st := rdb.HGet(ctx, q.Task(id), "status").Val(); st != "queued" {
		t.Fatalf("after run-now: %s", st)
	}
	if _, errOut, code := dtq(t, env, "run-now", "--queue", "mail", id); code != 1 || !strings.Contains(errOut, "queued") {
		t.Fatalf("run-now of a queued task: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{
		{"dead", "delete", "--queue", "mail"},
		{"dead", "delete", "--queue", "mail", "--all", "x"},
		{"dead", "requeue", "--queue", "mail"},
		{"dead", "bogus"},
		{"run-now", "--queue", "mail"},
	} {
		out, errOut, code := dtq(t, env, args...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("dtq %v: exit %d, stdout %q, stderr %q; want exit 2", args, code, out, errOut)
		}
	}
}

func redisZ(id string) redis.Z { return redis.Z{Score: float64(time.Now().UnixMilli()), Member: id} }
