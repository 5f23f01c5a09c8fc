package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// BenchmarkEnqueueManyPythonVsGo enqueues 50 000 tasks in calls of 500, once with the
// Go client's EnqueueMany and once with the Python client's enqueue_many, on one
// dedicated redis-server, and reports both rates (one run each per iteration):
//
//	go test ./clients/python -run '^$' -bench EnqueueManyPythonVsGo -benchtime 1x
func BenchmarkEnqueueManyPythonVsGo(b *testing.B) {
	needPython(b)
	const n, batch = 50_000, 500
	srv := redistest.Start(b, redistest.Options{})
	rdb := srv.Client(b)
	ctx := context.Background()
	dir, err := filepath.Abs(".")
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		c := client.New(rdb, client.Options{Prefix: "go"})
		if _, _, err := c.Enqueue(ctx, client.Task{Queue: "warm", Function: "noop"}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < n; i += batch {
			ts := make([]client.Task, batch)
			for j := range ts {
				ts[j] = client.Task{Queue: "bench", Function: "noop", Payload: []byte(`{"n":1}`)}
			}
			rs, err := c.EnqueueMany(ctx, ts)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				if !r.Created {
					b.Fatalf("enqueue: %v", r.Err)
				}
			}
		}
		goS := time.Since(start).Seconds()

		cmd := exec.Command(python, filepath.Join(dir, "testdata", "bench.py"), strconv.Itoa(srv.Port), "py",
			strconv.Itoa(n), strconv.Itoa(batch))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("python: %v\n%s", err, out)
		}
		pyS, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatalf("python printed %q", out)
		}
		for prefix, want := range map[string]int64{"go": n, "py": n} {
			if got := rdb.XLen(ctx, prefix+":{bench}:p0").Val(); got != want {
				b.Fatalf("%s: %d entries, want %d", prefix, got, want)
			}
		}
		b.ReportMetric(n/goS, "go_tasks/s")
		b.ReportMetric(n/pyS, "python_tasks/s")
		b.Logf("%d tasks in calls of %d: Go EnqueueMany %.3f s (%.0f tasks/s), Python enqueue_many %.3f s (%.0f tasks/s)",
			n, batch, goS, n/goS, pyS, n/pyS)
	}
}
