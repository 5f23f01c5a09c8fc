//go:build docker

package lifecycle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/liveness"
)

const (
	evStarted    = "TASK_STARTED"
	evSucceeded  = "TASK_SUCCEEDED"
	evHandedBack = "TASK_HANDED_BACK"
	evFenced     = "TASK_COMPLETION_FENCED"
)

// TestImage: the image runs dtq as the Dockerfile promises: non-root, SIGTERM as stop
// signal, the binary as entrypoint, under the size goal.
func TestImage(t *testing.T) {
	var cfg struct {
		User       string
		StopSignal string
		Entrypoint []string
		Cmd        []string
	}
	out := mustDocker(t, "image", "inspect", "--format", "{{json .Config}}", image)
	if err := jsonUnmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.User != "65532:65532" || cfg.StopSignal != "SIGTERM" || !slices.Equal(cfg.Entrypoint, []string{"/dtq"}) || !slices.Equal(cfg.Cmd, []string{"worker"}) {
		t.Errorf("image config %+v, want user 65532:65532, SIGTERM, entrypoint /dtq, cmd worker", cfg)
	}
	// The image is the four static binaries (dtq, and dtq-scaler and dtq-observer that
	// `dtq scaler` and `dtq observer` exec, and dtq-miniredis that `dtq demo` starts)
	// plus the CA bundle and passwd: under 1 MB beside them, so no base image or build
	// leftovers crept in.
	size, _ := strconv.ParseInt(os.Getenv("DTQ_TEST_IMAGE_SIZE"), 10, 64)
	bin, scaler, observer := binarySize(t, "dtq"), binarySize(t, "dtq-scaler"), binarySize(t, "dtq-observer")
	miniredis := binarySize(t, "dtq-miniredis")
	if size <= 0 || size-bin-scaler-observer-miniredis >= 1_000_000 {
		t.Errorf("image size %d bytes, binaries %d + %d + %d + %d: want the binaries and under 1 MB beside them", size, bin, scaler, observer, miniredis)
	}
	t.Logf("lifecycle: image size %.1f MB: dtq %.1f MB (the worker), dtq-scaler %.1f MB, dtq-observer %.1f MB, dtq-miniredis %.1f MB",
		float64(size)/1e6, float64(bin)/1e6, float64(scaler)/1e6, float64(observer)/1e6, float64(miniredis)/1e6)
	// The one image also serves the scaler (and the CLI).
	out2, err := exec.Command("docker", "run", "--rm", "--label", label(), image, "scaler", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out2), "DTQ_SCALER_ADDR") {
		t.Errorf("dtq scaler --help in the image: %v\n%s", err, out2)
	}
	out3, err := exec.Command("docker", "run", "--rm", "--label", label(), image, "observer", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out3), "DTQ_OBSERVER_TOKEN") {
		t.Errorf("dtq observer --help in the image: %v\n%s", err, out3)
	}
}

// TestStopBusyWorker: `docker stop` (SIGTERM) of a worker with tasks in flight. Tasks
// shorter than the drain timeout finish on it; longer ones are handed back and finish
// on a peer; the worker exits by itself (status 0) within the drain timeout, not by the
// engine's SIGKILL. Nothing is lost, nothing runs twice except what was handed back.
func TestStopBusyWorker(t *testing.T) {
	s := newScenario(t, "stop")
	a := s.start("a")
	short := s.enqueue("sleep", sleepPayload(1500*time.Millisecond), sleepPayload(1500*time.Millisecond))
	long := s.enqueue("sleep", sleepPayload(20*time.Second), sleepPayload(20*time.Second))
	all := append(slices.Clone(short), long...)
	s.waitTasks(10*time.Second, all, "running on "+a.name, func(ti client.TaskInfo) bool {
		return ti.Status == "running" && ti.Worker == a.name
	})
	b := s.start("b")

	begin := time.Now()
	mustDocker(t, "stop", "-t", "30", a.name)
	took := time.Since(begin)
	st := inspect(t, a.name)
	if st.ExitCode != 0 || st.OOMKilled {
		t.Errorf("%s exited with %d (OOM %v): want 0, a drained exit rather than the engine's SIGKILL", a.name, st.ExitCode, st.OOMKilled)
	}
	if took > drain+3*time.Second {
		t.Errorf("docker stop took %v, want the drain timeout %v plus a little", took, drain)
	}
	t.Logf("lifecycle: docker stop of a busy worker took %v (drain timeout %v)", took.Round(time.Millisecond), drain)

	s.waitTasks(40*time.Second, all, "succeeded", func(ti client.TaskInfo) bool { return ti.Status == "succeeded" })
	evs := s.events()
	for _, id := range short {
		ti := s.task(id)
		if ti.Worker != a.name || ti.Attempt != 1 || count(evs, evStarted, id, "") != 1 {
			t.Errorf("short task %s: worker %s attempt %d, %d starts; want it finished by %s during the drain, started once",
				id, ti.Worker, ti.Attempt, count(evs, evStarted, id, ""), a.name)
		}
	}
	for _, id := range long {
		ti := s.task(id)
		if ti.Worker != b.name || count(evs, evHandedBack, id, a.name) != 1 || count(evs, evStarted, id, "") != 2 {
			t.Errorf("long task %s: worker %s attempt %d, %d hand-backs by %s, %d starts; want handed back once and finished by %s",
				id, ti.Worker, ti.Attempt, count(evs, evHandedBack, id, a.name), a.name, count(evs, evStarted, id, ""), b.name)
		}
	}
}

// TestKillBusyWorker: `docker kill` (SIGKILL, no drain) of a worker with tasks in
// flight. A peer takes them over once the visibility timeout has passed since the last
// heartbeat touched them, and finishes them; the dead worker's heartbeat goes stale.
func TestKillBusyWorker(t *testing.T) {
	s := newScenario(t, "kill")
	a := s.start("a")
	// Long enough to be still running when the peer is up and the kill lands.
	ids := s.enqueue("sleep", sleepPayload(8*time.Second), sleepPayload(8*time.Second))
	s.waitTasks(10*time.Second, ids, "running on "+a.name, func(ti client.TaskInfo) bool {
		return ti.Status == "running" && ti.Worker == a.name
	})
	b := s.start("b")
	if l := s.livenessOf(a.name); l != liveness.Live {
		t.Fatalf("%s is %s before the kill", a.name, l)
	}
	for _, id := range ids {
		if ti := s.task(id); ti.Status != "running" || ti.Worker != a.name {
			t.Fatalf("task %s is %s on %s before the kill: the peer took too long to start", id, ti.Status, ti.Worker)
		}
	}

	killed := time.Now()
	mustDocker(t, "kill", a.name)
	if st := inspect(t, a.name); st.ExitCode != 137 {
		t.Errorf("%s exit code %d after docker kill, want 137 (SIGKILL)", a.name, st.ExitCode)
	}
	if err := waitFor(liveness.StaleFactor*heartbeat+2*time.Second, func() error {
		if l := s.livenessOf(a.name); l != liveness.Stale {
			return fmt.Errorf("%s is %s", a.name, l)
		}
		return nil
	}); err != nil {
		t.Errorf("heartbeat of the killed worker did not go stale: %v", err)
	}
	stale := time.Since(killed)

	s.waitTasks(40*time.Second, ids, "succeeded by "+b.name, func(ti client.TaskInfo) bool {
		return ti.Status == "succeeded" && ti.Worker == b.name
	})
	evs := s.events()
	for _, id := range ids {
		ti := s.task(id)
		if ti.Attempt != 2 || count(evs, evStarted, id, a.name) != 1 || count(evs, evStarted, id, b.name) != 1 {
			t.Errorf("task %s: attempt %d, starts by %s %d, by %s %d; want one each", id, ti.Attempt,
				a.name, count(evs, evStarted, id, a.name), b.name, count(evs, evStarted, id, b.name))
		}
		// Taken over only once the entry sat a visibility timeout untouched: the last
		// touch was at most one heartbeat before the kill.
		if after := time.UnixMilli(ti.StartedAt).Sub(killed); after < visibility-heartbeat-200*time.Millisecond {
			t.Errorf("task %s restarted %v after the kill, before the visibility timeout (%v) could pass", id, after, visibility)
		} else {
			t.Logf("lifecycle: killed worker's task %s restarted on a peer %v after SIGKILL", id, after.Round(time.Millisecond))
		}
	}
	if l := s.livenessOf(a.name); l != liveness.Stale {
		t.Errorf("%s is %s at the end, want stale", a.name, l)
	}
	t.Logf("lifecycle: killed worker stale after %v", stale.Round(time.Millisecond))
}

// TestPartitionedWorkerIsFenced: `docker network disconnect` of a busy worker for longer
// than the visibility timeout. A peer takes its task over and finishes it; when the cut
// off worker is reconnected its late completion is fenced off (TASK_COMPLETION_FENCED),
// the peer's outcome stands, and no other task runs twice.
func TestPartitionedWorkerIsFenced(t *testing.T) {
	s := newScenario(t, "partition")
	a := s.start("a")
	x := s.enqueue("sleep", sleepPayload(6*time.Second))[0]
	s.waitTasks(10*time.Second, []string{x}, "running on "+a.name, func(ti client.TaskInfo) bool {
		return ti.Status == "running" && ti.Worker == a.name
	})
	b := s.start("b")

	mustDocker(t, "network", "disconnect", network, a.name)
	s.waitTasks(visibility+10*time.Second, []string{x}, "running on "+b.name, func(ti client.TaskInfo) bool {
		return ti.Status == "running" && ti.Worker == b.name && ti.Attempt == 2
	})
	mustDocker(t, "network", "connect", network, a.name)
	// Work that arrives after the cut: each runs once, on either worker.
	others := s.enqueue("sleep", sleepPayload(200*time.Millisecond), sleepPayload(200*time.Millisecond),
		sleepPayload(200*time.Millisecond), sleepPayload(200*time.Millisecond))

	if err := waitFor(30*time.Second, func() error {
		if count(s.events(), evFenced, x, a.name) != 1 {
			return fmt.Errorf("no %s of task %s from %s yet", evFenced, x, a.name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(30*time.Second, append([]string{x}, others...), "succeeded", func(ti client.TaskInfo) bool { return ti.Status == "succeeded" })
	evs := s.events()
	ti := s.task(x)
	if ti.Worker != b.name || ti.Attempt != 2 || count(evs, evSucceeded, x, a.name) != 0 || count(evs, evSucceeded, x, b.name) != 1 {
		t.Errorf("task %s: worker %s attempt %d, succeeded by %s %d times, by %s %d times; want the peer's outcome only",
			x, ti.Worker, ti.Attempt, a.name, count(evs, evSucceeded, x, a.name), b.name, count(evs, evSucceeded, x, b.name))
	}
	for _, id := range others {
		if n, ti := count(evs, evStarted, id, ""), s.task(id); n != 1 || ti.Attempt != 1 {
			t.Errorf("task %s started %d times (attempt %d), want once", id, n, ti.Attempt)
		}
	}
}

// TestRollingRestartUnderLoad: every worker is replaced in turn (SIGTERM, a new
// container with a new id, wait until it is ready) while tasks keep arriving. Every
// task succeeds; a task runs more than once only if a draining worker handed it back.
func TestRollingRestartUnderLoad(t *testing.T) {
	s := newScenario(t, "roll")
	ws := []*worker{s.start("w1"), s.start("w2"), s.start("w3")}

	var (
		mu  sync.Mutex
		ids []string
	)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // the producer: a batch of 10 short tasks every 50 ms
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ts := make([]client.Task, 10)
			for i := range ts {
				ts[i] = client.Task{Queue: queue, Function: "sleep", MaxRetries: client.Retries(retries),
					Payload: []byte(sleepPayload(time.Duration(20+rand.IntN(200)) * time.Millisecond))}
			}
			res, err := s.cl.EnqueueMany(ctx, ts)
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			mu.Lock()
			for _, r := range res {
				if r.Err == nil {
					ids = append(ids, r.ID)
				}
			}
			mu.Unlock()
		}
	}()

	for i, w := range ws {
		mustDocker(t, "stop", "-t", "30", w.name)
		if st := inspect(t, w.name); st.ExitCode != 0 {
			t.Errorf("%s exited with %d, want 0", w.name, st.ExitCode)
		}
		ws[i] = s.start(fmt.Sprintf("w%d-new", i+1))
	}
	stop()
	<-done

	mu.Lock()
	all := slices.Clone(ids)
	mu.Unlock()
	if len(all) < 100 {
		t.Fatalf("only %d tasks enqueued during the restart", len(all))
	}
	s.waitTasks(60*time.Second, all, "succeeded", func(ti client.TaskInfo) bool { return ti.Status == "succeeded" })
	evs := s.events()
	handedBack := 0
	for _, id := range all {
		hb := count(evs, evHandedBack, id, "")
		handedBack += hb
		if n := count(evs, evStarted, id, ""); n > 1+hb {
			t.Errorf("task %s started %d times with %d hand-backs", id, n, hb)
		}
	}
	t.Logf("lifecycle: rolling restart of 3 workers: %d tasks enqueued under load, all succeeded, %d handed back", len(all), handedBack)
}

// TestColdStart: `docker run` of a worker with a task already waiting, to that task
// done; the median of several runs goes in deploy/README.md.
func TestColdStart(t *testing.T) {
	const runs = 7
	var total, inProcess []time.Duration
	for i := range runs {
		s := newScenario(t, "cold"+strconv.Itoa(i))
		id := s.enqueue("noop", "")[0]
		begin := time.Now()
		w := s.runWith(false, "w") // no published port: nothing but the worker itself to start
		s.waitTasks(30*time.Second, []string{id}, "succeeded", func(ti client.TaskInfo) bool { return ti.Status == "succeeded" })
		ti := s.task(id)
		done := time.UnixMilli(ti.FinishedAt)
		total = append(total, done.Sub(begin))
		inProcess = append(inProcess, done.Sub(inspect(t, w.name).StartedAt))
		mustDocker(t, "rm", "-f", w.name)
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	t.Logf("lifecycle: cold start, docker run -> first task done: median %v (min %v, max %v, n=%d); container start -> task done: median %v",
		med(total).Round(time.Millisecond), slices.Min(total).Round(time.Millisecond), slices.Max(total).Round(time.Millisecond), runs,
		med(inProcess).Round(time.Millisecond))
	if med(total) > 10*time.Second {
		t.Errorf("cold start median %v, want seconds at most", med(total))
	}
}

// binarySize is the size of /name in the image.
func binarySize(t *testing.T, name string) int64 {
	t.Helper()
	id := mustDocker(t, "create", "--label", label(), image)
	defer func() { _, _ = docker("rm", "-f", id) }()
	dir := t.TempDir()
	mustDocker(t, "cp", id+":/"+name, dir)
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
