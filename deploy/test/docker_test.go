//go:build docker

// Package lifecycle runs the dtq image as containers beside a Redis container on a
// private network and checks, through Redis, what happens to tasks when workers are
// stopped, killed, cut off and rolled. deploy/test/run.sh builds the images and runs it;
// it needs the build tag "docker", so a plain `go test ./...` does not compile it (and
// cannot pass without an engine).
package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
)

// Short timeouts, so every scenario takes seconds: a silent worker's tasks are taken
// over after 3 s, heartbeats every 1 s (stale after 3 s), SIGTERM drains for 4 s.
const (
	visibility  = 3 * time.Second
	heartbeat   = 1 * time.Second
	drain       = 4 * time.Second
	concurrency = 4
	// A worker lost mid-task costs its task an attempt; two spare attempts cover the
	// one the kill and partition scenarios take.
	retries = 2
	queue   = "q"
)

var (
	image      = os.Getenv("DTQ_TEST_IMAGE")
	redisImage = os.Getenv("DTQ_TEST_REDIS_IMAGE")
	runID      = os.Getenv("DTQ_TEST_RUN")

	network   string // the run's private network
	redisAddr string // 127.0.0.1:port published by the Redis container
)

func TestMain(m *testing.M) {
	if image == "" || redisImage == "" || runID == "" {
		fmt.Fprintln(os.Stderr, "lifecycle: DTQ_TEST_IMAGE, DTQ_TEST_REDIS_IMAGE and DTQ_TEST_RUN are not set: run deploy/test/run.sh, which builds the images")
		os.Exit(2)
	}
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle: setup:", err)
		code = 1
	} else {
		code = m.Run()
	}
	teardown()
	os.Exit(code)
}

func label() string { return "dtq.test.run=" + runID }

// setup makes the run's network and Redis container.
func setup() (int, error) {
	network = "dtq-test-" + runID
	if _, err := docker("network", "create", "--label", label(), network); err != nil {
		return 1, err
	}
	name := network + "-redis"
	if _, err := docker("run", "-d", "--name", name, "--label", label(), "--network", network,
		"--network-alias", "redis", "-p", "127.0.0.1::6379", redisImage); err != nil {
		return 1, err
	}
	out, err := docker("port", name, "6379/tcp")
	if err != nil {
		return 1, err
	}
	redisAddr = strings.TrimSpace(strings.Split(out, "\n")[0])
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	err = waitFor(10*time.Second, func() error { return rdb.Ping(context.Background()).Err() })
	return 0, err
}

// teardown removes what setup and the tests made (run.sh does it again on exit).
func teardown() {
	if out, err := docker("ps", "-aq", "--filter", "label="+label()); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = docker("rm", "-f", id)
		}
	}
	_, _ = docker("network", "rm", network)
}

// docker runs the docker CLI and returns its standard output.
func docker(args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor polls cond every 20 ms until it returns nil or the deadline passes.
func waitFor(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		<-tick.C
	}
}

// scenario is one test's key space (its own prefix on the shared Redis) and workers.
type scenario struct {
	t      *testing.T
	name   string
	prefix string
	rdb    *redis.Client
	cl     *client.Client
	ks     keys.Space
}

func newScenario(t *testing.T, name string) *scenario {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { rdb.Close() })
	prefix := "lc-" + name
	return &scenario{t: t, name: name, prefix: prefix, rdb: rdb,
		cl: client.New(rdb, client.Options{Prefix: prefix}), ks: keys.New(prefix)}
}

// worker is one dtq worker container.
type worker struct {
	name string // container name = DTQ_WORKER_ID
	http string // 127.0.0.1:port of its PORT
}

// start runs a worker container and waits until it reports ready on /readyz.
func (s *scenario) start(id string, env ...string) *worker {
	t := s.t
	t.Helper()
	w := s.run(id, env...)
	if err := waitFor(20*time.Second, w.ready); err != nil {
		t.Fatalf("%s: not ready: %v\n%s", w.name, err, logs(w.name))
	}
	return w
}

// run starts a worker container without waiting for it.
func (s *scenario) run(id string, env ...string) *worker { return s.runWith(true, id, env...) }

// runWith starts a worker container, publishing its HTTP port on loopback if publish.
func (s *scenario) runWith(publish bool, id string, env ...string) *worker {
	t := s.t
	t.Helper()
	name := fmt.Sprintf("dtq-test-%s-%s-%s", runID, s.name, id)
	// Locked down as the manifests run it: read-only root filesystem, no capabilities,
	// no privilege escalation (the image's user is non-root already).
	args := []string{"run", "-d", "--name", name, "--label", label(), "--network", network,
		"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}
	if publish {
		args = append(args, "-p", "127.0.0.1::8080")
	}
	args = append(args,
		"-e", "DTQ_REDIS_URL=redis://redis:6379/0",
		"-e", "DTQ_KEY_PREFIX="+s.prefix,
		"-e", "DTQ_QUEUES="+queue,
		"-e", "DTQ_WORKER_ID="+name,
		"-e", "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(concurrency),
		"-e", "DTQ_VISIBILITY_TIMEOUT_S="+secs(visibility),
		"-e", "DTQ_HEARTBEAT_INTERVAL_S="+secs(heartbeat),
		"-e", "DTQ_DRAIN_TIMEOUT_S="+secs(drain),
		"-e", "DTQ_POLL_BLOCK_MS=1000",
		"-e", "DTQ_EVENTS_VERBOSE=true",
		"-e", "DTQ_LOG_FORMAT=json",
	)
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, image, "worker")
	mustDocker(t, args...)
	w := &worker{name: name}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, logs(name))
		}
		_, _ = docker("rm", "-f", name)
	})
	if publish {
		port := mustDocker(t, "port", name, "8080/tcp")
		w.http = strings.TrimSpace(strings.Split(port, "\n")[0])
	}
	return w
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func logs(name string) string {
	out, err := exec.Command("docker", "logs", "--tail", "40", name).CombinedOutput()
	if err != nil {
		return err.Error()
	}
	return string(out)
}

func (w *worker) ready() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + w.http + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// state is a container's exit state.
type state struct {
	Running   bool
	ExitCode  int
	OOMKilled bool
	StartedAt time.Time
}

func inspect(t *testing.T, name string) state {
	t.Helper()
	var st state
	if err := json.Unmarshal([]byte(mustDocker(t, "inspect", "--format", "{{json .State}}", name)), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// enqueue creates tasks of function fn with payloads, in one round trip.
func (s *scenario) enqueue(fn string, payloads ...string) []string {
	t := s.t
	t.Helper()
	ts := make([]client.Task, len(payloads))
	for i, p := range payloads {
		ts[i] = client.Task{Queue: queue, Function: fn, Payload: []byte(p), MaxRetries: client.Retries(retries)}
	}
	res, err := s.cl.EnqueueMany(context.Background(), ts)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.ID
	}
	return ids
}

func sleepPayload(d time.Duration) string { return fmt.Sprintf(`{"ms":%d}`, d.Milliseconds()) }

func (s *scenario) task(id string) client.TaskInfo {
	s.t.Helper()
	ti, err := s.cl.Get(context.Background(), queue, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return *ti
}

// waitTasks waits until cond holds for every task.
func (s *scenario) waitTasks(d time.Duration, ids []string, what string, cond func(client.TaskInfo) bool) {
	s.t.Helper()
	err := waitFor(d, func() error {
		for _, id := range ids {
			if ti := s.task(id); !cond(ti) {
				return fmt.Errorf("task %s is %s (attempt %d, worker %s), not yet %s", id, ti.Status, ti.Attempt, ti.Worker, what)
			}
		}
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

func terminal(ti client.TaskInfo) bool {
	return ti.Status.Finished()
}

// event is one entry of the events stream.
type event struct {
	Type, Worker, Task string
	Attempt            int64
	At                 time.Time
}

// events reads the scenario's whole events stream.
func (s *scenario) events() []event {
	s.t.Helper()
	msgs, err := s.rdb.XRange(context.Background(), s.ks.Events(), "-", "+").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	out := make([]event, 0, len(msgs))
	for _, m := range msgs {
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		a, _ := strconv.ParseInt(str("attempt"), 10, 64)
		ms, _ := strconv.ParseInt(str("ts"), 10, 64)
		out = append(out, event{Type: str("type"), Worker: str("worker"), Task: str("task"), Attempt: a, At: time.UnixMilli(ms)})
	}
	return out
}

// count returns how many events of type typ concern task id (and worker, unless "").
func count(evs []event, typ, id, worker string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ && e.Task == id && (worker == "" || e.Worker == worker) {
			n++
		}
	}
	return n
}

// livenessOf computes a worker's liveness as every observer does (heartbeat age).
func (s *scenario) livenessOf(id string) liveness.Liveness {
	s.t.Helper()
	ws, err := liveness.List(context.Background(), s.rdb, s.ks, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w.Liveness
		}
	}
	return "absent"
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
