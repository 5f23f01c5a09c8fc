package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// inspect queue prints the queue's count of trimmed dead tasks (0 before any trim).
func TestInspectQueueShowsDeadTrimmed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix}
	out, _, code := dtq(t, env, "inspect", "queue", "mail")
	if code != 0 || !strings.Contains(out, `"dead_trimmed": 0`) {
		t.Fatalf("inspect queue before any trim: exit %d, %s", code, out)
	}
	q := keys.New(prefix).Queue("mail")
	srv.Client(t).HSet(context.Background(), q.Stats(), keys.StatDeadTrimmed, 7)
	out, _, code = dtq(t, env, "inspect", "queue", "mail")
	if code != 0 || !strings.Contains(out, `"dead_trimmed": 7`) {
		t.Fatalf("inspect queue: exit %d, %s", code, out)
	}
}
