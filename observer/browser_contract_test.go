package observer_test

// Browser tests of the parts of the dashboard that use endpoints of the observer's API
// contract which an observer may not serve yet (throughput and retrying counts, the
// succeeded listing, bulk and delete actions on dead tasks, run now, the event stream).
// Each skips, saying so, only when the observer answers that endpoint 404 (or lacks
// the field); against a full observer, each runs.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
)

// probe answers the status of a GET, reading at most the headers (an event stream
// never ends).
func (e *env) probe(path string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

func TestUIThroughputAndRetrying(t *testing.T) {
	e := newEnv(t, nil)
	id := e.enqueue(client.Task{Queue: "tp", Function: "echo", Payload: []byte(`1`)})
	startWorker(t, e, "tp")
	eventually(t, "the task to succeed", func() bool { return e.status("tp", id) == client.StatusSucceeded })
	q := e.get("/api/v1/queues/tp")
	if _, ok := q["throughput"]; !ok {
		t.Skip("GET /api/v1/queues/{q} has no throughput field on this observer yet")
	}
	tb := openTab(t, e, 1280, 900)
	tb.open("#/")
	tb.waitText("figure.throughput figcaption", "processed 1")
	if n := eval[int](tb, `document.querySelectorAll('figure.throughput svg rect.processed').length`); n < 1 {
		t.Fatalf("%d bars of processed tasks", n)
	}
	if _, ok := q["retrying"]; ok {
		tb.waitText(`tr[data-queue="tp"] td.retrying`, "0")
	}
	tb.open("#/queues/tp")
	tb.waitText("figure.throughput figcaption", "processed 1")
	if _, ok := q["retrying"]; ok {
		tb.waitText(`[data-stat="retrying"] dd`, "0")
	}
}

func TestUISucceededTab(t *testing.T) {
	e := newEnv(t, nil)
	id := e.enqueue(client.Task{Queue: "ok", Function: "echo", Payload: []byte(`"done"`)})
	startWorker(t, e, "ok")
	eventually(t, "the task to succeed", func() bool { return e.status("ok", id) == client.StatusSucceeded })
	if r := e.do(http.MethodGet, "/api/v1/queues/ok/tasks?state=succeeded", ""); r.status == http.StatusNotFound || r.status == http.StatusBadRequest {
		t.Skipf("this observer cannot list succeeded tasks yet: %d %s", r.status, r.body)
	}
	tb := openTab(t, e, 1280, 900)
	tb.open("#/queues/ok")
	tb.click(`button[data-key="tab:succeeded"]`)
	tb.waitText(`tr[data-task="`+id+`"]`, id)
	tb.click(`a[data-key="t:` + id + `"]`)
	tb.waitText(`section[data-part="result"] pre.value`, `"done"`)
}

func TestUIRunNow(t *testing.T) {
	e := newEnv(t, nil)
	id := e.enqueue(client.Task{Queue: "later", Function: "echo", Delay: time.Hour})
	startWorker(t, e, "later")
	tb := openTab(t, e, 1280, 900)
	tb.open("#/queues/later/tasks/" + id)
	tb.useToken(token)
	tb.click(`button[data-key="run"]`)
	tb.waitFor("an answer", func() bool { s := tb.text("#status"); return s != "" && !strings.Contains(s, "Token kept") })
	if strings.Contains(tb.text("#status"), "not available") {
		t.Skip("POST /api/v1/queues/{q}/tasks/{id}/run answers 404 on this observer")
	}
	tb.waitFor("the task to run now", func() bool { return e.status("later", id) == client.StatusSucceeded })
}

func TestUIDeleteDeadTasks(t *testing.T) {
	e := newEnv(t, nil)
	var dead []string
	for range 3 {
		e.enqueue(client.Task{Queue: "trash", Function: "echo"})
		dead = append(dead, e.finish("trash", 'd'))
	}
	tb := openTab(t, e, 1280, 900)
	tb.open("#/dead/trash")
	tb.useToken(token)
	tb.waitText(`tr[data-task="`+dead[0]+`"]`, dead[0])
	deadCount := func() int64 {
		n, err := e.rdb.ZCard(context.Background(), e.ks.Queue("trash").Dead()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	tb.click(`button[data-key="del:` + dead[0] + `"]`)
	tb.waitFor("an answer", func() bool { s := tb.text("#status"); return s != "" && !strings.Contains(s, "Token kept") })
	if strings.Contains(tb.text("#status"), "not available") {
		t.Skip("DELETE /api/v1/queues/{q}/dead/{id} answers 404 on this observer")
	}
	tb.waitFor("the dead task deleted", func() bool { return deadCount() == 2 })

	// Delete all asks first; "No" changes nothing.
	tb.click(`button[data-key="del-all"]`)
	tb.waitText(".confirm", "Sure?")
	tb.click(`button[data-key="confirm-no"]`)
	tb.waitText("#status", "Nothing changed")
	if n := deadCount(); n != 2 {
		t.Fatalf("dead tasks after No: %d", n)
	}
	tb.click(`button[data-key="del-all"]`)
	tb.click(`button[data-key="confirm-yes"]`)
	tb.waitFor("an answer", func() bool {
		return strings.Contains(tb.text("#status"), "Deleted") || strings.Contains(tb.text("#status"), "not available")
	})
	if strings.Contains(tb.text("#status"), "not available") {
		t.Skip("POST /api/v1/queues/{q}/dead/delete answers 404 on this observer")
	}
	tb.waitFor("every dead task deleted", func() bool { return deadCount() == 0 })
	tb.waitText("main", "No dead tasks.")
}

func TestUIEventsLive(t *testing.T) {
	e := newEnv(t, nil)
	if s := e.probe("/api/v1/events"); s == http.StatusNotFound {
		t.Skip("GET /api/v1/events answers 404 on this observer")
	}
	tb := openTab(t, e, 1280, 900)
	tb.open("#/events")
	tb.waitText("main p.note", "Live")
	w := startWorker(t, e, "ev")
	tb.waitText(`li[data-type="WORKER_STARTED"]`, w.ID())
	tb.screenshot("events")
}

// Without an event stream (an older observer), the events page shows the changes it
// sees by polling.
func TestUIEventsFallBackToPolling(t *testing.T) {
	e := newEnv(t, nil)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/events" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not found","code":"not_found"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(old.Close)
	e.enqueue(client.Task{Queue: "feed", Function: "echo"})
	tb := openTab(t, e, 1280, 900)
	tb.do("open the events page", navigate(old.URL+"/#/events"))
	tb.waitText("main p.note", "watching 1 queues") // the first read, to compare the next ones with
	e.enqueue(client.Task{Queue: "feed", Function: "echo"})
	tb.waitText(`li[data-type="QUEUE_CHANGED"]`, "lag 1 → 2")
	if s := e.probe("/api/v1/events"); s == http.StatusNotFound {
		tb.screenshot("events")
	}
}
