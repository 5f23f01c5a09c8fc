package python_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

// python is the interpreter the tests run: Debian's, which has python3-redis.
const python = "/usr/bin/python3"

// needPython fails the test when the interpreter or its redis module is missing, unless
// DTQ_SKIP_PYTHON=1 says to skip the Python side.
func needPython(t testing.TB) {
	t.Helper()
	if os.Getenv("DTQ_SKIP_PYTHON") == "1" {
		t.Skip("DTQ_SKIP_PYTHON=1")
	}
	out, err := exec.Command(python, "-c", "import redis").CombinedOutput()
	if err != nil {
		t.Fatalf("%s with its redis module is needed (apt-get install -y python3-redis; "+
			"DTQ_SKIP_PYTHON=1 skips): %v\n%s", python, err, out)
	}
}

// pyTask is a task as testdata/crosslang.py takes it.
type pyTask struct {
	Queue       string `json:"queue"`
	Function    string `json:"function"`
	PayloadHex  string `json:"payload_hex,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	DelayMS     *int64 `json:"delay_ms,omitempty"`
	RunAtMS     *int64 `json:"run_at_ms,omitempty"`
	TimeoutMS   *int64 `json:"timeout_ms,omitempty"`
	MaxRetries  *int   `json:"max_retries,omitempty"`
	Unique      string `json:"unique,omitempty"`
	ReuseUnique bool   `json:"reuse_unique,omitempty"`
	ID          string `json:"id,omitempty"`
}

func ms(v int64) *int64 { return &v }

// goTask is the same task for the Go client.
func (p pyTask) goTask() client.Task {
	payload, _ := hex.DecodeString(p.PayloadHex)
	t := client.Task{Queue: p.Queue, Function: p.Function, Payload: payload, Priority: p.Priority,
		MaxRetries: p.MaxRetries, Unique: p.Unique, ReuseUnique: p.ReuseUnique, ID: p.ID}
	if p.DelayMS != nil {
		t.Delay = time.Duration(*p.DelayMS) * time.Millisecond
	}
	if p.RunAtMS != nil {
		t.RunAt = time.UnixMilli(*p.RunAtMS)
	}
	if p.TimeoutMS != nil {
		t.Timeout = time.Duration(*p.TimeoutMS) * time.Millisecond
	}
	return t
}

type pyCall struct {
	Op    string   `json:"op"`
	Task  *pyTask  `json:"task,omitempty"`
	Tasks []pyTask `json:"tasks,omitempty"`
	Queue string   `json:"queue,omitempty"`
	ID    string   `json:"id,omitempty"`
	// the W3C trace context passed to enqueue or enqueue_many
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// pyResult is an enqueue's outcome, or a call's error.
type pyResult struct {
	ID           string `json:"id"`
	Created      bool   `json:"created"`
	HolderStatus string `json:"holder_status"`
	Error        string `json:"error"`
	Type         string `json:"type"`
}

// pyInfo is a TaskInfo as Python's get returns it.
type pyInfo struct {
	ID           string `json:"id"`
	Queue        string `json:"queue"`
	Function     string `json:"function"`
	Status       string `json:"status"`
	Attempt      int64  `json:"attempt"`
	Priority     int    `json:"priority"`
	Failures     int64  `json:"failures"`
	MaxRetries   int64  `json:"max_retries"`
	Error        string `json:"error"`
	ResultHex    string `json:"result_hex"`
	PayloadHex   string `json:"payload_hex"`
	Worker       string `json:"worker"`
	Unique       string `json:"unique"`
	Raw          string `json:"raw"`
	CreatedAtMS  int64  `json:"created_at_ms"`
	RunAtMS      int64  `json:"run_at_ms"`
	StartedAtMS  int64  `json:"started_at_ms"`
	FinishedAtMS int64  `json:"finished_at_ms"`
	Reclaims     int64  `json:"reclaims"`
	Err          string `json:"error_message"`
}

// goInfo is what Go's Get read, in pyInfo's shape.
func goInfo(ti *client.TaskInfo) pyInfo {
	return pyInfo{ID: ti.ID, Queue: ti.Queue, Function: ti.Function, Status: string(ti.Status),
		Attempt: ti.Attempt, Priority: ti.Priority, Failures: ti.Failures, MaxRetries: ti.MaxRetries,
		Error: ti.Error, ResultHex: hex.EncodeToString([]byte(ti.Result)),
		PayloadHex: hex.EncodeToString([]byte(ti.Payload)), Worker: ti.Worker, Unique: ti.Unique, Raw: ti.Raw,
		CreatedAtMS: ti.CreatedAt, RunAtMS: ti.RunAt, StartedAtMS: ti.StartedAt, FinishedAtMS: ti.FinishedAt,
		Reclaims: ti.Reclaims}
}

// runPython makes calls with the Python client (testdata/crosslang.py) and returns one
// raw JSON outcome per call.
func runPython(t *testing.T, srv *redistest.Server, prefix string, nowMS int64, calls []pyCall) []json.RawMessage {
	t.Helper()
	req := map[string]any{"port": srv.Port, "prefix": prefix, "calls": calls}
	if nowMS != 0 {
		req["now_ms"] = nowMS
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, filepath.Join(dir, "testdata", "crosslang.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	var res []json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(calls) {
		t.Fatalf("python answered %d outcomes for %d calls (%v): %s", len(res), len(calls), err, out)
	}
	return res
}

func decode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// dump describes every key under prefix, named without it: what the two clients wrote.
// Stream entry ids (which Redis makes from its own clock) and the task's copy of its
// entry id are left out; a TTL shows as whether one is set.
func dump(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range keysUnder(t, rdb, prefix) {
		name := strings.TrimPrefix(k, prefix)
		typ := rdb.Type(ctx, k).Val()
		var v any
		switch typ {
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			if h["entry"] != "" {
				h["entry"] = "<set>"
			}
			v = h
		case "stream":
			var rows []map[string]any
			for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
				rows = append(rows, m.Values)
			}
			var groups []string
			for _, g := range rdb.XInfoGroups(ctx, k).Val() {
				groups = append(groups, g.Name)
			}
			v = map[string]any{"entries": rows, "groups": groups}
		case "zset":
			v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "set":
			m := rdb.SMembers(ctx, k).Val()
			sort.Strings(m)
			v = m
		case "string":
			v = rdb.Get(ctx, k).Val()
		}
		ttl := rdb.PTTL(ctx, k).Val() > 0
		b, _ := json.Marshal(map[string]any{"type": typ, "ttl": ttl, "value": v})
		out[name] = string(b)
	}
	return out
}

// TestSameWritesAsGo: the same tasks enqueued and cancelled by the Go client, by the
// Python client's enqueue_many and by its enqueue one by one, at the same clock, leave
// the same keys with the same contents and give the same answers.
func TestSameWritesAsGo(t *testing.T) {
	needPython(t)
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	tasks := []pyTask{
		{Queue: "mail", Function: "send", PayloadHex: hex.EncodeToString([]byte("{\"to\":\"é\"}\xff\x00")),
			Priority: 7, MaxRetries: client.Retries(5), TimeoutMS: ms(30000), Unique: "welcome:1", ID: "a1"},
		{Queue: "mail", Function: "send", DelayMS: ms(90000), ID: "a2"},
		{Queue: "mail", Function: "f", DelayMS: ms(1000), RunAtMS: ms(now + 5000), ID: "a3"},
		{Queue: "mail", Function: "f", Unique: "welcome:1", ID: "a4"},
		{Queue: "mail", Function: "f", ID: "a1"},
		{Queue: "jobs", Function: "f", Priority: 9, MaxRetries: client.Retries(0), TimeoutMS: ms(1), ID: "b1"},
		{Queue: "jobs", Function: "f", RunAtMS: ms(now - 1000), Unique: "{x}:ü", ID: "b2"},
		{Queue: "jobs", Function: "send {é}", Priority: 3, MaxRetries: client.Retries(1000), ID: "b3"},
	}
	cancels := []pyCall{{Op: "cancel", Queue: "mail", ID: "a1"}, {Op: "cancel", Queue: "mail", ID: "a2"},
		{Op: "cancel", Queue: "jobs", ID: "b1"}, {Op: "cancel", Queue: "jobs", ID: "b1"},
		{Op: "cancel", Queue: "jobs", ID: "nope"}}

	// Go
	goPrefix := redistest.Prefix(t) + "-go"
	gc := client.New(rdb, client.Options{Prefix: goPrefix, Now: func() time.Time { return time.UnixMilli(now) }})
	gts := make([]client.Task, len(tasks))
	for i, p := range tasks {
		gts[i] = p.goTask()
	}
	grs, err := gc.EnqueueMany(ctx, gts)
	if err != nil {
		t.Fatal(err)
	}
	var goCancels []string
	for _, c := range cancels {
		err := gc.Cancel(ctx, c.Queue, c.ID)
		goCancels = append(goCancels, fmt.Sprint(err))
	}
	want := dump(t, rdb, goPrefix)
	if len(want) < 10 {
		t.Fatalf("the Go client wrote only %d keys: %v", len(want), want)
	}

	// Python, enqueue_many then enqueue one by one
	for _, many := range []bool{true, false} {
		pyPrefix := redistest.Prefix(t) + "-py"
		var calls []pyCall
		if many {
			calls = append(calls, pyCall{Op: "enqueue_many", Tasks: tasks})
		} else {
			for i := range tasks {
				calls = append(calls, pyCall{Op: "enqueue", Task: &tasks[i]})
			}
		}
		out := runPython(t, srv, pyPrefix, now, append(calls, cancels...))
		var prs []pyResult
		if many {
			prs = decode[[]pyResult](t, out[0])
			out = out[1:]
		} else {
			for i := range tasks {
				prs = append(prs, decode[pyResult](t, out[i]))
			}
			out = out[len(tasks):]
		}
		for i, g := range grs {
			p := prs[i]
			if g.Err != nil {
				if p.Error != g.Err.Error() {
					t.Errorf("many=%v task %d: python error %q, go %q", many, i, p.Error, g.Err)
				}
				continue
			}
			if p.Error != "" || p.ID != g.ID || p.Created != g.Created || p.HolderStatus != string(g.HolderStatus) {
				t.Errorf("many=%v task %d: python %+v, go %+v", many, i, p, g)
			}
		}
		for i, raw := range out {
			p := decode[pyResult](t, raw)
			got := "<nil>"
			if p.Error != "" {
				got = p.Error
			}
			if got != goCancels[i] {
				t.Errorf("many=%v cancel %d: python %q, go %q", many, i, got, goCancels[i])
			}
		}
		got := dump(t, rdb, pyPrefix)
		if !reflect.DeepEqual(got, want) {
			for k, v := range want {
				if got[k] != v {
					t.Errorf("many=%v %s:\n python %s\n     go %s", many, k, got[k], v)
				}
			}
			for k, v := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("many=%v %s: python wrote it, go did not: %s", many, k, v)
				}
			}
		}
	}
}

// workerConfig is a worker on prefix serving queues, one task at a time.
func workerConfig(t *testing.T, srv *redistest.Server, prefix, queues string) runtime.Config {
	t.Helper()
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": prefix, "DTQ_QUEUES": queues,
		"DTQ_WORKER_CONCURRENCY": "1", "DTQ_VISIBILITY_TIMEOUT_S": "5", "DTQ_HEARTBEAT_INTERVAL_S": "0.2",
		"DTQ_SCHEDULER_INTERVAL_S": "0.05", "DTQ_SCHEDULER_LOCK_TTL_MS": "1000", "DTQ_RETRY_BASE_MS": "5",
		"DTQ_RETRY_MAX_MS": "20", "DTQ_DRAIN_TIMEOUT_S": "5", "DTQ_POLL_BLOCK_MS": "200", "DTQ_LOG_LEVEL": "error",
	}))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPythonEnqueueGoWorker: tasks the Python client enqueues with every option run on
// a real Go worker as the options say, and the Python client reads their outcomes as
// the Go client does.
func TestPythonEnqueueGoWorker(t *testing.T) {
	needPython(t)
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	gc := client.New(rdb, client.Options{Prefix: prefix})
	payload := []byte("{\"to\":\"é\"}\xff\x00")
	type want struct {
		status   client.Status
		attempt  int64
		failures int64
		result   string // "" = not checked
		errHas   string
	}
	named := []struct {
		name string
		task pyTask
		want want
	}{
		{"echo", pyTask{Queue: "py", Function: "echo", PayloadHex: hex.EncodeToString(payload), Priority: 7},
			want{client.StatusSucceeded, 1, 0, string(payload), ""}},
		{"retried", pyTask{Queue: "py", Function: "fail", PayloadHex: hex.EncodeToString([]byte(`{"times":2}`)),
			MaxRetries: client.Retries(5)}, want{client.StatusSucceeded, 3, 2, `{"attempt":3}`, ""}},
		{"dead", pyTask{Queue: "py", Function: "fail", PayloadHex: hex.EncodeToString([]byte(`{"times":5}`)),
			MaxRetries: client.Retries(1)}, want{client.StatusDead, 2, 2, "", "planned failure 2 of 5"}},
		{"timeout", pyTask{Queue: "py", Function: "sleep", PayloadHex: hex.EncodeToString([]byte(`{"ms":60000}`)),
			TimeoutMS: ms(200), MaxRetries: client.Retries(0)}, want{client.StatusDead, 1, 1, "", "timed out after 200ms"}},
		{"delayed", pyTask{Queue: "py", Function: "echo", PayloadHex: hex.EncodeToString([]byte("later")), DelayMS: ms(1500)},
			want{client.StatusSucceeded, 1, 0, "later", ""}},
		{"unique", pyTask{Queue: "py", Function: "echo", Unique: "order-42", ID: "py-explicit-1"},
			want{client.StatusSucceeded, 1, 0, "", ""}},
		{"low", pyTask{Queue: "prio", Function: "stamp", Priority: 0}, want{client.StatusSucceeded, 1, 0, "", ""}},
		{"high", pyTask{Queue: "prio", Function: "stamp", Priority: 9}, want{client.StatusSucceeded, 1, 0, "", ""}},
		{"cancelled", pyTask{Queue: "py", Function: "echo", DelayMS: ms(3_600_000)},
			want{client.StatusCancelled, 0, 0, "", ""}},
	}

	// Enqueue before any worker runs (so priority decides the order of the prio queue),
	// half one by one and half in one enqueue_many; then enqueue the unique key again,
	// read the delayed task while it waits, and cancel one.
	calls := []pyCall{}
	var many []pyTask
	for i := range named {
		if i%2 == 0 {
			calls = append(calls, pyCall{Op: "enqueue", Task: &named[i].task})
		} else {
			many = append(many, named[i].task)
		}
	}
	calls = append(calls, pyCall{Op: "enqueue_many", Tasks: many})
	out := runPython(t, srv, prefix, 0, calls)
	ids := map[string]string{}
	var manyRes []pyResult
	for i, j := 0, 0; i < len(named); i++ {
		var r pyResult
		if i%2 == 0 {
			r = decode[pyResult](t, out[i/2])
		} else {
			if manyRes == nil {
				manyRes = decode[[]pyResult](t, out[len(out)-1])
			}
			r = manyRes[j]
			j++
		}
		if !r.Created || r.Error != "" {
			t.Fatalf("%s: %+v", named[i].name, r)
		}
		ids[named[i].name] = r.ID
	}
	if ids["unique"] != "py-explicit-1" {
		t.Fatalf("explicit id: got %s", ids["unique"])
	}
	again := pyTask{Queue: "py", Function: "echo", Unique: "order-42"}
	out = runPython(t, srv, prefix, 0, []pyCall{
		{Op: "enqueue", Task: &again},
		{Op: "get", Queue: "py", ID: ids["delayed"]},
		{Op: "cancel", Queue: "py", ID: ids["cancelled"]},
	})
	if r := decode[pyResult](t, out[0]); r.Created || r.ID != "py-explicit-1" || r.HolderStatus != "queued" {
		t.Fatalf("second enqueue of the unique key: %+v", r)
	}
	delayed := decode[pyInfo](t, out[1])
	if delayed.Status != "scheduled" || delayed.RunAtMS != delayed.CreatedAtMS+1500 {
		t.Fatalf("delayed task before its time: %+v", delayed)
	}
	if r := decode[pyResult](t, out[2]); r.Error != "" {
		t.Fatalf("cancel: %+v", r)
	}

	// The Go side sees Python's queues and runs the tasks.
	qs, err := gc.Queues(ctx)
	sort.Strings(qs)
	if err != nil || !reflect.DeepEqual(qs, []string{"prio", "py"}) {
		t.Fatalf("queues %v %v", qs, err)
	}
	w, err := runtime.New(runtime.Options{Config: workerConfig(t, srv, prefix, "prio,py"), Redis: rdb,
		Registry: function.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range named {
		for {
			ti, err := gc.Get(ctx, n.task.Queue, ids[n.name])
			if err != nil {
				t.Fatalf("%s: %v", n.name, err)
			}
			if ti.Status.Finished() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %s after 60 s", n.name, ti.Status)
			}
			time.Sleep(20 * time.Millisecond) // polling for the outcome, bounded by the deadline
		}
	}

	// Python reads the outcomes, as Go's Get decodes them.
	calls = nil
	for _, n := range named {
		calls = append(calls, pyCall{Op: "get", Queue: n.task.Queue, ID: ids[n.name]})
	}
	calls = append(calls, pyCall{Op: "cancel", Queue: "py", ID: ids["echo"]})
	out = runPython(t, srv, prefix, 0, calls)
	got := map[string]pyInfo{}
	for i, n := range named {
		p := decode[pyInfo](t, out[i])
		got[n.name] = p
		ti, err := gc.Get(ctx, n.task.Queue, ids[n.name])
		if err != nil {
			t.Fatal(err)
		}
		if g := goInfo(ti); p != g {
			t.Errorf("%s: python read\n %+v\ngo read\n %+v", n.name, p, g)
		}
		res, _ := hex.DecodeString(p.ResultHex)
		if p.Status != string(n.want.status) || p.Attempt != n.want.attempt || p.Failures != n.want.failures ||
			(n.want.result != "" && string(res) != n.want.result) || !strings.Contains(p.Error, n.want.errHas) {
			t.Errorf("%s: %+v (result %q), want %+v", n.name, p, res, n.want)
		}
		if pl := n.task.PayloadHex; p.PayloadHex != pl || p.Priority != n.task.Priority || p.Unique != n.task.Unique {
			t.Errorf("%s: payload %s priority %d unique %q, enqueued %s %d %q", n.name, p.PayloadHex, p.Priority,
				p.Unique, pl, n.task.Priority, n.task.Unique)
		}
	}
	if d := got["delayed"]; d.StartedAtMS < d.RunAtMS {
		t.Errorf("delayed task started at %d, before its time %d", d.StartedAtMS, d.RunAtMS)
	}
	if got["dead"].MaxRetries != 1 || got["retried"].MaxRetries != 5 || got["echo"].MaxRetries != -1 {
		t.Errorf("max retries as stored: dead %d retried %d echo %d", got["dead"].MaxRetries,
			got["retried"].MaxRetries, got["echo"].MaxRetries)
	}
	// One task at a time: the p9 task, enqueued after the p0 one, started first.
	lowRes, _ := hex.DecodeString(got["low"].ResultHex)
	highRes, _ := hex.DecodeString(got["high"].ResultHex)
	if string(highRes) >= string(lowRes) || len(highRes) != len(lowRes) {
		t.Errorf("priority: p9 started at %s ns, p0 at %s ns", highRes, lowRes)
	}
	wrong := decode[pyResult](t, out[len(named)])
	if want := fmt.Sprintf("cancel %s (status succeeded): task is not in a state that allows this", ids["echo"]); wrong.Error != want || wrong.Type != "WrongStatus" {
		t.Errorf("cancel of a succeeded task: %+v", wrong)
	}
	if err := gc.Cancel(ctx, "py", ids["echo"]); !errors.Is(err, client.ErrWrongStatus) || err.Error() != wrong.Error {
		t.Errorf("go cancel of the same: %v", err)
	}

	// The idle worker waits for a hand-off: Python's enqueue starts the task for it
	// (enqueue.lua as Go runs it, with the keys of the hand-off), no claim between.
	q := keys.New(prefix).Queue("py")
	member := lua.WaitingMember(client.DefaultMaxPayload, w.ID())
	for rdb.ZScore(ctx, q.Waiting(), member).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the idle worker never registered for a hand-off")
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
	handed := pyTask{Queue: "py", Function: "echo", PayloadHex: hex.EncodeToString([]byte("handed"))}
	r := decode[pyResult](t, runPython(t, srv, prefix, 0, []pyCall{{Op: "enqueue", Task: &handed}})[0])
	for {
		ti, err := gc.Get(ctx, "py", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ti.Status == client.StatusSucceeded {
			if ti.Worker != w.ID() || ti.Attempt != 1 || ti.Result != "handed" || ti.StartedAt != ti.CreatedAt {
				t.Fatalf("handed-off task %+v", ti)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handed-off task still %s", ti.Status)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
	rw := httptest.NewRecorder()
	w.Handler().ServeHTTP(rw, httptest.NewRequest("GET", runtime.PathMetrics, nil))
	if want := `dtq_worker_handoffs_total{worker_id="` + w.ID() + `"} 1`; !strings.Contains(rw.Body.String(), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestTraceContextAsGo: a trace context given to Python's enqueue and enqueue_many is
// written as the Go client writes the span context OpenTelemetry's W3C propagator reads
// from the same two strings (version 00, the flags it keeps, the tracestate's members
// re-joined), so a traced Go worker continues the Python producer's trace.
func TestTraceContextAsGo(t *testing.T) {
	needPython(t)
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for _, tc := range []struct{ traceparent, tracestate string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		// a later version with a field more, flags beyond the two kept, spaces and an
		// empty member in the tracestate
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff-what-next", " rojo=x ,, a1@b=y\t"},
	} {
		tasks := []pyTask{{Queue: "mail", Function: "send", ID: "t1"}, {Queue: "jobs", Function: "f", ID: "t2", DelayMS: ms(60000)}}
		goPrefix := redistest.Prefix(t) + "-go"
		gc := client.New(rdb, client.Options{Prefix: goPrefix, Now: func() time.Time { return time.UnixMilli(now) }})
		tctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tc.traceparent, "tracestate": tc.tracestate})
		if !trace.SpanContextFromContext(tctx).IsValid() {
			t.Fatalf("%q: the Go propagator reads no span context", tc.traceparent)
		}
		gts := []client.Task{tasks[0].goTask(), tasks[1].goTask()}
		if _, err := gc.EnqueueMany(tctx, gts); err != nil {
			t.Fatal(err)
		}
		want := dump(t, rdb, goPrefix)
		if !strings.Contains(fmt.Sprint(want), "traceparent") {
			t.Fatalf("the Go client wrote no trace context: %v", want)
		}
		for _, many := range []bool{true, false} {
			pyPrefix := redistest.Prefix(t) + "-py"
			var calls []pyCall
			if many {
				calls = []pyCall{{Op: "enqueue_many", Tasks: tasks, Traceparent: tc.traceparent, Tracestate: tc.tracestate}}
			} else {
				for i := range tasks {
					calls = append(calls, pyCall{Op: "enqueue", Task: &tasks[i], Traceparent: tc.traceparent, Tracestate: tc.tracestate})
				}
			}
			runPython(t, srv, pyPrefix, now, calls)
			if got := dump(t, rdb, pyPrefix); !reflect.DeepEqual(got, want) {
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%q many=%v %s:\n python %s\n     go %s", tc.traceparent, many, k, got[k], v)
					}
				}
			}
		}
	}
}
