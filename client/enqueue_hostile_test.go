package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// What a producer may not enqueue is refused with a clear error before anything is
// written: queue names with braces, colons or 10 000 bytes, priorities out of range,
// payloads over the limit, function names empty or too long, ids that would break keys.
func TestEnqueueRefusesHostileInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix, MaxPayload: 1024})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		task client.Task
		want error
		says string
	}{
		{"brace", client.Task{Queue: "a{b}", Function: "noop"}, client.ErrInvalid, "queue name"},
		{"close brace", client.Task{Queue: "a}", Function: "noop"}, client.ErrInvalid, "queue name"},
		{"colon", client.Task{Queue: "a:b", Function: "noop"}, client.ErrInvalid, "queue name"},
		{"10000 bytes", client.Task{Queue: strings.Repeat("q", 10000), Function: "noop"}, client.ErrInvalid, "10000 bytes"},
		{"empty queue", client.Task{Queue: "", Function: "noop"}, client.ErrInvalid, "queue name"},
		{"priority -1", client.Task{Queue: "q", Function: "noop", Priority: -1}, client.ErrInvalid, "priority -1"},
		{"priority 99", client.Task{Queue: "q", Function: "noop", Priority: 99}, client.ErrInvalid, "priority 99"},
		{"payload", client.Task{Queue: "q", Function: "noop", Payload: make([]byte, 1025)}, client.ErrPayloadTooBig, "1025 bytes"},
		{"no function", client.Task{Queue: "q"}, client.ErrInvalid, "function name"},
		{"long function", client.Task{Queue: "q", Function: strings.Repeat("f", 129)}, client.ErrInvalid, "function name"},
		{"id with brace", client.Task{Queue: "q", Function: "noop", ID: "x{y}"}, client.ErrInvalid, "id"},
		{"retries", client.Task{Queue: "q", Function: "noop", MaxRetries: client.Retries(-5)}, client.ErrInvalid, "max retries"},
	} {
		_, _, err := c.Enqueue(ctx, tc.task)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
		res, err := c.EnqueueMany(ctx, []client.Task{tc.task})
		if err != nil || !errors.Is(res[0].Err, tc.want) {
			t.Errorf("%s: EnqueueMany = %+v, %v", tc.name, res, err)
		}
	}
	if ks, _ := rdb.Keys(ctx, prefix+":*").Result(); len(ks) != 0 {
		t.Fatalf("refused tasks left keys: %v", ks)
	}
	for _, q := range []string{"a{b}", "a:b", strings.Repeat("q", 10000)} {
		if _, err := c.Queue(ctx, q); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("inspect %q: %v, want ErrInvalid", q[:min(len(q), 10)], err)
		}
	}
}
