package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// dtq enqueue --wait prints the id, then the final record; exit 0 only when the task
// succeeded. Bad --wait-timeout values exit 2; a task that does not end in time exits 1.
func TestEnqueueWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t)}
	startWorker(t, env, "PORT=0", "DTQ_RETRY_BASE_MS=1", "DTQ_RETRY_MAX_MS=5")

	out, errOut, code := dtq(t, env, "enqueue", "--function", "echo", "--payload", `{"a":1}`, "--wait")
	lines := strings.SplitN(out, "\n", 2)
	var ti client.TaskInfo
	if code != 0 || len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &ti) != nil || ti.ID != strings.TrimSpace(lines[0]) || ti.Status != client.StatusSucceeded || string(ti.Result) != `{"a":1}` {
		t.Fatalf("enqueue --wait of echo: exit %d out %q err %q", code, out, errOut)
	}

	out, errOut, code = dtq(t, env, "enqueue", "--function", "fail", "--payload", `{"times":5}`, "--max-retries", "1", "--wait")
	lines = strings.SplitN(out, "\n", 2)
	if code != 1 || len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &ti) != nil || ti.Status != client.StatusDead || ti.Attempt != 2 || !strings.Contains(errOut, "ended dead") {
		t.Fatalf("enqueue --wait of a failing task: exit %d out %q err %q; want 1, the dead record", code, out, errOut)
	}

	out, errOut, code = dtq(t, env, "enqueue", "--function", "echo", "--delay", "1h", "--wait", "--wait-timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "had not ended after 300ms") || strings.Count(out, "\n") != 1 {
		t.Fatalf("enqueue --wait past its timeout: exit %d out %q err %q", code, out, errOut)
	}

	for _, v := range []string{"-1s", "25h", "soon"} {
		if _, errOut, code := dtq(t, env, "enqueue", "--function", "echo", "--wait", "--wait-timeout", v); code != 2 || errOut == "" {
			t.Errorf("--wait-timeout %s: exit %d err %q; want 2 and a reason", v, code, errOut)
		}
	}
}
