package observer_test

import (
	"context"
	"testing"

	"github.com/dtq/dtq/client"
)

// A queue's page data carries its rate and concurrency limits with their use, as dtq
// inspect queue shows them; a queue without limits has none.
func TestQueueShowsItsLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(client.Task{Queue: "lim", Function: "noop"})
	e.enqueue(client.Task{Queue: "free", Function: "noop"})
	if err := e.c.SetLimit(context.Background(), "lim", client.Limit{Function: "send", Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
	m := e.get("/api/v1/queues/lim")
	ls, ok := m["limits"].([]any)
	if !ok || len(ls) != 1 {
		t.Fatalf("queue lim: limits %v", m["limits"])
	}
	l := ls[0].(map[string]any)
	if l["function"] != "send" || l["concurrency"] != float64(5) || l["running"] != float64(0) {
		t.Fatalf("limit %v", l)
	}
	if m := e.get("/api/v1/queues/free"); m["limits"] != nil {
		t.Fatalf("queue free: limits %v", m["limits"])
	}
}
