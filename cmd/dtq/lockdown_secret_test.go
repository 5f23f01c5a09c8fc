package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
)

// The tests in this file run the real dtq command (this test binary again, with
// DTQ_TEST_MAIN=1) against redis-servers set up the way a locked-down deployment
// would: TLS with a private CA, and an ACL user that may touch only dtq:* keys and run
// only the commands dtq needs — exactly the line docs/reliability.md gives.

const mainEnv = "DTQ_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	redistest.Main(m)
}

func dtqCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), env...), mainEnv+"=1")
	return cmd
}

// dtq runs one dtq command to its end.
func dtq(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := dtqCmd(env, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("dtq %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// worker is a running `dtq worker`.
type worker struct {
	cmd    *exec.Cmd
	output *syncbuf.Buffer
	done   chan struct{}
}

func startWorker(t *testing.T, env []string, extra ...string) *worker {
	t.Helper()
	w := &worker{cmd: dtqCmd(append(env, extra...), "worker"), output: &syncbuf.Buffer{}, done: make(chan struct{})}
	w.cmd.Stdout, w.cmd.Stderr = w.output, w.output
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
	})
	return w
}

// stop sends SIGTERM and waits for a clean exit.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatalf("worker did not exit on SIGTERM:\n%s", w.output.String())
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("worker exit code %d:\n%s", code, w.output.String())
	}
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

func randomSecret(t *testing.T) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "pw" + hex.EncodeToString(b[:])
}

// aclLine is the ACL user line of docs/reliability.md with its password set.
func aclLine(t *testing.T, password string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "user dtq on >CHANGE-ME ") {
			return strings.Replace(line, ">CHANGE-ME", ">"+password, 1)
		}
	}
	t.Fatal("docs/reliability.md has no line `user dtq on >CHANGE-ME …`")
	return ""
}

// A locked-down deployment: Redis over TLS only to clients that trust its CA, and an ACL
// user limited to dtq:* keys and the commands of docs/reliability.md. Two `dtq worker`
// processes, the Go client and every CLI command run a demo-like flow on it — priorities,
// retries, a dead task requeued, a delayed task, pause and resume, a cancel, a SIGKILL
// mid-task healed by the peer, a SIGTERM drain — and Redis denies them nothing (its ACL
// LOG stays empty), while it denies the same user anything else.
func TestLockedDownTLSAndACL(t *testing.T) {
	t.Parallel()
	pw := randomSecret(t)
	srv := redistest.StartTLS(t, redistest.Options{Args: redistest.ACLUser(aclLine(t, pw))})
	ctx := context.Background()
	admin := srv.Client(t) // the plain port, default user: the test's own view
	url := srv.TLSURL("dtq", pw) + "/0"
	env := []string{"DTQ_REDIS_URL=" + url, "DTQ_REDIS_CA_FILE=" + srv.CAFile, "DTQ_KEY_PREFIX=dtq",
		"DTQ_QUEUES=default,emails", "DTQ_VISIBILITY_TIMEOUT_S=2", "DTQ_HEARTBEAT_INTERVAL_S=0.2",
		"DTQ_SCHEDULER_INTERVAL_S=0.1", "DTQ_SCHEDULER_LOCK_TTL_MS=1000", "DTQ_RETRY_BASE_MS=20",
		"DTQ_RETRY_MAX_MS=50", "DTQ_EVENTS_VERBOSE=true", "DTQ_LOG_FORMAT=json", "PORT=0"}

	rdb, err := redisconn.Open(url, redisconn.Options{CAFile: srv.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c := client.New(rdb, client.Options{})

	w1 := startWorker(t, env, "DTQ_WORKER_ID=locked-1")
	w2 := startWorker(t, env, "DTQ_WORKER_ID=locked-2")

	// The CLI enqueues and inspects.
	out, errOut, code := dtq(t, env, "enqueue", "--function", "echo", "--payload", `{"to":"a@b.c"}`, "--priority", "7")
	if code != 0 {
		t.Fatalf("dtq enqueue: %d %s", code, errOut)
	}
	echoID := strings.TrimSpace(out)
	// The Go client enqueues the rest.
	tasks := []client.Task{
		{Queue: "default", Function: "sleep", Payload: []byte(`{"ms":4000}`), Priority: 9, MaxRetries: client.Retries(3)},
		{Queue: "default", Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(2)},
		{Queue: "default", Function: "fail", Payload: []byte(`{"times":5}`), MaxRetries: client.Retries(0)},
		{Queue: "default", Function: "noop", Delay: 300 * time.Millisecond},
		{Queue: "default", Function: "noop", Unique: "order-42"},
		{Queue: "default", Function: "noop", Delay: time.Hour}, // cancelled below
	}
	for p := 0; p < 10; p++ {
		tasks = append(tasks, client.Task{Queue: "default", Function: "noop", Priority: p})
	}
	res, err := c.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{echoID}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("enqueue %d: %v", i, r.Err)
		}
		ids = append(ids, r.ID)
	}
	long, failOnce, deadID, cancelID := res[0].ID, res[1].ID, res[2].ID, res[5].ID
	if _, errOut, code := dtq(t, env, "cancel", "--queue", "default", cancelID); code != 0 {
		t.Fatalf("dtq cancel: %s", errOut)
	}

	// SIGKILL the worker running the long task: the peer reclaims it.
	var victim *worker
	eventually(t, "the long task running", func() bool {
		ti, err := c.Get(ctx, "default", long)
		if err != nil || ti.Status != "running" {
			return false
		}
		victim = map[string]*worker{"locked-1": w1, "locked-2": w2}[ti.Worker]
		return victim != nil
	})
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	peer := w1
	if victim == w1 {
		peer = w2
	}

	// Pause and resume a queue with a task on it.
	for _, args := range [][]string{{"pause", "emails"}, {"enqueue", "--queue", "emails", "--function", "noop"}} {
		if out, errOut, code := dtq(t, env, args...); code != 0 {
			t.Fatalf("dtq %v: %s", args, errOut)
		} else if args[0] == "enqueue" {
			ids = append(ids, "emails/"+strings.TrimSpace(out))
		}
	}
	if _, errOut, code := dtq(t, env, "resume", "emails"); code != 0 {
		t.Fatalf("dtq resume: %s", errOut)
	}

	terminal := func(id string) (*client.TaskInfo, bool) {
		q := "default"
		if rest, ok := strings.CutPrefix(id, "emails/"); ok {
			q, id = "emails", rest
		}
		ti, err := c.Get(ctx, q, id)
		return ti, err == nil && (ti.Status == "succeeded" || ti.Status == "dead" || ti.Status == "cancelled")
	}
	eventually(t, "every task ended", func() bool {
		for _, id := range ids {
			if _, ok := terminal(id); !ok {
				return false
			}
		}
		return true
	})
	for id, want := range map[string]client.Status{long: client.StatusSucceeded, failOnce: client.StatusSucceeded, deadID: client.StatusDead, cancelID: client.StatusCancelled, echoID: client.StatusSucceeded} {
		if ti, _ := terminal(id); ti.Status != want {
			t.Fatalf("task %s: %q, want %q", id, ti.Status, want)
		}
	}
	// a waiter under the same ACL: SUBSCRIBE, wait.lua, and the worker's PUBLISH
	if out, errOut, code := dtq(t, env, "enqueue", "--function", "echo", "--payload", "waited", "--wait"); code != 0 || !strings.Contains(out, `"succeeded"`) {
		t.Fatalf("dtq enqueue --wait under the ACL: exit %d out %q err %q", code, out, errOut)
	}
	if ti, _ := terminal(long); ti.Attempt != 2 || ti.Reclaims != 1 {
		t.Fatalf("long task %+v: want reclaimed once by the peer", ti)
	}
	// The dead task is listed and requeued through the CLI; it fails again and dies.
	out, errOut, code = dtq(t, env, "dead", "list", "--queue", "default")
	if code != 0 || !strings.Contains(out, deadID) {
		t.Fatalf("dtq dead list (%d): %s %s", code, out, errOut)
	}
	if _, errOut, code := dtq(t, env, "dead", "requeue", "--queue", "default", deadID); code != 0 {
		t.Fatalf("dtq dead requeue: %s", errOut)
	}
	eventually(t, "the requeued task to die again", func() bool {
		ti, err := c.Get(ctx, "default", deadID)
		return err == nil && ti.Status == "dead" && ti.Attempt == 2
	})
	for _, args := range [][]string{{"inspect", "task", "--queue", "default", long}, {"inspect", "queue", "default"}, {"inspect", "queues"}, {"workers"}} {
		out, errOut, code := dtq(t, env, args...)
		if code != 0 || !json.Valid([]byte(out)) {
			t.Fatalf("dtq %v (%d): %s %s", args, code, out, errOut)
		}
	}
	peer.stop(t)

	// Redis denied nothing to dtq...
	log, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 0 {
		t.Fatalf("Redis denied dtq %d times under the documented ACL: %v", len(log), log)
	}
	for _, w := range []*worker{w1, w2} {
		if strings.Contains(w.output.String(), "NOPERM") {
			t.Fatalf("worker log holds NOPERM:\n%s", w.output.String())
		}
	}
	// ... and denies the same user everything else.
	for _, cmd := range [][]any{{"SET", "other:key", "x"}, {"GET", "secrets"}, {"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"KEYS", "*"}, {"ACL", "LIST"}, {"PUBLISH", "other:x", "m"}} {
		err := rdb.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("%v as dtq: %v, want NOPERM", cmd, err)
		}
	}
	// TLS is verified: without the CA, no connection; plain text on the TLS port neither.
	bare, err := redisconn.Open(url, redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss:// without the CA: %v, want a certificate error", err)
	}
	plain, err := redisconn.Open(strings.Replace(url, "rediss://", "redis://", 1), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain text on the TLS port answered")
	}
}

// Secrets never leave the process: with a password in DTQ_REDIS_URL that Redis refuses,
// neither a worker's logs nor its /metrics, nor any CLI command's output or error, nor
// --help, print it (in clear or URL-encoded).
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Args: []string{"--requirepass", randomSecret(t)}})
	secret := randomSecret(t) + "@:/%"
	encoded := strings.NewReplacer("@", "%40", ":", "%3A", "/", "%2F", "%", "%25").Replace(secret)
	forms := []string{secret, encoded, strings.TrimSuffix(secret, "@:/%")}
	url := "redis://dtq:" + encoded + "@" + srv.Addr() + "/0"
	port := freePort(t)
	env := []string{"DTQ_REDIS_URL=" + url, "DTQ_HEARTBEAT_INTERVAL_S=0.1", "DTQ_VISIBILITY_TIMEOUT_S=1",
		"DTQ_LOG_FORMAT=text", "DTQ_LOG_LEVEL=debug", "PORT=" + strconv.Itoa(port), "DTQ_REDIS_FATAL_AFTER_S=3600"}
	check := func(what, text string) {
		t.Helper()
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Fatalf("%s shows the password:\n%s", what, text)
			}
		}
	}

	w := startWorker(t, env)
	eventually(t, "the worker to report Redis refusing it", func() bool {
		return strings.Contains(w.output.String(), "redis: refuses this client")
	})
	var metrics string
	eventually(t, "/metrics", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return resp.StatusCode == 200
	})
	check("/metrics", metrics)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check(path, string(b))
	}
	w.stop(t)
	check("worker log", w.output.String())
	if !strings.Contains(w.output.String(), "xxxxx") {
		t.Fatalf("the worker log does not show the redacted URL:\n%s", w.output.String())
	}

	for _, args := range [][]string{
		{"enqueue", "--function", "noop"},
		{"inspect", "queue", "default"},
		{"inspect", "task", "x"},
		{"workers"},
		{"dead", "list"},
		{"pause", "default"},
		{"cancel", "x"},
		{"worker", "--help"},
		{"enqueue", "--help"},
		{"enqueue", "--redis", url, "--function", "noop"},
		{"enqueue", "--redis", strings.Replace(url, srv.Addr(), "127.0.0.1:notaport", 1), "--function", "noop"},
		{"enqueue", "--redis", "redis://dtq:" + encoded + "@[::1", "--function", "noop"},
		{"enqueue", "--redis", "rediss+cluster://dtq:" + encoded + "@" + srv.Addr() + "?bogus=1", "--function", "noop"},
	} {
		out, errOut, code := dtq(t, env, args...)
		if args[len(args)-1] != "--help" && code == 0 {
			t.Fatalf("dtq %v succeeded against a Redis that refuses the password", args)
		}
		check(fmt.Sprintf("dtq %v", args[:min(2, len(args))]), out+errOut)
	}
	// A worker whose configuration is refused says so without the URL.
	out, errOut, code := dtq(t, append(env, "DTQ_QUEUES=bad{name}"), "worker")
	if code != 2 {
		t.Fatalf("worker with a bad queue name: exit %d", code)
	}
	check("dtq worker config error", out+errOut)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A worker runs as a non-root user on a read-only file system: the whole mount tree is
// remounted read-only in a mount namespace of its own (unshare), and it runs as nobody
// (setpriv). It takes and finishes tasks all the same: it writes nothing to disk.
func TestWorkerRunsReadOnlyAsNonRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to build the read-only mount namespace and drop to nobody (CI runs as root)")
	}
	for _, tool := range []string{"unshare", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (util-linux)", tool)
		}
	}
	// The binary must be readable by nobody.
	dir, err := os.MkdirTemp("", "dtq-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := dir + "/dtq"
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const script = `mount --make-rprivate / && mount -o remount,bind,ro / && mount -o remount,bind,ro /dev/shm && cd / &&
exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs "$@"`
	locked := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, args...)...)
		cmd.Env = append(append(os.Environ(), env...), mainEnv+"=1", "TMPDIR=/tmp", "HOME=/nonexistent")
		return cmd
	}
	// The jail holds: nobody can write anywhere, /tmp included.
	for _, path := range []string{"/tmp/dtq-ro-probe", dir + "/probe", "/dev/shm/dtq-ro-probe"} {
		if out, err := locked(nil, "touch", path).CombinedOutput(); err == nil {
			_ = os.Remove(path)
			t.Fatalf("touch %s succeeded in the read-only jail: %s", path, out)
		}
	}

	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix, "DTQ_HEARTBEAT_INTERVAL_S=0.2",
		"DTQ_VISIBILITY_TIMEOUT_S=2", "DTQ_LOG_FORMAT=json", "PORT=0"}
	cmd := locked(env, bin, "worker")
	output := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = output, output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	var ids []string
	for _, task := range []client.Task{
		{Queue: "default", Function: "echo", Payload: []byte("hello")},
		{Queue: "default", Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(2)},
		{Queue: "default", Function: "sleep", Payload: []byte(`{"ms":50}`), Delay: 200 * time.Millisecond},
	} {
		id, _, err := c.Enqueue(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	eventually(t, "the jailed worker to finish every task", func() bool {
		for _, id := range ids {
			ti, err := c.Get(ctx, "default", id)
			if err != nil || ti.Status != "succeeded" {
				return false
			}
		}
		return true
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nUid:\t65534\t65534\t65534\t65534\n") {
		t.Fatalf("the worker does not run as nobody:\n%s", status)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-done
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("jailed worker exit %d:\n%s", code, output.String())
	}
	if strings.Contains(output.String(), "read-only file system") {
		t.Fatalf("the worker tried to write:\n%s", output.String())
	}
}
