package runtime

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// testClock is a worker's clock that a test moves forward.
type testClock struct{ off atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// passWorker is a worker whose scheduler passes a test runs one by one (no Run).
type passWorker struct {
	*Worker
	t     *testing.T
	rdb   *redis.Client
	clock *testClock
	mu    sync.Mutex
	evs   []Event
}

func newPassWorker(t *testing.T, queues string, env ...string) *passWorker {
	t.Helper()
	return newPassWorkerOn(t, redistest.Shared(t), queues, env...)
}

func newPassWorkerOn(t *testing.T, srv *redistest.Server, queues string, env ...string) *passWorker {
	t.Helper()
	m := map[string]string{"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t), "DTQ_QUEUES": queues,
		"DTQ_EVENTS_MAXLEN": "0"}
	for i := 0; i+1 < len(env); i += 2 {
		m[env[i]] = env[i+1]
	}
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(m))
	if err != nil {
		t.Fatal(err)
	}
	pw := &passWorker{t: t, rdb: srv.Client(t), clock: &testClock{}}
	w, err := New(Options{Config: cfg, Redis: pw.rdb, Registry: NewRegistry(), Now: pw.clock.now, Observe: func(e Event) {
		pw.mu.Lock()
		pw.evs = append(pw.evs, e)
		pw.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.events.Stop)
	pw.Worker = w
	if err := lua.Load(context.Background(), pw.rdb); err != nil {
		t.Fatal(err)
	}
	return pw
}

// pass runs one scheduler pass, which must not fail.
func (pw *passWorker) pass() {
	pw.t.Helper()
	if err := pw.scheduler.runOnce(context.Background()); err != nil {
		pw.t.Fatalf("scheduler pass: %v", err)
	}
}

// lead makes the worker the scheduler leader (a pass that takes the lock does no work).
func (pw *passWorker) lead() {
	pw.t.Helper()
	pw.pass()
	if !pw.leader.Is() {
		pw.t.Fatal("the worker did not take the free scheduler lock")
	}
}

// addDead writes n dead records of queue q as the completion does, died at diedMS+i.
func (pw *passWorker) addDead(q keys.Queue, from, n int, diedMS int64) {
	pw.t.Helper()
	ctx := context.Background()
	p := pw.rdb.Pipeline()
	for i := from; i < from+n; i++ {
		id := "t" + strconv.Itoa(i)
		p.HSet(ctx, q.Task(id), "id", id, "queue", q.Name, "function", "f", "status", "dead", "error", "boom",
			"attempt", 1, "failures", 1, "finished_at", diedMS+int64(i), "unique", "u"+id)
		p.Set(ctx, q.Unique("u"+id), id, 0)
		p.ZAdd(ctx, q.Dead(), redis.Z{Score: float64(diedMS + int64(i)), Member: id})
	}
	if _, err := p.Exec(ctx); err != nil {
		pw.t.Fatal(err)
	}
}

func (pw *passWorker) dead(q keys.Queue) int64 {
	pw.t.Helper()
	n, err := pw.rdb.ZCard(context.Background(), q.Dead()).Result()
	if err != nil {
		pw.t.Fatal(err)
	}
	return n
}

func (pw *passWorker) trimmedStat(q keys.Queue) string {
	v, _ := pw.rdb.HGet(context.Background(), q.Stats(), keys.StatDeadTrimmed).Result()
	return v
}

// metric reads dtq_worker_dead_trimmed_total of queue q off /metrics (0 when absent).
func (pw *passWorker) metric(q keys.Queue) float64 {
	pw.t.Helper()
	rec := httptest.NewRecorder()
	pw.Handler().ServeHTTP(rec, httptest.NewRequest("GET", PathMetrics, nil))
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, `dtq_worker_dead_trimmed_total{queue="`+q.Name+`"`) {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				pw.t.Fatalf("metric line %q: %v", l, err)
			}
			return v
		}
	}
	return 0
}

// trimEvents lists the Detail of the DEAD_TASKS_TRIMMED events of queue q.
func (pw *passWorker) trimEvents(q keys.Queue) []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []string
	for _, e := range pw.evs {
		if e.Type == EventDeadTrimmed && e.Queue == q.Name {
			out = append(out, e.Detail)
		}
	}
	return out
}

// Only the scheduler leader trims: not a worker whose lock another holds, nor a leader
// whose renewal failed in this pass; the leader's pass does, and counts it in the stats
// hash, its metric and an event.
func TestRetentionOnlyTheLeaderTrims(t *testing.T) {
	t.Parallel()
	pw := newPassWorker(t, "qa", "DTQ_DEAD_MAX", "1")
	ctx := context.Background()
	q := pw.queues[0]
	pw.addDead(q, 0, 3, pw.clock.now().UnixMilli())
	rival := rivalLeader(pw.Worker, "another-worker")
	if err := lua.Load(ctx, pw.rdb); err != nil {
		t.Fatal(err)
	}
	if !takeLock(t, rival, pw.clock.now().UnixMilli()) {
		t.Fatal("the rival did not take the free lock")
	}
	for range 3 {
		pw.pass()
	}
	if n := pw.dead(q); pw.leader.Is() || n != 3 || pw.trimmedStat(q) != "" || pw.metric(q) != 0 {
		t.Fatalf("a worker that does not lead: leader %v, %d dead, stat %q, metric %v; want nothing trimmed",
			pw.leader.Is(), n, pw.trimmedStat(q), pw.metric(q))
	}

	// the lock frees: the worker leads, and its first pass as leader trims
	rival.release()
	pw.lead()
	pw.pass()
	if n := pw.dead(q); n != 1 || pw.trimmedStat(q) != "2" || pw.metric(q) != 2 {
		t.Fatalf("the leader's pass: %d dead, stat %q, metric %v; want 1 kept, 2 trimmed", n, pw.trimmedStat(q), pw.metric(q))
	}
	if ev := pw.trimEvents(q); len(ev) != 1 || ev[0] != "2" {
		t.Fatalf("trim events %v, want one of 2", ev)
	}
	for i := range 2 {
		id := "t" + strconv.Itoa(i)
		if pw.rdb.Exists(ctx, q.Task(id), q.Unique("u"+id)).Val() != 0 {
			t.Fatalf("the record or unique key of trimmed %s is left", id)
		}
	}

	// another worker takes the lock: the renewal of the next pass fails, and that pass
	// does not trim, though a sweep is due
	pw.addDead(q, 10, 3, pw.clock.now().UnixMilli())
	pw.rdb.Set(ctx, pw.ks.SchedulerLock(), "another-worker", time.Minute)
	pw.clock.advance(deadTrimEvery)
	pw.pass()
	if n := pw.dead(q); pw.leader.Is() || n != 4 {
		t.Fatalf("a pass whose renewal failed: leader %v, %d dead; want the lock lost and 4 dead kept", pw.leader.Is(), n)
	}
}

// The age bound follows the worker's clock; the leader looks at every queue once every
// deadTrimEvery, not at every pass.
func TestRetentionTrimsByAgeEveryInterval(t *testing.T) {
	t.Parallel()
	pw := newPassWorker(t, "qa", "DTQ_DEAD_TTL_S", "3600", "DTQ_DEAD_MAX", "100")
	q := pw.queues[0]
	pw.addDead(q, 0, 3, pw.clock.now().UnixMilli()-10_000)
	pw.lead()
	pw.pass() // the first sweep: all within the bounds
	if n := pw.dead(q); n != 3 {
		t.Fatalf("%d dead after the first sweep, want 3 (younger than the TTL)", n)
	}
	pw.clock.advance(3600 * time.Second)
	pw.addDead(q, 3, 1, pw.clock.now().UnixMilli()) // one that just died
	pw.pass()
	if n := pw.dead(q); n != 1 || pw.trimmedStat(q) != "3" {
		t.Fatalf("an hour later: %d dead, stat %q; want the 3 past the TTL trimmed", n, pw.trimmedStat(q))
	}

	// over the count bound between sweeps: nothing until deadTrimEvery has passed
	pw.Worker.cfg.DeadMax = 1
	pw.addDead(q, 10, 2, pw.clock.now().UnixMilli())
	pw.pass()
	pw.clock.advance(deadTrimEvery - time.Second)
	pw.pass()
	if n := pw.dead(q); n != 3 {
		t.Fatalf("%d dead within the interval, want 3: no sweep before it ends", n)
	}
	pw.clock.advance(time.Second)
	pw.pass()
	if n := pw.dead(q); n != 1 || pw.trimmedStat(q) != "5" {
		t.Fatalf("at the interval's end: %d dead, stat %q; want 1 kept, 5 trimmed in all", n, pw.trimmedStat(q))
	}
}

// A pass deletes at most deadTrimRounds × deadTrimBatch of a queue; the rest goes in the
// next passes, without waiting for the next sweep.
func TestRetentionWorksOffABacklogOverPasses(t *testing.T) {
	t.Parallel()
	pw := newPassWorker(t, "qa", "DTQ_DEAD_MAX", "1")
	q := pw.queues[0]
	perPass := deadTrimRounds * deadTrimBatch
	pw.addDead(q, 0, perPass+deadTrimBatch+1, pw.clock.now().UnixMilli())
	pw.lead()
	pw.pass()
	if n := pw.dead(q); n != int64(deadTrimBatch+1) {
		t.Fatalf("%d dead after one pass, want %d: one pass deletes %d", n, deadTrimBatch+1, perPass)
	}
	pw.pass() // no time passed: the backlog alone brings the queue back
	if n := pw.dead(q); n != 1 {
		t.Fatalf("%d dead after the second pass, want 1", n)
	}
	pw.pass()
	want := []string{strconv.Itoa(perPass), strconv.Itoa(deadTrimBatch)}
	if ev := pw.trimEvents(q); fmt.Sprint(ev) != fmt.Sprint(want) || pw.metric(q) != float64(perPass+deadTrimBatch) {
		t.Fatalf("trim events %v, metric %v; want %v, one a pass, and %d", ev, pw.metric(q), want, perPass+deadTrimBatch)
	}
}

// A queue whose keys Redis refuses (a dead set or a stats hash of another type) is left
// out for a while; the pass goes on, and every other queue is trimmed.
func TestRetentionWrongTypeKeysSpareOtherQueues(t *testing.T) {
	t.Parallel()
	pw := newPassWorker(t, "qa,qb,qc", "DTQ_DEAD_MAX", "1")
	ctx := context.Background()
	qa, qb, qc := pw.queues[0], pw.queues[1], pw.queues[2]
	now := pw.clock.now().UnixMilli()
	pw.rdb.Set(ctx, qa.Dead(), "not a zset", 0)
	pw.addDead(qb, 0, 3, now)
	pw.addDead(qc, 0, 3, now)
	pw.rdb.Set(ctx, qc.Stats(), "not a hash", 0)
	pw.lead()
	pw.pass()
	if n := pw.dead(qb); n != 1 || pw.metric(qb) != 2 {
		t.Fatalf("the sound queue: %d dead, metric %v; want it trimmed", n, pw.metric(qb))
	}
	if n := pw.dead(qc); n != 3 {
		t.Fatalf("the queue with a broken stats hash: %d dead, want all 3 kept", n)
	}
	if !pw.scheduler.retention.faults.skip(qa.Name) || !pw.scheduler.retention.faults.skip(qc.Name) || pw.scheduler.retention.faults.skip(qb.Name) {
		t.Fatal("the broken queues are not left out, or the sound one is")
	}
}

// The leader trims every known queue, the ones no worker of its own serves included,
// from its first pass as leader.
func TestRetentionTrimsEveryKnownQueue(t *testing.T) {
	t.Parallel()
	pw := newPassWorker(t, "qa", "DTQ_DEAD_MAX", "1")
	other := pw.ks.Queue("served-elsewhere")
	pw.rdb.SAdd(context.Background(), pw.ks.Queues(), other.Name)
	pw.addDead(other, 0, 4, pw.clock.now().UnixMilli())
	pw.lead()
	pw.pass()
	if n := pw.dead(other); n != 1 || pw.trimmedStat(other) != "3" {
		t.Fatalf("a queue the leader does not serve: %d dead, stat %q; want it trimmed", n, pw.trimmedStat(other))
	}
}

// Redis lost its script cache (a restart) between the pass's pipeline and the trim: the
// trim loads its script and trims in the same pass.
func TestRetentionReloadsLostScripts(t *testing.T) {
	t.Parallel()
	pw := newPassWorkerOn(t, redistest.Start(t, redistest.Options{}), "qa", "DTQ_DEAD_MAX", "1")
	q := pw.queues[0]
	pw.addDead(q, 0, 3, pw.clock.now().UnixMilli())
	pw.lead()
	if err := pw.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	pw.scheduler.trimDead(context.Background())
	if n := pw.dead(q); n != 1 {
		t.Fatalf("%d dead after the trim that found no script, want 1", n)
	}
}
