package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
)

// On a machine without redis-server the demo runs on the embedded Redis (dtq-miniredis,
// found on PATH) and ends as it does on Redis: every task finished, none lost, the killed worker's task finished by a
// peer, nothing logged at error level by the workers.
func TestDemoWithoutRedisServer(t *testing.T) {
	t.Parallel()
	// PATH holds only dtq-miniredis: no redis-server to find (the demo starts its
	// workers from its own executable, not from PATH).
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/dtq-miniredis", "github.com/dtq/dtq/cmd/dtq-miniredis").CombinedOutput(); err != nil {
		t.Fatalf("build dtq-miniredis: %v\n%s", err, out)
	}
	env := []string{"PATH=" + dir, "DTQ_REDIS_URL=", "DTQ_REDIS_CA_FILE="}
	out, errOut, code := dtq(t, env, "demo", "--tasks", "60")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"no redis-server on PATH: started an embedded Redis",
		"  tasks       62 in ",
		"  lost        0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^recovered task \S+ finished by demo-worker-\d at attempt \d+,`).MatchString(out) {
		t.Errorf("demo output lacks the recovered task:\n%s", out)
	}
	if strings.Contains(errOut, `"level":"ERROR"`) || strings.Contains(errOut, "cmsgpack") {
		t.Errorf("the workers logged errors:\n%s", errOut)
	}
}

// `dtq demo --serve` starts an observer, prints its URL, keeps serving live tasks after
// the run, and on SIGINT stops everything it started and deletes its keys.
func TestDemoServesTheObserver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/dtq-observer", "github.com/dtq/dtq/cmd/dtq-observer").CombinedOutput(); err != nil {
		t.Fatalf("build dtq-observer: %v\n%s", err, out)
	}
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	cmd := dtqCmd([]string{"PATH=" + dir + ":" + os.Getenv("PATH"), "DTQ_REDIS_URL=" + srv.URL(), "DTQ_OBSERVER_TOKEN="},
		"demo", "--tasks", "30", "--serve", "--observer-port", "0", "--prefix", prefix)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			select {
			case err := <-done:
				t.Fatalf("demo ended (%v) before %s:\n%s", err, what, out.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 60s:\n%s", what, out.String())
			}
		}
	}
	urlRE := regexp.MustCompile(`(?m)^observer  (http://127\.0\.0\.1:\d+/)  the dashboard and /api/v1 \(actions off`)
	waitFor("observer URL", func() bool { return urlRE.MatchString(out.String()) })
	base := urlRE.FindStringSubmatch(out.String())[1]
	waitFor("serving line", func() bool { return strings.Contains(out.String(), "serving   a trickle of tasks") })

	processed := func() int {
		res, err := http.Get(base + "api/v1/workers")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var ws struct {
			Workers []struct {
				Processed int `json:"tasks_processed"`
			} `json:"workers"`
			Live int `json:"live"`
		}
		if err := json.NewDecoder(res.Body).Decode(&ws); err != nil || ws.Live < 2 {
			t.Fatalf("workers: %v, %+v", err, ws)
		}
		n := 0
		for _, w := range ws.Workers {
			n += w.Processed
		}
		return n
	}
	before := processed()
	waitFor("tasks processed while serving", func() bool { return processed() > before+10 })

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo after SIGINT: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("demo still running 60s after SIGINT:\n%s", out.String())
	}
	if _, err := http.Get(base + "healthz"); err == nil {
		t.Error("the observer still answers after the demo ended")
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if ks, err := rdb.Keys(context.Background(), prefix+":*").Result(); err != nil || len(ks) != 0 {
		t.Errorf("keys left: %v %v", ks, err)
	}
}

// Without dtq-miniredis next to dtq or on PATH, in the source tree (go run ./cmd/dtq
// demo), the demo builds it for the run: it serves, and stopping it removes the build.
func TestEmbeddedRedisBuiltFromTheSourceTree(t *testing.T) {
	t.Parallel()
	if _, err := sibling(miniredisBinary); err == nil {
		t.Skip("dtq-miniredis is on PATH: nothing to build")
	}
	r, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	if r.tmp == "" {
		t.Fatal("no build directory: it was not built")
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		r.stop()
		t.Fatalf("PING: %v", err)
	}
	r.stop()
	if _, err := os.Stat(r.tmp); !os.IsNotExist(err) {
		t.Fatalf("the build directory %s is still there: %v", r.tmp, err)
	}
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("it still answers after stop")
	}
}
