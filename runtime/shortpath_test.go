package runtime_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

// monitor counts, from MONITOR on a connection of its own, the commands the server runs
// whose line ends with each suffix (case-insensitive); count reads up to a marker sent
// after everything else, so the counts are whole.
type monitor struct {
	lines chan string
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	m := &monitor{lines: make(chan string, 1<<16)}
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("monitor: %q, %v", l, err)
	}
	go func() {
		defer close(m.lines)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- strings.ToLower(strings.TrimRight(l, "\r\n"))
		}
	}()
	return m
}

func (m *monitor) count(t *testing.T, rdb *redis.Client, suffixes ...string) []int {
	t.Helper()
	const marker = "monitor-ends-here"
	if err := rdb.Echo(context.Background(), marker).Err(); err != nil {
		t.Fatal(err)
	}
	n := make([]int, len(suffixes))
	for l := range m.lines {
		if strings.HasSuffix(l, `"`+marker+`"`) {
			return n
		}
		for i, s := range suffixes {
			if strings.HasSuffix(l, strings.ToLower(s)) {
				n[i]++
			}
		}
	}
	t.Fatal("monitor: the connection ended before the marker")
	return nil
}

// A worker's plain successes carry their claim's fence epoch to the completion, which
// then records them without reading their records: MONITOR on a server of this test's
// own sees no read of a record's fence (HMGET … "status" "attempt" "entry", the long
// path's) while a worker runs 300 queued no-op tasks, where each completion made one
// before. The handed-off tasks of an idle worker are read (no claim replied an epoch for
// them): none here, as every task is queued before the worker starts.
func TestWorkerCompletesPlainSuccessesWithoutReadingRecords(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	e := &env{srv: srv, rdb: rdb, prefix: prefix, c: client.New(rdb, client.Options{Prefix: prefix}), ctx: context.Background()}
	const n = 300
	ts := make([]client.Task, n)
	for i := range ts {
		ts[i] = client.Task{Queue: "default", Function: "noop", Priority: i % 3}
	}
	if _, err := e.c.EnqueueMany(e.ctx, ts); err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, srv.Addr())
	rec := newRecorder()
	r := startWorker(t, rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", "16"), nil, rec)
	eventually(t, "every task succeeded", func() bool {
		return rec.count(func(ev runtime.Event) bool { return ev.Type == runtime.EventTaskSucceeded }) == n
	})
	r.stop()
	q := keys.New(prefix).Queue("default")
	for p := range 3 {
		if l := rdb.XLen(e.ctx, q.Stream(p)).Val(); l != 0 {
			t.Fatalf("band %d holds %d entries", p, l)
		}
	}
	// the claim's read of a record, and the completion's long path's
	got := mon.count(t, rdb, `"status" "attempt" "entry" "spec" "payload"`, `"status" "attempt" "entry"`)
	if got[0] != n || got[1] != 0 {
		t.Fatalf("MONITOR saw %d claims' reads of a record and %d completions' for %d tasks, want %d and 0", got[0], got[1], n, n)
	}
}
