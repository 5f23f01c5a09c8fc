package runtime_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

// childEnv makes the test binary run a worker process instead of tests, so a test can
// kill -9 a real worker process.
const childEnv = "DTQ_TEST_CHILD_WORKER"

// hangFirst blocks its first attempt until cancelled; later attempts succeed.
func hangFirst(ctx context.Context, t *runtime.Task) ([]byte, error) {
	if t.Attempt > 1 {
		return []byte("recovered"), nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func childWorker() int {
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.OsLookuper())
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{})
	if err != nil {
		return 2
	}
	reg := function.Registry()
	reg.Register("hang_first", hangFirst, runtime.FuncOptions{})
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: reg})
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = w.Run(ctx)
	return 0
}

// A real worker process is SIGKILLed mid-task while it leads the scheduler: a peer
// reclaims and completes the task after the visibility timeout, the dead worker's
// heartbeat expires and the scheduler lock fails over.
func TestKill9WorkerMidTask(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ks := keys.New(e.prefix)
	cfg := e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "1", "DTQ_HEARTBEAT_INTERVAL_S", "0.2")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"DTQ_REDIS_URL="+e.srv.URL(), "DTQ_KEY_PREFIX="+e.prefix, "DTQ_WORKER_ID=victim",
		"DTQ_VISIBILITY_TIMEOUT_S=1", "DTQ_HEARTBEAT_INTERVAL_S=0.2", "DTQ_SCHEDULER_INTERVAL_S=0.05",
		"DTQ_SCHEDULER_LOCK_TTL_MS=1000", "PORT=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	id := e.enqueue(t, client.Task{Function: "hang_first", MaxRetries: client.Retries(3)})
	eventually(t, "the child running the task and leading the scheduler", func() bool {
		ti, err := e.c.Get(e.ctx, "default", id)
		lock := e.rdb.Get(e.ctx, ks.SchedulerLock()).Val()
		return err == nil && ti.Status == "running" && ti.Worker == "victim" && lock == "victim"
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	rec := newRecorder()
	reg := function.Registry()
	reg.Register("hang_first", hangFirst, runtime.FuncOptions{})
	peer := startWorker(t, e.rdb, cfg, reg, rec)
	rec.wait(t, "the peer completing the task", is(runtime.EventTaskSucceeded, id))
	ti := e.task(t, id)
	if ti.Status != "succeeded" || ti.Attempt != 2 || ti.Worker != peer.w.ID() || ti.Result != "recovered" || ti.Reclaims != 1 {
		t.Fatalf("task %+v: want succeeded by the peer at attempt 2", ti)
	}
	ev := rec.wait(t, "reclaim", is(runtime.EventTaskReclaimed, id))
	if ev.Time.Sub(killed) < 0 {
		t.Fatalf("reclaimed before the kill")
	}
	rec.wait(t, "scheduler failover", is(runtime.EventLeaderAcquired, ""))
	eventually(t, "the victim's heartbeat to expire", func() bool {
		return e.rdb.Exists(e.ctx, ks.Worker("victim")).Val() == 0
	})
	ws, err := e.c.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == "victim" && w.Liveness != "stale" {
			t.Fatalf("victim liveness %q, want stale", w.Liveness)
		}
	}
	if lock := e.rdb.Get(e.ctx, ks.SchedulerLock()).Val(); lock != peer.w.ID() {
		t.Fatalf("scheduler lock held by %q, want the peer", lock)
	}
	pend, _ := e.rdb.XPending(e.ctx, ks.Queue("default").Stream(0), keys.Group).Result()
	if pend.Count != 0 {
		t.Fatalf("pending = %d, want 0", pend.Count)
	}
}

// A worker that stops heartbeating while its function still runs (a paused process, as
// its peers see it) loses the task to a peer; its late completion changes nothing.
func TestFencedLateCompletion(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	b := newBlocking(1)
	reg := function.Registry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	// The slow worker heartbeats every 30 s: to its peers it looks paused after 1 s.
	slowCfg := e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "60", "DTQ_HEARTBEAT_INTERVAL_S", "30")
	slow := startWorker(t, e.rdb, slowCfg, reg, rec)
	id := e.enqueue(t, client.Task{Function: "block", MaxRetries: client.Retries(3)})
	b.waitStart(t)

	peer := startWorker(t, e.rdb, e.config(t, "DTQ_VISIBILITY_TIMEOUT_S", "1", "DTQ_HEARTBEAT_INTERVAL_S", "0.2"), reg, rec)
	rec.wait(t, "the peer completing the reclaimed task", func(ev runtime.Event) bool {
		return ev.Type == runtime.EventTaskSucceeded && ev.TaskID == id && ev.Worker == peer.w.ID()
	})
	close(b.release) // the paused worker's function returns now
	rec.wait(t, "the late completion fenced off", func(ev runtime.Event) bool {
		return ev.Type == runtime.EventFenced && ev.TaskID == id && ev.Worker == slow.w.ID()
	})
	ti := e.task(t, id)
	if ti.Status != "succeeded" || ti.Attempt != 2 || ti.Result != "attempt 2" || ti.Worker != peer.w.ID() {
		t.Fatalf("task %+v: the fenced completion must not overwrite attempt 2", ti)
	}
	if n := rec.count(is(runtime.EventTaskSucceeded, id)); n != 1 {
		t.Fatalf("%d successes recorded, want 1", n)
	}
	pend, _ := e.rdb.XPending(e.ctx, keys.New(e.prefix).Queue("default").Stream(0), keys.Group).Result()
	if pend.Count != 0 {
		t.Fatalf("pending = %d, want 0", pend.Count)
	}
}

// Redis dies under a running worker and comes back (AOF): the loops log, restart and
// reconnect; work enqueued before and after completes.
func TestSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistestStart(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "restart"
	c := client.New(rdb, client.Options{Prefix: prefix})
	rec := newRecorder()
	startWorker(t, rdb, testConfig(t, srv.URL(), prefix, nil), nil, rec)
	ctx := context.Background()
	before, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "task before the restart", is(runtime.EventTaskSucceeded, before))
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var after string
	eventually(t, "enqueue after the restart", func() bool {
		id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
		after = id
		return err == nil
	})
	rec.wait(t, "task after the restart", is(runtime.EventTaskSucceeded, after))
}

func redistestStart(t *testing.T) *redistest.Server {
	return redistest.Start(t, redistest.Options{AOF: true})
}

// Redis gone for twice the visibility timeout under two live workers running long tasks
// (AOF: the PEL comes back with its old delivery times, so every entry looks idle past
// the visibility timeout): the reapers give the owners a heartbeat's time to touch their
// entries, and no task runs twice (before, peers reclaimed each other's tasks at once).
func TestOutageLongerThanTheVisibilityTimeoutRerunsNothing(t *testing.T) {
	t.Parallel()
	srv := redistestStart(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "outage"
	c := client.New(rdb, client.Options{Prefix: prefix})
	b := newBlocking(0)
	reg := runtime.NewRegistry()
	reg.Register("block", b.fn, runtime.FuncOptions{})
	// heartbeats every 1.5 s, reaper passes every second: the reapers come first
	env := map[string]string{"DTQ_VISIBILITY_TIMEOUT_S": "2", "DTQ_HEARTBEAT_INTERVAL_S": "1.5", "DTQ_WORKER_CONCURRENCY": "8"}
	rec := newRecorder()
	for range 2 {
		startWorker(t, rdb, testConfig(t, srv.URL(), prefix, env), reg, rec)
	}
	ctx := context.Background()
	var ts []client.Task
	for i := range 6 {
		ts = append(ts, client.Task{Queue: "default", Function: "block", Priority: i % 3, MaxRetries: client.Retries(5)})
	}
	rs, err := c.EnqueueMany(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	rec.logOnFailure(t)
	for range rs {
		b.waitStart(t)
	}
	srv.Kill()
	time.Sleep(4 * time.Second) // the outage: twice the visibility timeout
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The exposure: reaper passes come every second; give them three visibility
	// timeouts with Redis back before the functions return.
	time.Sleep(6 * time.Second)
	close(b.release)
	for _, r := range rs {
		rec.wait(t, "task "+r.ID, is(runtime.EventTaskSucceeded, r.ID))
	}
	if n := rec.count(is(runtime.EventTaskReclaimed, "")); n != 0 {
		t.Errorf("%d tasks of live workers reclaimed after the outage", n)
	}
	if extra := len(b.started); extra != 0 {
		t.Errorf("%d functions started again after the outage", extra)
	}
	for _, r := range rs {
		ti, err := c.Get(ctx, "default", r.ID)
		if err != nil || ti.Attempt != 1 || ti.Status != "succeeded" {
			t.Errorf("task %s: %+v %v, want succeeded at attempt 1", r.ID, ti, err)
		}
	}
}
