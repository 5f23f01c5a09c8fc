package runtime_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childWorker())
	}
	if os.Getenv(floorChildEnv) != "" {
		os.Exit(floorChild())
	}
	redistest.Main(m)
}

// waitTimeout bounds every wait for an event: long enough never to fire on a slow
// machine, there only so a broken build fails instead of hanging.
const waitTimeout = 30 * time.Second

// testConfig is the default configuration with short intervals, overridden by env.
func testConfig(t *testing.T, redisURL, prefix string, env map[string]string) runtime.Config {
	t.Helper()
	m := map[string]string{
		"DTQ_REDIS_URL":             redisURL,
		"DTQ_KEY_PREFIX":            prefix,
		"DTQ_WORKER_CONCURRENCY":    "8",
		"DTQ_VISIBILITY_TIMEOUT_S":  "2",
		"DTQ_HEARTBEAT_INTERVAL_S":  "0.2",
		"DTQ_DRAIN_TIMEOUT_S":       "10",
		"DTQ_SCHEDULER_INTERVAL_S":  "0.05",
		"DTQ_SCHEDULER_LOCK_TTL_MS": "1000",
		"DTQ_RETRY_BASE_MS":         "5",
		"DTQ_RETRY_MAX_MS":          "20",
		"DTQ_EVENTS_VERBOSE":        "true",
		"DTQ_POLL_BLOCK_MS":         "1000",
	}
	for k, v := range env {
		m[k] = v
	}
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(m))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// recorder collects the events of one or more workers and lets a test wait for one.
type recorder struct {
	mu     sync.Mutex
	events []runtime.Event
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{})} }

func (r *recorder) observe(e runtime.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// wait returns the first event matching pred, waiting for it to happen.
func (r *recorder) wait(t *testing.T, what string, pred func(runtime.Event) bool) runtime.Event {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	seen := 0
	for {
		r.mu.Lock()
		for ; seen < len(r.events); seen++ {
			if pred(r.events[seen]) {
				e := r.events[seen]
				r.mu.Unlock()
				return e
			}
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// logOnFailure logs every event recorded when t has failed by its end.
func (r *recorder) logOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, ev := range r.events {
			t.Logf("event %s %s %s %s %d %s", ev.Time.Format("15:04:05.000"), ev.Worker, ev.Type, ev.TaskID, ev.Attempt, ev.Detail)
		}
	})
}

// count returns how many events match pred so far.
func (r *recorder) count(pred func(runtime.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if pred(e) {
			n++
		}
	}
	return n
}

func is(typ runtime.EventType, task string) func(runtime.Event) bool {
	return func(e runtime.Event) bool { return e.Type == typ && (task == "" || e.TaskID == task) }
}

// running is a worker started by a test.
type running struct {
	w    *runtime.Worker
	stop func() // begins the drain and waits for Run to return
	done chan struct{}
}

func startWorker(t *testing.T, rdb redis.UniversalClient, cfg runtime.Config, reg *runtime.Registry, rec *recorder) *running {
	t.Helper()
	if reg == nil {
		reg = function.Registry()
	}
	o := runtime.Options{Config: cfg, Redis: rdb, Registry: reg}
	if rec != nil {
		o.Observe = rec.observe
	}
	w, err := runtime.New(o)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker run: %v", err)
		}
	}()
	var once sync.Once
	r := &running{w: w, done: done, stop: func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitTimeout + time.Minute):
				t.Errorf("worker %s did not stop", w.ID())
			}
		})
	}}
	t.Cleanup(r.stop)
	return r
}

type env struct {
	srv    *redistest.Server
	rdb    *redis.Client
	prefix string
	c      *client.Client
	ctx    context.Context
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	return &env{srv: srv, rdb: rdb, prefix: prefix, c: client.New(rdb, client.Options{Prefix: prefix}), ctx: context.Background()}
}

func (e *env) config(t *testing.T, kv ...string) runtime.Config {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return testConfig(t, e.srv.URL(), e.prefix, m)
}

func (e *env) enqueue(t *testing.T, task client.Task) string {
	t.Helper()
	if task.Queue == "" {
		task.Queue = "default"
	}
	id, created, err := e.c.Enqueue(e.ctx, task)
	if err != nil || !created {
		t.Fatalf("enqueue: created=%v err=%v", created, err)
	}
	return id
}

func (e *env) task(t *testing.T, id string) *client.TaskInfo {
	t.Helper()
	ti, err := e.c.Get(e.ctx, "default", id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ti
}

// blocking is a function that runs until released or cancelled, and says when it starts.
type blocking struct {
	started chan string // task id and attempt, "id/attempt"
	release chan struct{}
	// onlyAttempt: attempts other than this one succeed at once (0: every attempt blocks)
	onlyAttempt int64
}

func newBlocking(onlyAttempt int64) *blocking {
	return &blocking{started: make(chan string, 100), release: make(chan struct{}), onlyAttempt: onlyAttempt}
}

func (b *blocking) fn(ctx context.Context, t *runtime.Task) ([]byte, error) {
	if b.onlyAttempt != 0 && t.Attempt != b.onlyAttempt {
		return []byte("attempt " + strconv.FormatInt(t.Attempt, 10)), nil
	}
	b.started <- fmt.Sprintf("%s/%d", t.ID, t.Attempt)
	select {
	case <-b.release:
		return []byte("released"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *blocking) waitStart(t *testing.T) string {
	t.Helper()
	select {
	case s := <-b.started:
		return s
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for the function to start")
		return ""
	}
}

// setupB is setup for benchmarks.
func setupB(b *testing.B) *env {
	b.Helper()
	srv := redistest.Shared(b)
	rdb := srv.Client(b)
	prefix := redistest.Prefix(b)
	return &env{srv: srv, rdb: rdb, prefix: prefix, c: client.New(rdb, client.Options{Prefix: prefix}), ctx: context.Background()}
}

func startWorkerB(b *testing.B, e *env, rec *recorder) *running {
	m := map[string]string{
		"DTQ_REDIS_URL": e.srv.URL(), "DTQ_KEY_PREFIX": e.prefix, "DTQ_WORKER_CONCURRENCY": "64",
		"DTQ_LOG_LEVEL": "error",
	}
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(m))
	if err != nil {
		b.Fatal(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: e.rdb, Registry: function.Registry()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	return &running{w: w, done: done, stop: func() { cancel(); <-done }}
}

func waitTick() { time.Sleep(time.Millisecond) }
