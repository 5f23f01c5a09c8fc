package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	dtqruntime "github.com/dtq/dtq/runtime"
)

// dtqIn runs one dtq command with stdin to its end.
func dtqIn(t *testing.T, stdin []byte, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := dtqCmd(env, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("dtq %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// oneLine reports whether s is exactly one line.
func oneLine(s string) bool {
	s = strings.TrimSuffix(s, "\n")
	return s != "" && !strings.Contains(s, "\n")
}

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// A payload over one argument's limit (128 KiB) goes in from a file or from standard
// input, byte for byte; an oversized one, or one given twice, is refused before
// anything is sent.
func TestEnqueuePayloadFile(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	rdb := srv.Client(t)
	q := keys.New(prefix).Queue("big")
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix}
	payload := make([]byte, 300<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	file := filepath.Join(t.TempDir(), "payload.bin")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	stored := func(out string) []byte {
		t.Helper()
		got, err := rdb.HGet(context.Background(), q.Task(strings.TrimSpace(out)), "payload").Bytes()
		if err != nil {
			t.Fatalf("task %q: %v", out, err)
		}
		return got
	}
	out, errOut, code := dtq(t, env, "enqueue", "--queue", "big", "--function", "echo", "--payload-file", file)
	if code != 0 || !bytes.Equal(stored(out), payload) {
		t.Fatalf("--payload-file %s: exit %d, %q", file, code, errOut)
	}
	out, errOut, code = dtqIn(t, payload, env, "enqueue", "--queue", "big", "--function", "echo", "--payload-file", "-")
	if code != 0 || !bytes.Equal(stored(out), payload) {
		t.Fatalf("--payload-file -: exit %d, %q", code, errOut)
	}
	// At the limit exactly: accepted.
	limited := append(env, "DTQ_MAX_PAYLOAD_BYTES=1000")
	if err := os.WriteFile(file, payload[:1000], 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := dtq(t, limited, "enqueue", "--queue", "big", "--function", "echo", "--payload-file", file); code != 0 || len(stored(out)) != 1000 {
		t.Fatalf("a payload at the limit: exit %d, %q", code, errOut)
	}
	before := rdb.XLen(context.Background(), q.Stream(0)).Val()

	over := filepath.Join(t.TempDir(), "over.bin")
	if err := os.WriteFile(over, payload[:1001], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stdin []byte
		env   []string
		args  []string
		want  string
	}{
		{"file over the limit", nil, limited, []string{"--payload-file", over}, "over the payload limit of 1000"},
		{"stdin over the limit", payload[:1001], limited, []string{"--payload-file", "-"}, "over 1000 bytes"},
		{"both", nil, env, []string{"--payload", "x", "--payload-file", file}, "exclude each other"},
		{"no such file", nil, env, []string{"--payload-file", file + ".missing"}, "--payload-file: open"},
		{"a directory", nil, env, []string{"--payload-file", t.TempDir()}, "is a directory"},
		{"empty path", nil, env, []string{"--payload-file", ""}, "needs a path"},
		{"bad limit", nil, append(env, "DTQ_MAX_PAYLOAD_BYTES=lots"), []string{"--payload-file", file}, "DTQ_MAX_PAYLOAD_BYTES"},
	} {
		args := append([]string{"enqueue", "--queue", "big", "--function", "echo"}, c.args...)
		_, errOut, code := dtqIn(t, c.stdin, c.env, args...)
		if code != 2 || !oneLine(errOut) || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line saying %q", c.name, code, errOut, c.want)
		}
	}
	if after := rdb.XLen(context.Background(), q.Stream(0)).Val(); after != before {
		t.Errorf("refused enqueues added %d entries", after-before)
	}
}

// Subcommands refuse positional arguments they do not take: exit 2, one line.
func TestExtraArgumentsRefused(t *testing.T) {
	t.Parallel()
	env := []string{"DTQ_REDIS_URL=redis://" + closedAddr(t)}
	for _, args := range [][]string{
		{"enqueue", "--function", "echo", "stray"},
		{"enqueue", "--function", "echo", "stray", "--priority", "3"},
		{"inspect", "queues", "stray"},
		{"inspect", "queue", "a", "b"},
		{"inspect", "task", "a", "b"},
		{"pause", "a", "b"},
		{"resume", "a", "b"},
		{"dead", "list", "stray"},
		{"workers", "stray"},
		{"demo", "stray"},
		{"version", "stray"},
		{"worker", "stray"},
	} {
		out, errOut, code := dtq(t, env, args...)
		if code != 2 || !oneLine(errOut) || out != "" {
			t.Errorf("dtq %v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errOut)
		}
	}
}

// dtq --help prints the commands on stdout and exits 0; dtq alone prints them on
// stderr and exits 2.
func TestTopLevelHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h", "help"} {
		out, errOut, code := dtq(t, nil, arg)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: dtq") || !strings.Contains(out, "version") {
			t.Errorf("dtq %s: exit %d, stdout %q, stderr %q", arg, code, out, errOut)
		}
	}
	out, errOut, code := dtq(t, nil)
	if code != 2 || out != "" || !strings.Contains(errOut, "usage: dtq") {
		t.Errorf("dtq: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// dtq version prints the module version, the VCS revision the binary was built from
// (when the build recorded it) and the Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		out, errOut, code := dtq(t, nil, arg)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || errOut != "" || !strings.HasPrefix(lines[0], "dtq ") || lines[len(lines)-1] != "go "+runtime.Version() {
			t.Errorf("dtq %s: exit %d\n%s%s", arg, code, out, errOut)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/dtq/dtq", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionText(bi), "dtq v1.4.0\nrevision 0123abcd+modified (2026-01-02T03:04:05Z)\ngo go1.26.1\n"; got != want {
		t.Errorf("versionText = %q, want %q", got, want)
	}
	bi.Settings = bi.Settings[:2]
	if got, want := versionText(bi), "dtq v1.4.0\nrevision 0123abcd\ngo go1.26.1\n"; got != want {
		t.Errorf("versionText without a time = %q, want %q", got, want)
	}
	bi.Settings = bi.Settings[:1]
	if got, want := versionText(bi), "dtq v1.4.0\ngo go1.26.1\n"; got != want {
		t.Errorf("versionText without a revision = %q, want %q", got, want)
	}
	if got, want := versionText(nil), "dtq unknown\ngo unknown\n"; got != want {
		t.Errorf("versionText(nil) = %q, want %q", got, want)
	}
}

// jsonLines checks that every line of s is a JSON object and returns those of go-redis.
func jsonLines(t *testing.T, s string) (goRedis []map[string]any) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		if m["lib"] == "go-redis" {
			goRedis = append(goRedis, m)
		}
	}
	return goRedis
}

// go-redis's own log lines (here its dial failures) come out of the worker, the
// scaler and the CLI through slog, never as plain text among the JSON.
func TestGoRedisLogsGoThroughSlog(t *testing.T) {
	t.Parallel()
	redisEnv := []string{"DTQ_REDIS_URL=redis://" + closedAddr(t), "DTQ_LOG_FORMAT=json", "PORT=0"}
	dialFailed := func(s string) bool { return strings.Contains(s, "failed to dial") }

	w := startWorker(t, redisEnv)
	eventually(t, "the worker's dial failure", func() bool { return dialFailed(w.output.String()) })
	w.stop(t)
	if got := jsonLines(t, w.output.String()); len(got) == 0 || got[0]["level"] != "WARN" || got[0]["worker_id"] == nil {
		t.Errorf("worker: go-redis lines %v", got)
	}

	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/dtq-scaler", "github.com/dtq/dtq/cmd/dtq-scaler").CombinedOutput(); err != nil {
		t.Fatalf("build dtq-scaler: %v\n%s", err, out)
	}
	var scalerOut syncbuf.Buffer
	sc := dtqCmd(append(redisEnv, "PATH="+dir+":"+os.Getenv("PATH"), "DTQ_SCALER_ADDR=127.0.0.1:0"), "scaler")
	sc.Stdout, sc.Stderr = &scalerOut, &scalerOut
	sc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sc.Wait() }()
	eventually(t, "the scaler's dial failure", func() bool { return dialFailed(scalerOut.String()) })
	_ = sc.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = sc.Process.Kill()
		<-done
		t.Fatal("the scaler did not stop on SIGTERM")
	}
	if got := jsonLines(t, scalerOut.String()); len(got) == 0 {
		t.Errorf("scaler: no go-redis line:\n%s", scalerOut.String())
	}

	// The CLI: at DTQ_LOG_LEVEL=warn, JSON lines then the command's error line; by
	// default only the error line.
	_, errOut, code := dtq(t, append(redisEnv, "DTQ_LOG_LEVEL=warn"), "inspect", "queues")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 1 || len(lines) < 2 || !strings.HasPrefix(lines[len(lines)-1], "dtq inspect: ") {
		t.Fatalf("CLI at warn: exit %d, stderr:\n%s", code, errOut)
	}
	if got := jsonLines(t, strings.Join(lines[:len(lines)-1], "\n")); len(got) == 0 || !dialFailed(got[0]["msg"].(string)) {
		t.Errorf("CLI: go-redis lines %v", got)
	}
	if _, errOut, code := dtq(t, redisEnv, "inspect", "queues"); code != 1 || !oneLine(errOut) {
		t.Errorf("CLI by default: exit %d, stderr %q; want one line", code, errOut)
	}
	if _, errOut, code := dtq(t, append(redisEnv, "DTQ_LOG_LEVEL=loud"), "inspect", "queues"); code != 2 || !oneLine(errOut) || !strings.Contains(errOut, "DTQ_LOG_LEVEL") {
		t.Errorf("CLI with a bad DTQ_LOG_LEVEL: exit %d, stderr %q", code, errOut)
	}
}

// An unusable DTQ_REDIS_CA_FILE is reported under its own name, by the worker and the
// CLI alike.
func TestCAFileErrorsNameTheirVariable(t *testing.T) {
	t.Parallel()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{filepath.Join(t.TempDir(), "missing.pem"), notPEM} {
		env := []string{"DTQ_REDIS_URL=rediss://" + closedAddr(t), "DTQ_REDIS_CA_FILE=" + ca}
		for _, args := range [][]string{{"worker"}, {"inspect", "queues"}, {"enqueue", "--function", "echo"}} {
			_, errOut, code := dtq(t, env, args...)
			if code != 2 || !oneLine(errOut) || !strings.Contains(errOut, "DTQ_REDIS_CA_FILE") || strings.Contains(errOut, "DTQ_REDIS_URL") {
				t.Errorf("dtq %v with CA file %s: exit %d, stderr %q; want exit 2 and one line naming DTQ_REDIS_CA_FILE", args, ca, code, errOut)
			}
		}
	}
}

// rediss:// at a Redis without TLS: the CLI fails after one bounded handshake with
// one line that suggests redis://.
func TestRedissAtPlainRedisFailsFast(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	_, errOut, code := dtq(t, []string{"DTQ_REDIS_URL=rediss://" + srv.Addr()}, "inspect", "queues")
	if code != 1 || !oneLine(errOut) || !strings.Contains(errOut, "TLS handshake") || !strings.Contains(errOut, "use redis://") {
		t.Fatalf("exit %d, stderr %q; want exit 1 and one line suggesting redis://", code, errOut)
	}
}

// The retry backoff is what --help says: the nth is base·2ⁿ⁻¹ capped, half of it
// jittered (never under half, never over the whole).
func TestRetryBackoffIsWhatHelpSays(t *testing.T) {
	t.Parallel()
	out, _, _ := dtq(t, nil, "worker", "--help")
	if strings.Contains(out, "full jitter") || !strings.Contains(out, "half of it jittered") {
		t.Fatalf("worker --help on the retry backoff:\n%s", out)
	}
	b := dtqruntime.ExpBackoff(100*time.Millisecond, 400*time.Millisecond)
	for n, d := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 9: 400 * time.Millisecond} {
		lower := false
		for range 200 {
			got := b(n)
			if got < d/2 || got > d {
				t.Fatalf("backoff %d = %s, outside [%s, %s]", n, got, d/2, d)
			}
			lower = lower || got < d*3/4
		}
		if !lower {
			t.Errorf("backoff %d never fell in the lower half of its jitter", n)
		}
	}
}
