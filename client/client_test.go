package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func setup(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	srv := redistest.Shared(t)
	return client.New(srv.Client(t), client.Options{Prefix: redistest.Prefix(t), MaxPayload: 1024}), context.Background()
}

func TestEnqueueRejectsBadInputAndCreatesNothing(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	for _, tc := range []struct {
		name string
		task client.Task
		want error
	}{
		{"queue with braces", client.Task{Queue: "a{b}", Function: "noop"}, client.ErrInvalid},
		{"queue with colon", client.Task{Queue: "a:b", Function: "noop"}, client.ErrInvalid},
		{"queue of 10000 bytes", client.Task{Queue: strings.Repeat("q", 10000), Function: "noop"}, client.ErrInvalid},
		{"no function", client.Task{Queue: "q"}, client.ErrInvalid},
		{"priority 10", client.Task{Queue: "q", Function: "noop", Priority: 10}, client.ErrInvalid},
		{"priority -1", client.Task{Queue: "q", Function: "noop", Priority: -1}, client.ErrInvalid},
		{"payload over the limit", client.Task{Queue: "q", Function: "noop", Payload: make([]byte, 1025)}, client.ErrPayloadTooBig},
		{"negative retries", client.Task{Queue: "q", Function: "noop", MaxRetries: client.Retries(-2)}, client.ErrInvalid},
		{"bad id", client.Task{Queue: "q", Function: "noop", ID: "has space"}, client.ErrInvalid},
	} {
		_, _, err := c.Enqueue(ctx, tc.task)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	qi, err := c.Queue(ctx, "q")
	if err != nil || qi.Lag != 0 || qi.Scheduled != 0 {
		t.Fatalf("queue after refused enqueues = %+v, %v; want empty", qi, err)
	}
}

func TestUniqueKey(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	first, created, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop", Unique: "order-1"})
	if err != nil || !created {
		t.Fatal(err)
	}
	again, created, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "other", Unique: "order-1", Delay: time.Hour})
	if err != nil || created || again != first {
		t.Fatalf("second enqueue = %q created=%v err=%v; want %q, nothing created", again, created, err, first)
	}
	qi, _ := c.Queue(ctx, "q")
	if qi.Lag != 1 || qi.Scheduled != 0 {
		t.Fatalf("queue = %+v, want exactly the first task", qi)
	}
	// Cancelling the first frees nothing until its record expires: the key still maps to it.
	if err := c.Cancel(ctx, "q", first); err != nil {
		t.Fatal(err)
	}
	if id, created, _ := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop", Unique: "order-1"}); created || id != first {
		t.Fatalf("enqueue after cancel = %q created=%v", id, created)
	}
}

func TestEnqueueManyAndInspect(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	ts := []client.Task{
		{Queue: "q", Function: "noop", Priority: 9},
		{Queue: "q", Function: "noop", Priority: 9},
		{Queue: "q", Function: "noop", Priority: 0},
		{Queue: "q", Function: "noop", Delay: time.Hour},
		{Queue: "bad queue", Function: "noop"},
	}
	res, err := c.EnqueueMany(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:4] {
		if r.Err != nil || !r.Created || r.ID == "" {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
	if !errors.Is(res[4].Err, client.ErrInvalid) {
		t.Fatalf("bad task: %+v, want ErrInvalid", res[4])
	}
	qi, err := c.Queue(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Lag != 3 || qi.Priorities[0].Priority != 9 || qi.Priorities[0].Lag != 2 || qi.Priorities[9].Lag != 1 || qi.Scheduled != 1 {
		t.Fatalf("queue = %+v", qi)
	}
	ti, err := c.Get(ctx, "q", res[3].ID)
	if err != nil || ti.Status != "scheduled" || ti.RunAt == 0 {
		t.Fatalf("delayed task = %+v, %v", ti, err)
	}
	if _, err := c.Get(ctx, "q", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a missing task: %v", err)
	}
	names, err := c.Queues(ctx)
	if err != nil || len(names) != 1 || names[0] != "q" {
		t.Fatalf("queues = %v, %v", names, err)
	}
}
