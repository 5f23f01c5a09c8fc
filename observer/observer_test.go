package observer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/observer"
	"github.com/dtq/dtq/runtime"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const token = "0123456789abcdef-token"

type env struct {
	t      *testing.T
	url    string
	rdb    *redis.Client
	prefix string
	ks     keys.Space
	c      *client.Client
	log    *syncbuf.Buffer
	// pipelines counts the pipelines the observer's client sent (handshakes aside).
	pipelines atomic.Int64
}

type counter struct{ e *env }

func (counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch cmds[0].Name() {
		case "hello", "client", "auth", "select": // a new connection's handshake
		default:
			h.e.pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
}

// newEnv serves an observer on the shared redis-server under a fresh prefix; mod
// changes its configuration (token set, reads open, by default).
func newEnv(t *testing.T, mod func(*observer.Config)) *env {
	t.Helper()
	srv := redistest.Shared(t)
	e := &env{t: t, prefix: redistest.Prefix(t), log: &syncbuf.Buffer{}}
	e.ks = keys.New(e.prefix)
	e.rdb = srv.Client(t)
	e.c = client.New(e.rdb, client.Options{Prefix: e.prefix})
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": e.prefix, "DTQ_OBSERVER_TOKEN": token,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&cfg)
	}
	ordb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = ordb.Close() })
	ordb.AddHook(counter{e})
	obs := observer.New(observer.Options{Config: cfg, Redis: ordb, Logger: slog.New(slog.NewJSONHandler(e.log, nil))})
	hs := httptest.NewServer(obs.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(obs.Close) // first: it ends the event streams, which hs.Close waits for
	e.url = hs.URL
	return e
}

type resp struct {
	status int
	body   string
	header http.Header
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

// do sends a request; tok "" sends no Authorization header, hdr adds headers.
func (e *env) do(method, path, tok string, hdr ...string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(path, "/metrics") && method != http.MethodHead {
		e.t.Fatalf("%s %s: Content-Type %q, body %q", method, path, ct, b)
	}
	return resp{status: res.StatusCode, body: string(b), header: res.Header}
}

func (e *env) get(path string) map[string]any {
	e.t.Helper()
	r := e.do(http.MethodGet, path, "")
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	return r.json(e.t)
}

// wantError checks an error answer: its status and code, and that it says what.
func wantError(t *testing.T, r resp, status int, code, says string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	m := r.json(t)
	if m["code"] != code || !strings.Contains(fmt.Sprint(m["error"]), says) {
		t.Fatalf("error %v, want code %q saying %q", m, code, says)
	}
}

func (e *env) enqueue(task client.Task) string {
	e.t.Helper()
	id, _, err := e.c.Enqueue(context.Background(), task)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// kill claims the next task of queue and completes it with outcome (Retry or Dead).
func (e *env) finish(queue string, outcome lua.Outcome) string {
	e.t.Helper()
	ctx := context.Background()
	q := e.ks.Queue(queue)
	now := time.Now().UnixMilli()
	res, err := lua.Claim.Run(ctx, e.rdb, lua.ClaimArgs{Queue: q, Consumer: "w1", NowMS: now, Want: 1, MaxPayload: 1 << 20})
	if err != nil || len(res.Started) != 1 {
		e.t.Fatalf("claim: %d, %v", len(res.Started), err)
	}
	s := res.Started[0]
	if outcome != 0 {
		if _, err := lua.Complete.Run(ctx, e.rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 0, Items: []lua.Completion{{ID: s.ID, Entry: s.Entry, Band: s.Band,
			Attempt: s.Attempt, Outcome: outcome, Text: "boom", RetryMS: now + 3600_000}}}); err != nil {
			e.t.Fatal(err)
		}
	}
	return s.ID
}

func workerByID(t *testing.T, m map[string]any, id string) map[string]any {
	t.Helper()
	for _, w := range m["workers"].([]any) {
		if w := w.(map[string]any); w["worker_id"] == id {
			return w
		}
	}
	return nil
}

// eventually polls cond; the deadline only turns a hang into a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWorkersLivenessFromHeartbeatAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// A long interval: a stopped worker's record reads "stopped" for 3× it, far
	// longer than this test takes.
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": "redis://" + redistest.Shared(t).Addr(), "DTQ_KEY_PREFIX": e.prefix,
		"DTQ_HEARTBEAT_INTERVAL_S": "60", "DTQ_VISIBILITY_TIMEOUT_S": "120", "DTQ_LOG_LEVEL": "error",
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: e.rdb, Registry: function.Registry(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "the worker live", func() bool {
		wk := workerByID(t, e.get("/api/v1/workers"), w.ID())
		return wk != nil && wk["liveness"] == string(liveness.Live)
	})
	cancel()
	<-done
	m := e.get("/api/v1/workers")
	if wk := workerByID(t, m, w.ID()); wk == nil || wk["liveness"] != string(liveness.Gone) || wk["status"] != string(liveness.Stopped) {
		t.Fatalf("stopped worker: %v", wk)
	}
	if m["stopped"] != 1.0 {
		t.Fatalf("counts: %v", m)
	}

	// A heartbeat an hour old is stale, whatever its record says of itself; so is an
	// id whose record expired. Neither is judged by the record's existence.
	old := time.Now().Add(-time.Hour).UnixMilli()
	e.rdb.SAdd(context.Background(), e.ks.Workers(), "old", "gone")
	e.rdb.HSet(context.Background(), e.ks.Worker("old"), liveness.FieldWorkerID, "old", liveness.FieldStatus, string(liveness.Ready),
		liveness.FieldLastHeartbeat, old, liveness.FieldIntervalMS, 5000, liveness.FieldHostname, "h1", liveness.FieldActiveTasks, 3)
	m = e.get("/api/v1/workers")
	stale := workerByID(t, m, "old")
	if stale == nil || stale["liveness"] != string(liveness.Stale) || stale["hostname"] != "h1" || stale["active_tasks"] != 3.0 || stale["heartbeat_age_s"].(float64) < 3599 {
		t.Fatalf("old heartbeat: %v", stale)
	}
	if g := workerByID(t, m, "gone"); g == nil || g["liveness"] != string(liveness.Stale) {
		t.Fatalf("expired record: %v", g)
	}
	if m["stale"] != 2.0 || m["stopped"] != 1.0 || m["live"] != 0.0 {
		t.Fatalf("counts: %v", m)
	}
}

func TestQueuesInOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for i := 0; i < 20; i++ {
		e.enqueue(client.Task{Queue: "q" + strconv.Itoa(i), Function: "noop", Priority: i % 10})
	}
	e.enqueue(client.Task{Queue: "q3", Function: "noop", Priority: 9})
	e.enqueue(client.Task{Queue: "q3", Function: "noop", Delay: time.Hour})
	e.enqueue(client.Task{Queue: "q3", Function: "fail", Priority: 0})
	e.enqueue(client.Task{Queue: "q3", Function: "fail", Priority: 0})
	e.finish("q3", lua.Dead)  // the p9 task
	e.finish("q3", lua.Retry) // p3
	e.finish("q3", 0)         // a p0 task left running
	if err := e.c.Pause(context.Background(), "q3"); err != nil {
		t.Fatal(err)
	}
	before := e.pipelines.Load()
	m := e.get("/api/v1/queues")
	if n := e.pipelines.Load() - before; n != 1 {
		t.Fatalf("%d pipelines for 20 queues, want 1", n)
	}
	qs := m["queues"].([]any)
	if len(qs) != 20 {
		t.Fatalf("%d queues, want 20", len(qs))
	}
	var q3 map[string]any
	for _, q := range qs {
		if q := q.(map[string]any); q["queue"] == "q3" {
			q3 = q
		}
	}
	if q3["paused"] != true || q3["scheduled"] != 2.0 || q3["dead"] != 1.0 || q3["lag"] != 1.0 || q3["pending"] != 1.0 {
		t.Fatalf("q3 = %v", q3)
	}
	bands := q3["priorities"].([]any)
	if p0 := bands[9].(map[string]any); p0["priority"] != 0.0 || p0["pending"] != 1.0 || p0["lag"] != 1.0 {
		t.Fatalf("q3 band 0 = %v", p0)
	}
	one := e.get("/api/v1/queues/q3")
	if one["scheduled"] != 2.0 || one["paused"] != true {
		t.Fatalf("/queues/q3 = %v", one)
	}
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/nosuch", ""), http.StatusNotFound, "queue_not_found", "nosuch")
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/a%7Bb%7D", ""), http.StatusBadRequest, "bad_queue", "queue")
	// A paused queue with nothing in it is still a queue.
	if err := e.c.Pause(context.Background(), "fresh"); err != nil {
		t.Fatal(err)
	}
	if r := e.do(http.MethodGet, "/api/v1/queues/fresh", ""); r.status != http.StatusOK {
		t.Fatalf("paused empty queue: %d %s", r.status, r.body)
	}
}

func TestTasksPagesWithCursors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	want := map[string]bool{}
	for i := 0; i < 27; i++ {
		want[e.enqueue(client.Task{Queue: "q", Function: "noop", Priority: i % 10})] = true
	}
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		m := e.get("/api/v1/queues/q/tasks?state=queued&limit=5&cursor=" + url.QueryEscape(cursor))
		pages++
		items := m["items"].([]any)
		if len(items) > 5 {
			t.Fatalf("%d items, limit 5", len(items))
		}
		for _, it := range items {
			id := it.(map[string]any)["id"].(string)
			if seen[id] || !want[id] {
				t.Fatalf("%s listed twice or not ours", id)
			}
			seen[id] = true
		}
		cursor = m["next_cursor"].(string)
		if cursor == "" {
			break
		}
	}
	if len(seen) != len(want) || pages != 6 {
		t.Fatalf("%d of %d tasks on %d pages", len(seen), len(want), pages)
	}
	band := e.get("/api/v1/queues/q/tasks?state=queued&band=4")
	if items := band["items"].([]any); len(items) != 3 || items[0].(map[string]any)["priority"] != 4.0 {
		t.Fatalf("band 4: %v", items)
	}
	running := e.finish("q", 0)
	r := e.get("/api/v1/queues/q/tasks?state=running")
	if items := r["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != running || items[0].(map[string]any)["consumer"] != "w1" {
		t.Fatalf("running: %v", items)
	}
	for _, st := range []string{"scheduled", "retrying", "dead"} {
		if items := e.get("/api/v1/queues/q/tasks?state=" + st)["items"].([]any); len(items) != 0 {
			t.Fatalf("%s: %v", st, items)
		}
	}
	scheduledCursor := e.get("/api/v1/queues/q/tasks?state=queued&limit=1")["next_cursor"].(string)
	for _, tc := range []struct{ query, code, says string }{
		{"state=bogus", "bad_state", "state"},
		{"state=cancelled", "bad_state", "cannot be listed"},
		{"limit=0", "bad_limit", "limit"},
		{"limit=1001", "bad_limit", "limit"},
		{"limit=x", "bad_limit", "limit"},
		{"band=10", "bad_band", "band"},
		{"band=-1", "bad_band", "band"},
		{"state=dead&band=3", "bad_band", "band"},
		{"cursor=%25%25", "bad_cursor", "cursor"},
		{"state=running&cursor=" + scheduledCursor, "bad_cursor", "cursor"},
	} {
		wantError(t, e.do(http.MethodGet, "/api/v1/queues/q/tasks?"+tc.query, ""), http.StatusBadRequest, tc.code, tc.says)
	}
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/a:b/tasks", ""), http.StatusBadRequest, "bad_queue", "queue")
}

func TestTaskRecordAndPayloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	big := strings.Repeat("é", observer.MaxBodyBytes) // 2 bytes each: twice the cap
	for _, tc := range []struct {
		name, payload, encoding, value string
		truncated                      bool
	}{
		{"json", `{"to":"a@b.c","n":[1,2]}`, "json", "{\n  \"to\": \"a@b.c\",\n  \"n\": [\n    1,\n    2\n  ]\n}", false},
		{"text", "hello, world", "text", "hello, world", false},
		{"binary", "\xff\x00\x01", "hex", "ff0001", false},
		{"big text", big, "text", big[:observer.MaxBodyBytes], true},
		{"big json", `"` + strings.Repeat("a", observer.MaxBodyBytes) + `"`, "text", `"` + strings.Repeat("a", observer.MaxBodyBytes-1), true},
	} {
		id := e.enqueue(client.Task{Queue: "q", Function: "echo", Payload: []byte(tc.payload), Priority: 3})
		m := e.get("/api/v1/queues/q/tasks/" + id)
		p := m["payload"].(map[string]any)
		if m["id"] != id || m["status"] != "queued" || m["function"] != "echo" || m["priority"] != 3.0 {
			t.Fatalf("%s: record %v", tc.name, m)
		}
		if p["encoding"] != tc.encoding || p["value"] != tc.value || p["truncated"] != tc.truncated || p["size"] != float64(len(tc.payload)) {
			t.Fatalf("%s: payload %v", tc.name, p)
		}
	}
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/q/tasks/nosuch", ""), http.StatusNotFound, "not_found", "nosuch")
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/q/tasks/a%20b", ""), http.StatusBadRequest, "bad_id", "id")
}

func TestActionsNeedTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	paused := func() bool {
		p, err := e.c.Paused(context.Background(), "q")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/pause", ""), http.StatusUnauthorized, "unauthorized", "Authorization")
	r := e.do(http.MethodPost, "/api/v1/queues/q/pause", "wrong-token-of-some-length")
	wantError(t, r, http.StatusUnauthorized, "unauthorized", "wrong token")
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/pause", "", "Authorization", "Basic "+token), http.StatusUnauthorized, "unauthorized", "Bearer")
	// A form (what a cross-site page can post) is refused even with the token.
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"} {
		wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/pause", token, "Content-Type", ct), http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type")
	}
	// No action on a GET.
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/q/pause", token), http.StatusMethodNotAllowed, "method_not_allowed", "not allowed")
	if paused() {
		t.Fatal("paused by a refused request")
	}
	if m := e.do(http.MethodPost, "/api/v1/queues/q/pause", token, "Content-Type", "application/json").json(t); m["paused"] != true || !paused() {
		t.Fatalf("pause: %v", m)
	}
	if m := e.do(http.MethodPost, "/api/v1/queues/q/resume", token).json(t); m["paused"] != false || paused() {
		t.Fatalf("resume: %v", m)
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/a%7B/pause", token), http.StatusBadRequest, "bad_queue", "queue")

	// cancel: a queued task yes, a running one asked to stop, an ended one no (409), a
	// missing one 404.
	queued := e.enqueue(client.Task{Queue: "q", Function: "noop", Priority: 1})
	e.enqueue(client.Task{Queue: "q", Function: "noop", Priority: 9})
	running := e.finish("q", 0)
	if m := e.do(http.MethodPost, "/api/v1/queues/q/tasks/"+queued+"/cancel", token).json(t); m["status"] != "cancelled" {
		t.Fatalf("cancel: %v", m)
	}
	if ti, _ := e.c.Get(context.Background(), "q", queued); ti.Status != "cancelled" {
		t.Fatalf("cancelled task status %s", ti.Status)
	}
	if m := e.do(http.MethodPost, "/api/v1/queues/q/tasks/"+running+"/cancel", token).json(t); m["status"] != "running" || m["cancel"] != "requested" {
		t.Fatalf("cancel of a running task: %v; want its stop requested", m)
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/tasks/"+queued+"/cancel", token), http.StatusConflict, "wrong_state", "cancelled")
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/tasks/nosuch/cancel", token), http.StatusNotFound, "not_found", "nosuch")

	// requeue: a dead task yes, another no.
	e.enqueue(client.Task{Queue: "d", Function: "fail"})
	dead := e.finish("d", lua.Dead)
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/dead/"+queued+"/requeue", token), http.StatusConflict, "wrong_state", "requeue")
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/dead/nosuch/requeue", token), http.StatusNotFound, "not_found", "nosuch")
	if m := e.do(http.MethodPost, "/api/v1/queues/d/dead/"+dead+"/requeue", token).json(t); m["status"] != "queued" {
		t.Fatalf("requeue: %v", m)
	}
	if ti, _ := e.c.Get(context.Background(), "d", dead); ti.Status != "queued" {
		t.Fatalf("requeued task status %s", ti.Status)
	}
	if !strings.Contains(e.log.String(), `"msg":"observer: dead task requeued"`) {
		t.Fatalf("no log line of the action:\n%s", e.log.String())
	}
}

func TestActionsOffWithoutAToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *observer.Config) { c.Token = "" })
	for _, p := range []string{"/api/v1/queues/q/pause", "/api/v1/queues/q/resume", "/api/v1/queues/q/tasks/x/cancel", "/api/v1/queues/q/dead/x/requeue"} {
		wantError(t, e.do(http.MethodPost, p, token), http.StatusForbidden, "actions_disabled", "DTQ_OBSERVER_TOKEN")
	}
	if p, _ := e.c.Paused(context.Background(), "q"); p {
		t.Fatal("paused with actions off")
	}
	e.get("/api/v1/queues") // reads stay open
}

func TestReadClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *observer.Config) { c.ReadOpen = false })
	for _, p := range []string{"/api/v1/workers", "/api/v1/queues", "/api/v1/queues/q", "/api/v1/queues/q/tasks", "/api/v1/queues/q/tasks/x"} {
		wantError(t, e.do(http.MethodGet, p, ""), http.StatusUnauthorized, "unauthorized", "Authorization")
		wantError(t, e.do(http.MethodGet, p, "not-the-token-at-all"), http.StatusUnauthorized, "unauthorized", "wrong token")
	}
	if r := e.do(http.MethodGet, "/api/v1/queues", token); r.status != http.StatusOK {
		t.Fatalf("with the token: %d %s", r.status, r.body)
	}
	// The probes and the metrics stay open.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := e.do(http.MethodGet, p, ""); r.status != http.StatusOK {
			t.Fatalf("%s: %d", p, r.status)
		}
	}
}

func TestUnknownPathIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	wantError(t, e.do(http.MethodGet, "/api/v1/nope", ""), http.StatusNotFound, "not_found", "not found")
	wantError(t, e.do(http.MethodGet, "/api/v2/queues", ""), http.StatusNotFound, "not_found", "not found")
	m := e.do(http.MethodGet, "/metrics", "")
	if !strings.Contains(m.body, `dtq_observer_requests_total{code="404",route="unmatched"}`) {
		t.Fatalf("metrics:\n%s", m.body)
	}
}

// Redis unreachable: every read answers 503, /readyz says why, and the password of the
// Redis URL is in no answer and no log line.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const secret = "s3cretpassw0rd"
	rawURL := "redis://:" + secret + "@" + addr + "/0"
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_REDIS_URL": rawURL, "DTQ_OBSERVER_TOKEN": token}))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: secret, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	log := &syncbuf.Buffer{}
	obs := observer.New(observer.Options{Config: cfg, Redis: rdb, Logger: slog.New(slog.NewJSONHandler(log, nil))})
	hs := httptest.NewServer(obs.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(obs.Close)
	e := &env{t: t, url: hs.URL}
	for _, p := range []string{"/api/v1/workers", "/api/v1/queues", "/api/v1/queues/q", "/api/v1/queues/q/tasks", "/api/v1/queues/q/tasks/x"} {
		r := e.do(http.MethodGet, p, "")
		wantError(t, r, http.StatusServiceUnavailable, "redis_unavailable", "redis unreachable")
		if strings.Contains(r.body, secret) {
			t.Fatalf("%s: the password in %s", p, r.body)
		}
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/queues/q/pause", token), http.StatusServiceUnavailable, "redis_unavailable", "redis unreachable")
	r := e.do(http.MethodGet, "/readyz", "")
	if m := r.json(t); r.status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(m["reason"]), "redis unreachable") {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	if !strings.Contains(log.String(), "request failed") || strings.Contains(log.String(), secret) {
		t.Fatalf("log:\n%s", log.String())
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env map[string]string
		v   string
	}{
		{map[string]string{"PORT": "70000"}, "PORT"},
		{map[string]string{"PORT": "x"}, "PORT"},
		{map[string]string{"DTQ_OBSERVER_TOKEN": "tk7q"}, "DTQ_OBSERVER_TOKEN"},
		{map[string]string{"DTQ_OBSERVER_TOKEN": "a token with spaces in it"}, "DTQ_OBSERVER_TOKEN"},
		{map[string]string{"DTQ_OBSERVER_READ_OPEN": "maybe"}, "DTQ_OBSERVER_READ_OPEN"},
		{map[string]string{"DTQ_OBSERVER_READ_OPEN": "false"}, "DTQ_OBSERVER_READ_OPEN"},
		{map[string]string{"DTQ_KEY_PREFIX": "a{b}"}, "DTQ_KEY_PREFIX"},
		{map[string]string{"DTQ_LOG_FORMAT": "xml"}, "DTQ_LOG_FORMAT"},
		{map[string]string{"DTQ_LOG_LEVEL": "loud"}, "DTQ_LOG_LEVEL"},
	} {
		_, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(tc.env))
		if err == nil || !strings.HasPrefix(err.Error(), tc.v+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: err = %v, want one line naming %s", tc.env, err, tc.v)
		}
		if tok := tc.env["DTQ_OBSERVER_TOKEN"]; tok != "" && err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("the token in %q", err)
		}
	}
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_OBSERVER_READ_OPEN": "false", "DTQ_OBSERVER_TOKEN": token}))
	if err != nil || cfg.ReadOpen || cfg.Port != 8080 || cfg.KeyPrefix != "dtq" {
		t.Fatalf("%+v %v", cfg, err)
	}
}

// A queue whose key Redis refuses (another type) reports its error; the other queues
// are still read, and a listing of the broken band is a 500 naming Redis's reply.
func TestBrokenQueueStopsNoOtherQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(client.Task{Queue: "good", Function: "noop"})
	e.enqueue(client.Task{Queue: "bad", Function: "noop", Priority: 4})
	ctx := context.Background()
	q := e.ks.Queue("bad")
	if err := e.rdb.Del(ctx, q.Stream(4)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, q.Stream(4), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	qs := e.get("/api/v1/queues")["queues"].([]any)
	if len(qs) != 2 {
		t.Fatalf("queues: %v", qs)
	}
	bad, good := qs[0].(map[string]any), qs[1].(map[string]any)
	if !strings.Contains(fmt.Sprint(bad["error"]), "WRONGTYPE") || good["lag"] != 1.0 || good["error"] != nil {
		t.Fatalf("bad %v, good %v", bad, good)
	}
	wantError(t, e.do(http.MethodGet, "/api/v1/queues/bad/tasks?band=4", ""), http.StatusInternalServerError, "redis_error", "WRONGTYPE")
}
