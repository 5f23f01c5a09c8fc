package observer_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/dtq/dtq/client"
)

// GET /api/v1/cron lists the periodic entries with their next tick; pause and resume
// are actions (the token), an unknown entry is a 404, a bad name a 400.
func TestCronEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, ce := range []client.CronEntry{
		{Name: "sweep", Spec: "@every 30s", Queue: "default", Function: "noop"},
		{Name: "nightly", Spec: "CRON_TZ=Europe/Paris 30 2 * * *", Queue: "reports", Function: "echo", Payload: `<img src=x onerror=alert(1)>`},
	} {
		if _, err := e.c.AddCron(ctx, ce); err != nil {
			t.Fatal(err)
		}
	}
	list := e.get("/api/v1/cron")["entries"].([]any)
	if len(list) != 2 {
		t.Fatalf("entries %v, want 2", list)
	}
	first, second := list[0].(map[string]any), list[1].(map[string]any)
	if first["name"] != "nightly" || second["name"] != "sweep" || first["payload"] != `<img src=x onerror=alert(1)>` {
		t.Fatalf("entries %v: want nightly then sweep, the payload as stored", list)
	}
	if n, _ := second["next_ms"].(float64); n <= 0 {
		t.Fatalf("sweep next_ms %v, want its next tick", second["next_ms"])
	}

	wantError(t, e.do(http.MethodPost, "/api/v1/cron/sweep/pause", ""), http.StatusUnauthorized, "unauthorized", "")
	r := e.do(http.MethodPost, "/api/v1/cron/sweep/pause", token)
	if m := r.json(t); r.status != http.StatusOK || m["paused"] != true || m["next_ms"] != nil {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if ci, err := e.c.Cron(ctx, "sweep"); err != nil || !ci.Paused || ci.NextMS != 0 {
		t.Fatalf("after pause: %+v %v", ci, err)
	}
	r = e.do(http.MethodPost, "/api/v1/cron/sweep/resume", token)
	if m := r.json(t); r.status != http.StatusOK || m["paused"] != false {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if ci, err := e.c.Cron(ctx, "sweep"); err != nil || ci.Paused || ci.NextMS <= 0 {
		t.Fatalf("after resume: %+v %v", ci, err)
	}
	wantError(t, e.do(http.MethodPost, "/api/v1/cron/nope/pause", token), http.StatusNotFound, "not_found", "no such cron entry")
	wantError(t, e.do(http.MethodPost, "/api/v1/cron/b%20d/resume", token), http.StatusBadRequest, "bad_name", "name")
	wantError(t, e.do(http.MethodGet, "/api/v1/cron/sweep/pause", token), http.StatusMethodNotAllowed, "method_not_allowed", "")
}
