package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/observer"
	"github.com/dtq/dtq/runtime"
	"github.com/dtq/dtq/scaler"
)

// exited waits for the worker to exit by itself and returns its exit code (the
// deadline only turns a hang into a failure).
func (w *worker) exited(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatalf("worker did not exit:\n%s", w.output.String())
	}
	return w.cmd.ProcessState.ExitCode()
}

// running fails the test if the worker has exited.
func (w *worker) running(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
		t.Fatalf("worker exited with %d:\n%s", w.cmd.ProcessState.ExitCode(), w.output.String())
	default:
	}
}

// logLines parses the worker's JSON log lines.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q\n%s", sc.Text(), out)
		}
		lines = append(lines, m)
	}
	return lines
}

// get fetches http://127.0.0.1:port/path and returns the status and the body.
func get(port int, path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// readyz returns /readyz's status code and body (0 while nothing answers).
func readyz(port int) (int, map[string]any) {
	code, body, err := get(port, "/readyz")
	if err != nil {
		return 0, nil
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m)
	return code, m
}

// A Redis that refuses the worker in a way no wait heals — a wrong password, no
// password, an unknown user, a database number out of range, an ACL user without access
// to dtq's keys or without a command dtq needs — makes it exit 3 after
// DTQ_REDIS_FATAL_AFTER_S, with one error line naming the cause (and never the
// password), having announced it once; it never says it started.
func TestWorkerExits3WhenRedisRefusesIt(t *testing.T) {
	t.Parallel()
	pw, userPW := randomSecret(t), randomSecret(t)
	// The documented ACL line without +evalsha: every command but the scripts' works.
	noScripts := strings.Replace(aclLine(t, userPW), " +evalsha", "", 1)
	noScripts = strings.Replace(noScripts, "user dtq ", "user noscripts ", 1)
	args := []string{"--requirepass", pw}
	args = append(args, redistest.ACLUser("user elsewhere on >"+userPW+" ~other:* resetchannels +@all")...)
	args = append(args, redistest.ACLUser(noScripts)...)
	srv := redistest.Start(t, redistest.Options{Args: args})
	for _, c := range []struct {
		name, url, cause string
	}{
		{"wrong password", "redis://:wrong" + pw + "@" + srv.Addr() + "/0", "authentication failed"},
		{"no password", "redis://" + srv.Addr() + "/0", "authentication failed"},
		{"unknown user", "redis://nobody:" + pw + "@" + srv.Addr() + "/0", "authentication failed"},
		{"database out of range", "redis://:" + pw + "@" + srv.Addr() + "/16", "database number"},
		{"ACL user without dtq keys", "redis://elsewhere:" + userPW + "@" + srv.Addr() + "/0", "ACL user lacks a permission"},
		{"ACL user without EVALSHA", "redis://noscripts:" + userPW + "@" + srv.Addr() + "/0", "ACL user lacks a permission"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := startWorker(t, []string{"DTQ_REDIS_URL=" + c.url, "DTQ_REDIS_FATAL_AFTER_S=1", "DTQ_LOG_FORMAT=json",
				"PORT=0", "DTQ_HEARTBEAT_INTERVAL_S=0.1", "DTQ_SCHEDULER_INTERVAL_S=0.1", "DTQ_SCHEDULER_LOCK_TTL_MS=1000"})
			code := w.exited(t)
			out := w.output.String()
			if code != 3 {
				t.Fatalf("exit %d, want 3:\n%s", code, out)
			}
			if strings.Contains(out, pw) || strings.Contains(out, userPW) {
				t.Fatalf("the output shows a password:\n%s", out)
			}
			var errs, announced int
			for _, l := range logLines(t, out) {
				switch {
				case l["msg"] == "worker: started":
					t.Fatalf("the worker said it started:\n%s", out)
				case l["level"] == "ERROR":
					errs++
					cause, _ := l["cause"].(string)
					if l["msg"] != "worker: exiting: redis refuses the worker" || !strings.Contains(cause, c.cause) || l["exit_code"] != 3.0 {
						t.Errorf("error line %v: want the exit line naming %q", l, c.cause)
					}
				case l["msg"] == "redis: refuses this client; exiting unless it heals":
					announced++
					if l["within_s"] != 1.0 {
						t.Errorf("announcement %v: want within_s 1", l)
					}
				}
			}
			if errs != 1 || announced != 1 {
				t.Fatalf("%d error lines and %d announcements, want one of each:\n%s", errs, announced, out)
			}
		})
	}
}

// With no Redis at all the worker does not exit: it keeps trying, /readyz answers 503
// with the reason, and it says it started only once Redis answers, when /readyz turns
// 200.
func TestWorkerWithoutRedisWaitsNotReady(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.Kill()
	port := freePort(t)
	w := startWorker(t, []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_LOG_FORMAT=json", "PORT=" + strconv.Itoa(port),
		"DTQ_REDIS_FATAL_AFTER_S=0"})
	eventually(t, "/readyz to answer 503 with the reason", func() bool {
		code, body := readyz(port)
		reason, _ := body["reason"].(string)
		return code == http.StatusServiceUnavailable && body["ready"] == false && strings.Contains(reason, "connection refused")
	})
	eventually(t, "the poll loop to have retried twice", func() bool {
		_, m, _ := get(port, "/metrics")
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, "dtq_worker_loop_restarts_total{loop=\"poll\"") {
				n, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
				return n >= 2
			}
		}
		return false
	})
	w.running(t)
	if code, _ := readyz(port); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d while Redis is down", code)
	}
	if strings.Contains(w.output.String(), "worker: started") {
		t.Fatalf("the worker said it started before Redis answered:\n%s", w.output.String())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz to answer 200 once Redis is up", func() bool {
		code, _ := readyz(port)
		return code == http.StatusOK
	})
	eventually(t, "the worker to say it started", func() bool { return strings.Contains(w.output.String(), "worker: started") })
	w.stop(t)
}

// Redis killed (kill -9) under a running worker: /readyz turns 503 with the reason and
// dtq_worker_redis_up 0, the worker keeps running, and once Redis is back /readyz is
// 200 again and tasks run.
func TestWorkerReadinessFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	port := freePort(t)
	prefix := redistest.Prefix(t)
	w := startWorker(t, []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix, "DTQ_LOG_FORMAT=json",
		"PORT=" + strconv.Itoa(port), "DTQ_HEARTBEAT_INTERVAL_S=0.2", "DTQ_VISIBILITY_TIMEOUT_S=2",
		"DTQ_REDIS_FATAL_AFTER_S=0"})
	up := func(want string) func() bool {
		return func() bool {
			_, m, _ := get(port, "/metrics")
			return strings.Contains(m, "\ndtq_worker_redis_up{worker_id=") && strings.Contains(m, "} "+want+"\n")
		}
	}
	eventually(t, "/readyz 200", func() bool { code, _ := readyz(port); return code == http.StatusOK })
	eventually(t, "dtq_worker_redis_up 1", up("1"))

	srv.Kill()
	eventually(t, "/readyz 503 naming Redis", func() bool {
		code, body := readyz(port)
		reason, _ := body["reason"].(string)
		return code == http.StatusServiceUnavailable && strings.HasPrefix(reason, "redis unreachable: ") && body["redis_up"] == false
	})
	eventually(t, "dtq_worker_redis_up 0", up("0"))
	w.running(t)

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz 200 again", func() bool { code, _ := readyz(port); return code == http.StatusOK })
	eventually(t, "dtq_worker_redis_up 1 again", up("1"))
	c := client.New(srv.Client(t), client.Options{Prefix: prefix})
	ctx := context.Background()
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "echo", Payload: []byte("back")})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a task to run after the restart", func() bool {
		ti, err := c.Get(ctx, "default", id)
		return err == nil && ti.Status == "succeeded"
	})
	w.stop(t)
}

// A worker whose PORT is taken exits 2 with one line naming PORT, before it takes any
// work: the task queued for it stays queued, undelivered.
func TestWorkerPortTakenTakesNoWork(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	c := client.New(srv.Client(t), client.Options{Prefix: prefix})
	ctx := context.Background()
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "echo", Payload: []byte("wait")})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := dtq(t, []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix,
		"DTQ_LOG_FORMAT=json", "PORT=" + strconv.Itoa(port)}, "worker")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 2 || out != "" || len(lines) != 1 || !strings.Contains(lines[0], "PORT") || !strings.Contains(lines[0], strconv.Itoa(port)) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and one line naming PORT", code, out, errOut)
	}
	ti, err := c.Get(ctx, "default", id)
	if err != nil || ti.Status != "queued" || ti.Attempt != 0 || ti.Worker != "" {
		t.Fatalf("task after the failed start: %+v, %v; want queued, untouched", ti, err)
	}
	qi, err := c.Queue(ctx, "default")
	if err != nil || qi.Lag != 1 || qi.Pending != 0 {
		t.Fatalf("queue after the failed start: %+v, %v; want lag 1, pending 0", qi, err)
	}
}

// A variable named like one of the worker's but not read by it (a typo) is named in a
// warning with the variable it resembles; its value is never logged, and the variables
// of the other dtq programs in a shared environment raise nothing.
func TestWorkerWarnsOfMisspeltVariables(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	port := freePort(t)
	w := startWorker(t, []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t), "DTQ_LOG_FORMAT=json",
		"PORT=" + strconv.Itoa(port), "DTQ_CONCURRENCY=misspelt-value-1", "DTQ_OBSERVER_TOKEN=observer-value-2",
		"DTQ_SCALER_ADDR=:0"})
	var warned map[string]any
	eventually(t, "the warning of the misspelt variable", func() bool {
		for _, l := range logLines(t, w.output.String()) {
			if l["var"] != nil {
				warned = l
				return true
			}
		}
		return false
	})
	w.stop(t)
	if warned["var"] != "DTQ_CONCURRENCY" || warned["did_you_mean"] != "DTQ_WORKER_CONCURRENCY" || warned["level"] != "WARN" {
		t.Fatalf("warning %v; want DTQ_CONCURRENCY, did you mean DTQ_WORKER_CONCURRENCY, at WARN", warned)
	}
	out := w.output.String()
	for _, v := range []string{"misspelt-value-1", "observer-value-2", "DTQ_OBSERVER_TOKEN", "DTQ_SCALER_ADDR"} {
		if strings.Contains(out, v) {
			t.Errorf("the log holds %q:\n%s", v, out)
		}
	}
}

// No variable of the other dtq programs (the observer, the scaler, the CLI) reads as a
// misspelling of a worker's: a shared environment raises no warning.
func TestNoOtherProgramsVariableLooksMisspelt(t *testing.T) {
	var environ []string
	for _, vs := range [][]runtime.EnvVar{observer.EnvVars(), scaler.EnvVars(), clientEnv()} {
		for _, v := range vs {
			environ = append(environ, v.Name+"=x")
		}
	}
	if m := envcfg.Misspelt(environ, "DTQ_", runtime.EnvVars()); len(m) > 0 {
		t.Fatalf("other programs' variables read as the worker's misspelt: %+v", m)
	}
}

// A worker dials its first Redis connection while it is being built, and its first
// claim goes out on that connection, even when the connection's set-up takes longer
// than the build: a start dials one connection before its first task, not a second
// one beside the first. Redis is behind a proxy that delays every chunk by 25 ms, so
// the set-up (connect, HELLO, the name, a PING) takes well over 100 ms.
func TestWorkerFirstClaimRidesThePreDialedConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy, err := chaos.NewProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.SetDelay(25 * time.Millisecond)
	prefix := redistest.Prefix(t)
	c := client.New(srv.Client(t), client.Options{Prefix: prefix})
	ctx := context.Background()
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	claim := proxy.Watch(chaos.Command("EVALSHA"))
	w := startWorker(t, []string{"DTQ_REDIS_URL=redis://" + proxy.Addr(), "DTQ_KEY_PREFIX=" + prefix,
		"DTQ_LOG_FORMAT=json", "PORT=" + strconv.Itoa(freePort(t))})
	select {
	case <-claim.Seen():
	case <-w.done:
		t.Fatalf("worker exited before its first claim:\n%s", w.output.String())
	case <-time.After(time.Minute):
		t.Fatalf("no claim in a minute:\n%s", w.output.String())
	}
	if claim.Conn != 1 || claim.Accepted != 1 {
		t.Fatalf("the first claim went out on connection %d of %d dialed; want the first and only one", claim.Conn, claim.Accepted)
	}
	proxy.SetDelay(0)
	eventually(t, "the task to succeed", func() bool {
		ti, err := c.Get(ctx, "default", id)
		return err == nil && ti.Status == "succeeded"
	})
	w.stop(t)
}
