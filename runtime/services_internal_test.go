package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/prom"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// passEnv is a worker whose loops' passes a test runs one by one (no Run), with a
// function "hold" that runs until the test ends.
type passEnv struct {
	t       *testing.T
	w       *Worker
	rdb     *redis.Client
	c       *client.Client
	q       keys.Queue
	release chan struct{}
	clock   *testClock
}

func newPassEnv(t *testing.T, env ...string) *passEnv {
	t.Helper()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	m := map[string]string{"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": prefix, "DTQ_EVENTS_MAXLEN": "0"}
	for i := 0; i+1 < len(env); i += 2 {
		m[env[i]] = env[i+1]
	}
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(m))
	if err != nil {
		t.Fatal(err)
	}
	pe := &passEnv{t: t, rdb: srv.Client(t), release: make(chan struct{}), clock: &testClock{}}
	reg := NewRegistry()
	reg.Register("hold", func(ctx context.Context, _ *Task) ([]byte, error) {
		<-pe.release
		return nil, nil
	}, FuncOptions{MaxRetries: -1})
	w, err := New(Options{Config: cfg, Redis: pe.rdb, Registry: reg, Now: pe.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	pe.w, pe.q = w, w.queues[0]
	pe.c = client.New(pe.rdb, client.Options{Prefix: prefix})
	t.Cleanup(func() {
		close(pe.release)
		w.pool.close()
		w.pool.wg.Wait()
		w.events.Stop()
		w.poller.reader.Close()
	})
	return pe
}

func (pe *passEnv) enqueue(n int, task client.Task) []string {
	pe.t.Helper()
	var ids []string
	for range n {
		id, _, err := pe.c.Enqueue(context.Background(), task)
		if err != nil {
			pe.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (pe *passEnv) held() int {
	n := 0
	for _, ds := range pe.w.hold.entries() {
		n += len(ds)
	}
	return n
}

// The poller's fetch pass claims queued tasks up to the capacity left and starts them:
// they are held (the heartbeat touches them) until they finish.
func TestPollerRunOnceStartsUpToCapacity(t *testing.T) {
	t.Parallel()
	pe := newPassEnv(t, "DTQ_WORKER_CONCURRENCY", "2")
	pe.enqueue(3, client.Task{Queue: pe.q.Name, Function: "hold"})
	got, err := pe.w.poller.runOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != 2 || pe.held() != 2 || pe.w.Inflight() != 2 {
		t.Fatalf("started %d, held %d, in flight %d; want 2 each (the concurrency)", got, pe.held(), pe.w.Inflight())
	}
	// no capacity left: the next pass starts nothing
	if got, err := pe.w.poller.runOnce(context.Background()); err != nil || got != 0 {
		t.Fatalf("a pass at full capacity started %d (err %v), want 0", got, err)
	}
	if n, _ := pe.rdb.XLen(context.Background(), pe.q.Stream(0)).Result(); n != 3 {
		t.Fatalf("stream length %d, want 3 (two running, one waiting)", n)
	}
}

// The reaper's pass takes over an entry idle past the visibility timeout and starts it
// as a reclaimed execution, and leaves this worker's own entries alone.
func TestReaperRunOnceReclaimsIdleEntries(t *testing.T) {
	t.Parallel()
	pe := newPassEnv(t)
	ctx := context.Background()
	ids := pe.enqueue(1, client.Task{Queue: pe.q.Name, Function: "hold"})
	// a dead worker's claim: the entry sits in its PEL, idle far past the timeout
	other, err := New(Options{Config: pe.w.cfg, Redis: pe.rdb, Registry: pe.w.reg})
	if err != nil {
		t.Fatal(err)
	}
	other.id = "dead-worker"
	if got, err := other.poller.runOnce(ctx); err != nil || got != 1 {
		t.Fatalf("the other worker's claim: %d, %v", got, err)
	}
	other.pool.close() // its executor runs "hold" until the test ends
	entry := taskEntry(t, pe.rdb, pe.q, ids[0])
	if err := pe.rdb.Do(ctx, "XCLAIM", pe.q.Stream(0), keys.Group, "dead-worker", 0, entry, "IDLE", 3_600_000, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := pe.w.reaper.runOnce(ctx)
	if err != nil || got != 1 {
		t.Fatalf("reaper pass: started %d, err %v; want the idle entry reclaimed", got, err)
	}
	if a, _ := pe.rdb.HGet(ctx, pe.q.Task(ids[0]), "attempt").Result(); a != "2" {
		t.Fatalf("attempt %q after the reclaim, want 2", a)
	}
	// its own entry, now held and touched: the next pass takes nothing
	if got, err := pe.w.reaper.runOnce(ctx); err != nil || got != 0 {
		t.Fatalf("second pass: started %d, err %v; want nothing", got, err)
	}
}

func taskEntry(t *testing.T, rdb *redis.Client, q keys.Queue, id string) string {
	t.Helper()
	e, err := rdb.HGet(context.Background(), q.Task(id), "entry").Result()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The scheduler's pass: the first takes the lock and does nothing else; the leader's
// next pass puts due delayed tasks on their stream.
func TestSchedulerRunOnceEnqueuesDueTasks(t *testing.T) {
	t.Parallel()
	pe := newPassEnv(t)
	ctx := context.Background()
	pe.enqueue(2, client.Task{Queue: pe.q.Name, Function: "hold", Delay: time.Minute})
	if err := pe.w.scheduler.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !pe.w.leader.Is() {
		t.Fatal("the pass did not take the free lock")
	}
	if n, _ := pe.rdb.XLen(ctx, pe.q.Stream(0)).Result(); n != 0 {
		t.Fatalf("the acquiring pass enqueued %d, want 0 (work starts at the next pass)", n)
	}
	if err := pe.w.scheduler.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := pe.rdb.XLen(ctx, pe.q.Stream(0)).Result(); n != 0 {
		t.Fatalf("the leader's pass enqueued %d tasks not yet due", n)
	}
	pe.clock.advance(2 * time.Minute)
	if err := pe.w.scheduler.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := pe.rdb.XLen(ctx, pe.q.Stream(0)).Result(); n != 2 {
		t.Fatalf("stream length %d after the leader's pass, want the 2 due tasks", n)
	}
}

// The heartbeat's pass writes the worker's hash and resets the idle clock of the
// entries it holds.
func TestHeartbeatRunOnceWritesAndTouches(t *testing.T) {
	t.Parallel()
	pe := newPassEnv(t)
	ctx := context.Background()
	ids := pe.enqueue(1, client.Task{Queue: pe.q.Name, Function: "hold"})
	if got, err := pe.w.poller.runOnce(ctx); err != nil || got != 1 {
		t.Fatalf("claim: %d, %v", got, err)
	}
	entry := taskEntry(t, pe.rdb, pe.q, ids[0])
	if err := pe.rdb.Do(ctx, "XCLAIM", pe.q.Stream(0), keys.Group, pe.w.id, 0, entry, "IDLE", 3_600_000, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	pe.w.heartbeat.runOnce(ctx)
	st, err := pe.rdb.HGet(ctx, pe.w.ks.Worker(pe.w.id), liveness.FieldStatus).Result()
	if err != nil || st == "" {
		t.Fatalf("heartbeat status %q, err %v: not written", st, err)
	}
	pend, err := pe.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: pe.q.Stream(0), Group: keys.Group, Start: entry, End: entry, Count: 1}).Result()
	if err != nil || len(pend) != 1 {
		t.Fatalf("pending: %v, %v", pend, err)
	}
	if pend[0].Idle >= time.Hour {
		t.Fatalf("entry idle %v after the heartbeat pass, want its clock reset", pend[0].Idle)
	}
}

// The leader takes a free lock, a second candidate does not, and a release hands it on.
func TestLeaderTakeRenewRelease(t *testing.T) {
	t.Parallel()
	a, b := newPassEnv(t), newPassEnv(t)
	b.w.leader.lock = a.w.leader.lock // the same lock, two candidates
	ctx := context.Background()
	if err := lua.Load(ctx, a.rdb); err != nil {
		t.Fatal(err)
	}
	take := func(l *leader, nowMS int64) bool { return takeLock(t, l, nowMS) }
	now := time.Now().UnixMilli()
	if !take(a.w.leader, now) {
		t.Fatal("a did not take the free lock")
	}
	if take(b.w.leader, now) {
		t.Fatal("b took a held lock")
	}
	// a renews once a third of the TTL has passed
	later := now + a.w.leader.ttlMS/3
	if !take(a.w.leader, later) || a.w.leader.lockedAt.Load() != later {
		t.Fatalf("a's renewal: leader %v, locked at %d, want %d", a.w.leader.Is(), a.w.leader.lockedAt.Load(), later)
	}
	a.w.leader.release()
	if a.w.leader.Is() {
		t.Fatal("a still leads after its release")
	}
	if !take(b.w.leader, later) {
		t.Fatal("b did not take the released lock")
	}
}

// takeLock runs l's lock command of one scheduler pass at nowMS and reports whether l
// leads after it.
func takeLock(t *testing.T, l *leader, nowMS int64) bool {
	t.Helper()
	ctx := context.Background()
	p := l.rdb.Pipeline()
	c := l.queue(ctx, p, nowMS)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	l.settle(c, nowMS)
	return l.Is()
}

// rivalLeader is another worker's candidacy for the scheduler lock of w.
func rivalLeader(w *Worker, token string) *leader {
	return &leader{rdb: w.rdb, lock: w.leader.lock, token: token, ttlMS: w.leader.ttlMS, log: w.log,
		gauge: prom.NewGauge(prom.GaugeOpts{Name: "rival"}), notify: func(Event) {}, seen: func(error) {}}
}
