package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

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
