package observer_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/observer"
)

// staleEvents counts the WORKER_STALE events of each worker, checking their fields.
func staleEvents(t *testing.T, rdb *redis.Client, ks keys.Space) map[string]int {
	t.Helper()
	es, err := rdb.XRange(context.Background(), ks.Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range es {
		if e.Values["type"] != string(keys.EventWorkerStale) {
			continue
		}
		id, _ := e.Values["worker"].(string)
		n[id]++
		if ts, _ := e.Values["ts"].(string); ts == "" || !strings.Contains(e.Values["detail"].(string), "heartbeat") {
			t.Errorf("WORKER_STALE fields %v", e.Values)
		}
	}
	return n
}

// watchers starts n stale watchers on srv under ks, each with a client of its own (as
// n observer replicas), each every 50 ms.
func watchers(t *testing.T, srv *redistest.Server, ks keys.Space, n int, log *syncbuf.Buffer) []*observer.StaleWatcher {
	t.Helper()
	ws := make([]*observer.StaleWatcher, n)
	for i := range ws {
		ws[i] = observer.NewStaleWatcher(observer.StaleOptions{Redis: srv.Client(t), KeyPrefix: ks.Prefix(), Every: observer.MinStaleEvery,
			MaxLen: 10000, Logger: slog.New(slog.NewJSONHandler(log, nil))})
		if err := ws[i].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ws[i].Stop)
	}
	return ws
}

// morePasses waits until every watcher completed k more passes than now: whatever
// Redis held now, each of them judged it since.
func morePasses(t *testing.T, ws []*observer.StaleWatcher, k int64) {
	t.Helper()
	base := make([]int64, len(ws))
	for i, w := range ws {
		base[i] = w.Passes()
	}
	eventually(t, "more watcher passes", func() bool {
		for i, w := range ws {
			if w.Passes() < base[i]+k {
				return false
			}
		}
		return true
	})
}

// workerProc is one `dtq worker` process.
type workerProc struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process exited, with err
	err    error
	stderr *syncbuf.Buffer
}

func startWorkerProcess(t *testing.T, bin, url, prefix, id string) *workerProc {
	t.Helper()
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+url, "DTQ_KEY_PREFIX="+prefix, "DTQ_WORKER_ID="+id,
		"DTQ_HEARTBEAT_INTERVAL_S=0.2", "DTQ_QUEUES=stale-q", "PORT=0", "DTQ_LOG_FORMAT=json", "DTQ_DRAIN_TIMEOUT_S=5",
		"DTQ_POLL_BLOCK_MS=200")
	p := &workerProc{id: id, cmd: cmd, exited: make(chan struct{}), stderr: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s:\n%s", id, p.stderr.String())
		}
	})
	return p
}

func judge(t *testing.T, rdb *redis.Client, ks keys.Space, id string) (liveness.Liveness, bool) {
	t.Helper()
	ws, err := liveness.List(context.Background(), rdb, ks, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w.Liveness, true
		}
	}
	return "", false
}

// Three observers' watchers against real worker processes: a worker killed with -9 is
// published stale exactly once; one stopped with SIGTERM never; one frozen past the
// threshold once, and once more when it goes stale again after it resumed.
func TestStaleWatchersWithWorkerProcesses(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "dtq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/dtq/dtq/cmd/dtq").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ks := keys.New(redistest.Prefix(t))
	log := &syncbuf.Buffer{}
	ws := watchers(t, srv, ks, 3, log)

	killed := startWorkerProcess(t, bin, srv.URL(), ks.Prefix(), "w-killed")
	termed := startWorkerProcess(t, bin, srv.URL(), ks.Prefix(), "w-termed")
	frozen := startWorkerProcess(t, bin, srv.URL(), ks.Prefix(), "w-frozen")
	for _, p := range []*workerProc{killed, termed, frozen} {
		eventually(t, p.id+" live", func() bool { l, _ := judge(t, rdb, ks, p.id); return l == liveness.Live })
	}
	morePasses(t, ws, 2) // the watchers saw them live

	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := termed.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	<-termed.exited
	if termed.err != nil {
		t.Fatalf("SIGTERM: the worker exited with %v", termed.err)
	}
	eventually(t, "WORKER_STALE of the killed and the frozen worker", func() bool {
		n := staleEvents(t, rdb, ks)
		return n["w-killed"] >= 1 && n["w-frozen"] >= 1
	})
	// past the threshold for the stopped worker: its record expired, and every watcher
	// judged the expired id since
	eventually(t, "the stopped worker's record expired", func() bool {
		n, err := rdb.Exists(context.Background(), ks.Worker("w-termed")).Result()
		return err == nil && n == 0
	})
	morePasses(t, ws, 3)
	if n := staleEvents(t, rdb, ks); n["w-killed"] != 1 || n["w-frozen"] != 1 || n["w-termed"] != 0 {
		t.Fatalf("WORKER_STALE per worker: %v; want w-killed 1, w-frozen 1, w-termed 0", n)
	}

	// the frozen worker resumes: live again (the watchers clear its marker), then killed
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the resumed worker live and its marker cleared", func() bool {
		l, _ := judge(t, rdb, ks, "w-frozen")
		n, err := rdb.Exists(context.Background(), ks.StaleMark("w-frozen")).Result()
		return l == liveness.Live && err == nil && n == 0
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second WORKER_STALE of the resumed worker", func() bool { return staleEvents(t, rdb, ks)["w-frozen"] >= 2 })
	morePasses(t, ws, 3)
	n := staleEvents(t, rdb, ks)
	if n["w-killed"] != 1 || n["w-frozen"] != 2 || n["w-termed"] != 0 {
		t.Fatalf("WORKER_STALE per worker: %v; want w-killed 1, w-frozen 2, w-termed 0", n)
	}
	var published int64
	for _, w := range ws {
		published += w.Published()
	}
	if published != 3 {
		t.Fatalf("the watchers published %d events, want 3", published)
	}
}

// A worker record of another type is skipped and logged, once; the other workers are
// still judged.
func TestStaleWatcherSkipsAnUnreadableRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ks := keys.New(redistest.Prefix(t))
	ctx := context.Background()
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	rdb.SAdd(ctx, ks.Workers(), "a-bad", "b-old", "c-gone", "d-bad-mark")
	rdb.Set(ctx, ks.Worker("a-bad"), "not a hash", 0)
	rdb.HSet(ctx, ks.Worker("b-old"), liveness.FieldLastHeartbeat, old, liveness.FieldStatus, "busy", liveness.FieldIntervalMS, 1000)
	rdb.HSet(ctx, ks.Worker("d-bad-mark"), liveness.FieldLastHeartbeat, old, liveness.FieldStatus, "busy")
	rdb.HSet(ctx, ks.StaleMark("d-bad-mark"), "x", "y")
	log := &syncbuf.Buffer{}
	w := observer.NewStaleWatcher(observer.StaleOptions{Redis: rdb, KeyPrefix: ks.Prefix(), MaxLen: 100,
		Logger: slog.New(slog.NewJSONHandler(log, nil))})
	for range 2 {
		if err := w.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := staleEvents(t, rdb, ks); n["b-old"] != 1 || n["c-gone"] != 1 || len(n) != 2 {
		t.Fatalf("WORKER_STALE per worker: %v; want b-old 1, c-gone 1", n)
	}
	for _, id := range []string{"a-bad", "d-bad-mark"} {
		if c := strings.Count(log.String(), `"worker":"`+id+`"`); c != 1 {
			t.Fatalf("%s logged %d times, want once:\n%s", id, c, log.String())
		}
	}
	if w.Passes() != 2 || w.Published() != 2 {
		t.Fatalf("passes %d, published %d", w.Passes(), w.Published())
	}
}

// Events off (DTQ_EVENTS_MAXLEN=0): the watcher starts nothing and writes nothing.
func TestStaleWatcherOffWithoutEvents(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ks := keys.New(redistest.Prefix(t))
	rdb.SAdd(context.Background(), ks.Workers(), "gone")
	w := observer.NewStaleWatcher(observer.StaleOptions{Redis: rdb, KeyPrefix: ks.Prefix()})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("the watcher runs with the events off")
	}
	w.Stop()
	w.Stop()
	if n, _ := rdb.Exists(context.Background(), ks.Events()).Result(); n != 0 {
		t.Fatal("the watcher wrote events")
	}
}

// The new variables refuse what they cannot take, naming themselves.
func TestStreamAndStaleConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value, says string }{
		{"DTQ_OBSERVER_STALE_CHECK_S", "0.01", "at least 0.05"},
		{"DTQ_OBSERVER_STALE_CHECK_S", "61", "0..60"},
		{"DTQ_OBSERVER_STALE_CHECK_S", "soon", "DTQ_OBSERVER_STALE_CHECK_S"},
		{"DTQ_OBSERVER_MAX_STREAMS", "0", "1..10000"},
		{"DTQ_OBSERVER_MAX_STREAMS", "10001", "1..10000"},
		{"DTQ_EVENTS_MAXLEN", "-1", "0..100000000"},
	} {
		_, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{tc.name: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s=%s: %v, want an error naming it and saying %q", tc.name, tc.value, err, tc.says)
		}
	}
	for _, v := range []string{"0", "0.05", "60"} {
		if _, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_OBSERVER_STALE_CHECK_S": v})); err != nil {
			t.Errorf("DTQ_OBSERVER_STALE_CHECK_S=%s: %v", v, err)
		}
	}
}
