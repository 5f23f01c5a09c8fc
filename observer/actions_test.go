package observer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

// send sends a request with a JSON body (none when body is "").
func (e *env) send(method, path, body string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, body: string(b), header: res.Header}
}

// ok checks a 200 answer and returns its object.
func (e *env) ok(r resp) map[string]any {
	e.t.Helper()
	if r.status != http.StatusOK {
		e.t.Fatalf("status %d: %s", r.status, r.body)
	}
	return r.json(e.t)
}

// deadRecords writes n dead tasks of queue as complete.lua leaves them (no payload
// field: payload-less records), oldest first, named prefix0 … prefix(n-1).
func (e *env) deadRecords(queue, prefix string, n int, diedMS int64) []string {
	e.t.Helper()
	q := e.ks.Queue(queue)
	ids := make([]string, n)
	if _, err := e.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%d", prefix, i)
			p.HSet(context.Background(), q.Task(ids[i]), "status", "dead", "attempt", 1, "entry", "1-1", "function", "noop",
				"priority", 0, "failures", 4, "id", ids[i], "queue", queue, "finished_at", diedMS+int64(i))
			p.ZAdd(context.Background(), q.Dead(), redis.Z{Score: float64(diedMS + int64(i)), Member: ids[i]})
		}
		p.SAdd(context.Background(), e.ks.Queues(), queue)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func strList(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// /queues carries the retries among the scheduled and the completions per minute of the
// last hour; /queues/{q} the same.
func TestQueueRetryingAndThroughput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for range 4 {
		e.enqueue(client.Task{Queue: "q", Function: "noop"})
	}
	e.enqueue(client.Task{Queue: "q", Function: "noop", Delay: time.Hour})
	e.finish("q", lua.Retry)
	e.finish("q", lua.Dead)
	e.finish("q", lua.Succeeded)
	e.finish("q", lua.Succeeded)
	before := time.Now()
	for _, m := range []map[string]any{e.get("/api/v1/queues")["queues"].([]any)[0].(map[string]any), e.get("/api/v1/queues/q")} {
		if m["retrying"] != 1.0 || m["scheduled"] != 2.0 {
			t.Fatalf("retrying %v scheduled %v, want 1 of 2", m["retrying"], m["scheduled"])
		}
		tp := m["throughput"].(map[string]any)
		p, f := tp["processed"].([]any), tp["failed"].([]any)
		if tp["step_s"] != 60.0 || len(p) != 60 || len(f) != 60 {
			t.Fatalf("throughput = %v", tp)
		}
		// the window ends with the current minute
		start := int64(tp["start_ms"].(float64))
		if end := start + 60*60000; start%60000 != 0 || before.UnixMilli() >= end || before.UnixMilli() < end-2*60000 {
			t.Fatalf("start_ms %d does not begin the hour ending now (%d)", start, before.UnixMilli())
		}
		var sp, sf float64
		for i := range p {
			sp += p[i].(float64)
			sf += f[i].(float64)
		}
		if sp != 4 || sf != 2 {
			t.Fatalf("throughput sums processed %v failed %v, want 4 and 2: %v", sp, sf, tp)
		}
	}
	// a throughput key of another type is a queue error, as any other key's
	q := e.ks.Queue("q")
	hour := time.Now().UnixMilli() / 3600000
	e.rdb.Del(context.Background(), q.Throughput(hour))
	e.rdb.Set(context.Background(), q.Throughput(hour), "x", 0)
	if m := e.get("/api/v1/queues/q"); !strings.Contains(fmt.Sprint(m["error"]), "WRONGTYPE") {
		t.Fatalf("queue with a string throughput key: %v", m)
	}
}

// state=succeeded pages through the recently succeeded tasks by finish time; a member
// whose record expired shows missing.
func TestTasksSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var ids []string
	for range 3 {
		e.enqueue(client.Task{Queue: "q", Function: "noop"})
		ids = append(ids, e.finish("q", lua.Succeeded))
	}
	e.rdb.Del(context.Background(), e.ks.Queue("q").Task(ids[1]))
	var got []map[string]any
	cursor := ""
	for {
		m := e.get("/api/v1/queues/q/tasks?state=succeeded&limit=2&cursor=" + url.QueryEscape(cursor))
		for _, it := range m["items"].([]any) {
			got = append(got, it.(map[string]any))
		}
		if cursor = m["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d items, want 3: %v", len(got), got)
	}
	for _, it := range got {
		id := it["id"].(string)
		if id == ids[1] {
			if it["missing"] != true {
				t.Fatalf("expired record: %v", it)
			}
			continue
		}
		if it["status"] != "succeeded" || it["function"] != "noop" || it["at_ms"].(float64) <= 0 {
			t.Fatalf("succeeded item: %v", it)
		}
	}
}

func TestDeadBulkActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	now := time.Now().UnixMilli()
	dead := e.deadRecords("q", "d", 3, now-1000)
	queued := e.enqueue(client.Task{Queue: "q", Function: "noop"})
	m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/requeue", `{"ids": ["`+dead[0]+`", "`+queued+`", "nosuch", "`+dead[0]+`"]}`))
	if m["queue"] != "q" || m["requeued"] != 1.0 || !slices.Equal(strList(m["not_found"]), []string{"nosuch"}) || !slices.Equal(strList(m["wrong_state"]), []string{queued}) {
		t.Fatalf("requeue ids: %v", m)
	}
	m = e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/delete", `{"ids": ["`+dead[1]+`", "`+queued+`"]}`))
	if m["deleted"] != 1.0 || !slices.Equal(strList(m["not_found"]), []string{queued}) {
		t.Fatalf("delete ids: %v", m)
	}
	if ti, err := e.c.Get(context.Background(), "q", queued); err != nil || ti.Status != client.StatusQueued {
		t.Fatalf("the queued task after a delete naming it: %+v %v", ti, err)
	}
	m = e.ok(e.send(http.MethodDelete, "/api/v1/queues/q/dead/"+dead[2], ""))
	if m["status"] != "deleted" || m["id"] != dead[2] || m["queue"] != "q" {
		t.Fatalf("delete one: %v", m)
	}
	wantError(t, e.send(http.MethodDelete, "/api/v1/queues/q/dead/"+dead[2], ""), http.StatusNotFound, "not_found", dead[2])
	wantError(t, e.send(http.MethodDelete, "/api/v1/queues/q/dead/"+queued, ""), http.StatusNotFound, "not_found", queued)
	// a task named like the static route is still reachable by DELETE
	e.deadRecords("q", "delete", 1, now)
	if m := e.ok(e.send(http.MethodDelete, "/api/v1/queues/q/dead/delete0", "")); m["status"] != "deleted" {
		t.Fatalf("delete of delete0: %v", m)
	}

	// all: more than one batch, requeued, then deleted
	n := 2*lua.DeadBatch + 7
	e.deadRecords("big", "r", n, now-10_000)
	m = e.ok(e.send(http.MethodPost, "/api/v1/queues/big/dead/requeue", `{"all": true}`))
	if m["requeued"] != float64(n) || len(strList(m["wrong_state"])) != 0 {
		t.Fatalf("requeue all: %v", m)
	}
	if l := e.rdb.XLen(context.Background(), e.ks.Queue("big").Stream(0)).Val(); l != int64(n) {
		t.Fatalf("stream holds %d, want %d", l, n)
	}
	e.deadRecords("big", "k", n, now-10_000)
	m = e.ok(e.send(http.MethodPost, "/api/v1/queues/big/dead/delete", `{"all": true}`))
	if m["deleted"] != float64(n) {
		t.Fatalf("delete all: %v", m)
	}
	if c := e.rdb.ZCard(context.Background(), e.ks.Queue("big").Dead()).Val(); c != 0 {
		t.Fatalf("dead set holds %d after delete all", c)
	}
	if !strings.Contains(e.log.String(), `"msg":"observer: dead tasks deleted"`) {
		t.Fatalf("no log line of the action:\n%s", e.log.String())
	}
}

// Bad bodies are refused with a clear error and change nothing.
func TestDeadBulkBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dead := e.deadRecords("q", "d", 1, time.Now().UnixMilli())
	many := make([]string, client.MaxDeadIDs+1)
	for i := range many {
		many[i] = `"x"`
	}
	for _, path := range []string{"/api/v1/queues/q/dead/requeue", "/api/v1/queues/q/dead/delete"} {
		for _, tc := range []struct{ body, code, says string }{
			{"", "bad_body", "want"},
			{"{}", "bad_body", "non-empty"},
			{`{"ids": []}`, "bad_body", "non-empty"},
			{`{"all": false}`, "bad_body", "non-empty"},
			{`{"ids": ["` + dead[0] + `"], "all": true}`, "bad_body", "not both"},
			{`{"ids": "` + dead[0] + `"}`, "bad_body", "body"},
			{`{"id": ["` + dead[0] + `"]}`, "bad_body", "unknown field"},
			{`{"all": true} {"all": true}`, "bad_body", "nothing after"},
			{`[1]`, "bad_body", "body"},
			{`{"ids": ["a{b}"]}`, "bad_id", "ids"},
			{`{"ids": ["<script>"]}`, "bad_id", "ids"},
			{`{"ids": [` + strings.Join(many, ",") + `]}`, "bad_body", "at most"},
		} {
			wantError(t, e.send(http.MethodPost, path, tc.body), http.StatusBadRequest, tc.code, tc.says)
		}
		wantError(t, e.do(http.MethodPost, path, ""), http.StatusUnauthorized, "unauthorized", "Authorization")
		wantError(t, e.do(http.MethodPost, path, token, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type")
	}
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/a%7Bb/dead/requeue", `{"all": true}`), http.StatusBadRequest, "bad_queue", "queue")
	wantError(t, e.send(http.MethodDelete, "/api/v1/queues/q/dead/a%7Bb", ""), http.StatusBadRequest, "bad_id", "id")
	wantError(t, e.do(http.MethodDelete, "/api/v1/queues/q/dead/"+dead[0], ""), http.StatusUnauthorized, "unauthorized", "Authorization")
	if ti, err := e.c.Get(context.Background(), "q", dead[0]); err != nil || ti.Status != client.StatusDead {
		t.Fatalf("after refused requests: %+v %v", ti, err)
	}
	// a dead set of another type: a Redis error, the record untouched
	e.rdb.Del(context.Background(), e.ks.Queue("w").Dead())
	e.rdb.Set(context.Background(), e.ks.Queue("w").Dead(), "x", 0)
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/w/dead/requeue", `{"all": true}`), http.StatusInternalServerError, "redis_error", "WRONGTYPE")
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/w/dead/delete", `{"ids": ["x"]}`), http.StatusInternalServerError, "redis_error", "WRONGTYPE")
}

func TestRunNowEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	later := e.enqueue(client.Task{Queue: "q", Function: "noop", Delay: time.Hour, Priority: 3})
	m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/tasks/"+later+"/run", ""))
	if m["status"] != "queued" || m["id"] != later || m["queue"] != "q" {
		t.Fatalf("run now: %v", m)
	}
	if ti, _ := e.c.Get(context.Background(), "q", later); ti.Status != client.StatusQueued {
		t.Fatalf("status after run now: %s", ti.Status)
	}
	if l := e.rdb.XLen(context.Background(), e.ks.Queue("q").Stream(3)).Val(); l != 1 {
		t.Fatalf("band 3 holds %d, want the task", l)
	}
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/q/tasks/"+later+"/run", ""), http.StatusConflict, "wrong_state", "queued")
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/q/tasks/nosuch/run", ""), http.StatusNotFound, "not_found", "nosuch")
	wantError(t, e.send(http.MethodPost, "/api/v1/queues/q/tasks/a%7Bb/run", ""), http.StatusBadRequest, "bad_id", "id")
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/tasks/"+later+"/run", ""), http.StatusUnauthorized, "unauthorized", "Authorization")
	// a retry runs now too, and leaves the retrying count
	e.enqueue(client.Task{Queue: "r", Function: "noop"})
	retry := e.finish("r", lua.Retry)
	if n := e.get("/api/v1/queues/r")["retrying"]; n != 1.0 {
		t.Fatalf("retrying = %v", n)
	}
	e.ok(e.send(http.MethodPost, "/api/v1/queues/r/tasks/"+retry+"/run", ""))
	if m := e.get("/api/v1/queues/r"); m["retrying"] != 0.0 || m["scheduled"] != 0.0 || m["lag"] != 1.0 {
		t.Fatalf("after run now of a retry: %v", m)
	}
}

// A requeue racing a real worker that runs the task: refused while the task runs (by id
// and by all); once the worker has recorded it dead, requeued once and run once more,
// as a new attempt.
func TestRequeueRacesARunningWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	started := make(chan int64, 4)
	release := make(chan struct{}, 4)
	reg := runtime.NewRegistry()
	reg.Register("gate", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		started <- task.Attempt
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("gate says no")
	}, runtime.FuncOptions{MaxRetries: 0})
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": "redis://" + redistest.Shared(t).Addr(), "DTQ_KEY_PREFIX": e.prefix, "DTQ_QUEUES": "q",
		"DTQ_VISIBILITY_TIMEOUT_S": "120", "DTQ_LOG_LEVEL": "error",
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: e.rdb, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	id := e.enqueue(client.Task{Queue: "q", Function: "gate", MaxRetries: client.Retries(0)})
	wait := func(what string) int64 {
		select {
		case a := <-started:
			return a
		case <-time.After(60 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
		return 0
	}
	if a := wait("the first attempt"); a != 1 {
		t.Fatalf("first attempt %d", a)
	}
	m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/requeue", `{"ids": ["`+id+`"]}`))
	if m["requeued"] != 0.0 || !slices.Equal(strList(m["wrong_state"]), []string{id}) {
		t.Fatalf("requeue of a running task: %v", m)
	}
	if m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/requeue", `{"all": true}`)); m["requeued"] != 0.0 {
		t.Fatalf("requeue all while it runs: %v", m)
	}
	wantError(t, e.send(http.MethodDelete, "/api/v1/queues/q/dead/"+id, ""), http.StatusNotFound, "not_found", id)
	release <- struct{}{}
	status := func() string {
		ti, err := e.c.Get(context.Background(), "q", id)
		if err != nil {
			t.Fatal(err)
		}
		return string(ti.Status)
	}
	eventually(t, "the task dead", func() bool { return status() == "dead" })
	if m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/requeue", `{"all": true}`)); m["requeued"] != 1.0 {
		t.Fatalf("requeue all of the dead task: %v", m)
	}
	if m := e.ok(e.send(http.MethodPost, "/api/v1/queues/q/dead/requeue", `{"ids": ["`+id+`"]}`)); m["requeued"] != 0.0 {
		t.Fatalf("a second requeue: %v", m)
	}
	if a := wait("the second attempt"); a != 2 {
		t.Fatalf("second attempt %d", a)
	}
	release <- struct{}{}
	eventually(t, "the task dead again", func() bool { return status() == "dead" })
	select {
	case a := <-started:
		t.Fatalf("a third start (attempt %d)", a)
	default:
	}
}
