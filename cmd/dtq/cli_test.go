package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

// A bad environment value exits 2 with one line naming the variable.
func TestWorkerBadEnvExits2WithOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ env, name string }{
		{"DTQ_WORKER_CONCURRENCY=lots", "DTQ_WORKER_CONCURRENCY"},
		{"DTQ_HEARTBEAT_INTERVAL_S=60", "DTQ_HEARTBEAT_INTERVAL_S"},
		{"DTQ_QUEUES=a{b}", "DTQ_QUEUES"},
		{"PORT=-1", "PORT"},
		{"DTQ_REDIS_URL=mysql://x", "DTQ_REDIS_URL"},
	} {
		out, errOut, code := dtq(t, []string{c.env}, "worker")
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.name) || out != "" {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line naming %s", c.env, code, errOut, c.name)
		}
	}
}

// --help lists every flag and every environment variable with its default.
func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	out, _, code := dtq(t, nil, "worker", "--help")
	if code != 0 {
		t.Fatalf("worker --help exit %d", code)
	}
	for _, v := range runtime.EnvVars() {
		if !strings.Contains(out, v.Name) || !strings.Contains(out, "["+v.Default+"]") {
			t.Errorf("worker --help lacks %s [%s]", v.Name, v.Default)
		}
	}
	out, _, code = dtq(t, nil, "enqueue", "--help")
	for _, f := range []string{"-queue", "-function", "-priority", "-payload", "-delay", "-max-retries", "-unique", "DTQ_REDIS_URL"} {
		if code != 0 || !strings.Contains(out, f) {
			t.Errorf("enqueue --help lacks %s", f)
		}
	}
	if _, _, code := dtq(t, nil, "nosuchcommand"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
}

// enqueue prints an id; inspect prints the task and the queue as JSON; bad input exits 2.
func TestEnqueueAndInspect(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t)}
	out, errOut, code := dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--priority", "7", "--payload", `{"a":1}`, "--unique", "u1")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("enqueue: exit %d out %q err %q", code, out, errOut)
	}
	out, _, code = dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--unique", "u1")
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("second enqueue with the same unique key printed %q, want %q", out, id)
	}
	out, _, code = dtq(t, env, "inspect", "task", "--queue", "mail", id)
	var ti client.TaskInfo
	if code != 0 || json.Unmarshal([]byte(out), &ti) != nil || ti.ID != id || ti.Status != "queued" || ti.Priority != 7 || ti.Function != "echo" {
		t.Fatalf("inspect task: exit %d, %s", code, out)
	}
	out, _, code = dtq(t, env, "inspect", "queue", "mail")
	var qi client.QueueInfo
	if code != 0 || json.Unmarshal([]byte(out), &qi) != nil || qi.Lag != 1 || qi.Priorities[2].Priority != 7 || qi.Priorities[2].Lag != 1 {
		t.Fatalf("inspect queue: exit %d, %s", code, out)
	}
	for _, args := range [][]string{
		{"enqueue", "--queue", "mail", "--function", "echo", "--priority", "12"},
		{"enqueue", "--queue", "bad{queue}", "--function", "echo"},
		{"enqueue", "--queue", "mail"},
	} {
		if _, errOut, code := dtq(t, env, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d stderr %q, want 2 and a reason", args, code, errOut)
		}
	}
	if _, _, code := dtq(t, env, "inspect", "task", "--queue", "mail", "nope"); code != 1 {
		t.Errorf("inspect of a missing task: exit %d, want 1", code)
	}
}

// A unique key held by a cancelled task: the enqueue says so and creates nothing;
// with --unique-reuse it creates a new task that takes the key.
func TestEnqueueUniqueReuse(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t)}
	out, errOut, code := dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--unique", "u1")
	first := strings.TrimSpace(out)
	if code != 0 || first == "" {
		t.Fatalf("enqueue: exit %d out %q err %q", code, out, errOut)
	}
	if _, errOut, code := dtq(t, env, "cancel", "--queue", "mail", first); code != 0 {
		t.Fatalf("cancel: exit %d err %q", code, errOut)
	}
	out, errOut, code = dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--unique", "u1")
	if code != 0 || strings.TrimSpace(out) != first || !strings.Contains(errOut, "(cancelled)") || !strings.Contains(errOut, "--unique-reuse") {
		t.Fatalf("enqueue over a cancelled holder: exit %d out %q err %q; want the holder named as cancelled", code, out, errOut)
	}
	out, errOut, code = dtq(t, env, "enqueue", "--queue", "mail", "--function", "echo", "--unique", "u1", "--unique-reuse")
	second := strings.TrimSpace(out)
	if code != 0 || second == "" || second == first || errOut != "" {
		t.Fatalf("enqueue --unique-reuse: exit %d out %q err %q; want a new task", code, out, errOut)
	}
}

// `dtq scaler` runs the dtq-scaler binary found next to dtq or on PATH.
func TestScalerCommandExecsTheScalerBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/dtq-scaler", "github.com/dtq/dtq/cmd/dtq-scaler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build dtq-scaler: %v\n%s", err, out)
	}
	out, _, code := dtq(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, "scaler", "--help")
	if code != 0 || !strings.Contains(out, "DTQ_SCALER_ADDR") {
		t.Fatalf("dtq scaler --help: exit %d\n%s", code, out)
	}
	if _, errOut, code := dtq(t, []string{"PATH=/nonexistent"}, "scaler"); code != 1 || !strings.Contains(errOut, "dtq-scaler") {
		t.Fatalf("dtq scaler without its binary: exit %d, %q", code, errOut)
	}
}

// `dtq bench` runs go run ./bench at the root of the source tree it is started in, and
// outside any dtq tree says why it cannot run.
func TestBenchCommandRunsTheBenchmarks(t *testing.T) {
	t.Parallel()
	// From a subdirectory of the tree (this package's): the benchmark's usage, from the root.
	out, errOut, code := dtq(t, nil, "bench", "--help")
	if code != 0 || !strings.Contains(out+errOut, "throughput") || !strings.Contains(out+errOut, "coldstart") {
		t.Fatalf("dtq bench --help in the tree: exit %d\n%s%s", code, out, errOut)
	}
	// Outside it: exit 1 and the reason.
	var stdout, stderr strings.Builder
	cmd := dtqCmd(nil, "bench", "throughput")
	cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "source tree") {
		t.Fatalf("dtq bench outside the tree: %v, stderr %q", err, stderr.String())
	}
}

// README.md documents the very ACL line TestLockedDownTLSAndACL proves.
func TestReadmeACLLineIsTheTestedOne(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tested := aclLine(t, "CHANGE-ME")
	for _, line := range strings.Split(string(readme), "\n") {
		if line == tested {
			return
		}
	}
	t.Fatalf("README.md lacks the ACL line of docs/reliability.md:\n%s", tested)
}
