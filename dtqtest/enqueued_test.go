package dtqtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/dtqtest"
	"github.com/dtq/dtq/internal/redistest"
)

func newClient(t *testing.T) *client.Client {
	t.Helper()
	return client.New(redistest.Shared(t).Client(t), client.Options{Prefix: redistest.Prefix(t)})
}

func enqueue(t *testing.T, c *client.Client, task client.Task) string {
	t.Helper()
	id, created, err := c.Enqueue(context.Background(), task)
	if err != nil || !created {
		t.Fatalf("enqueue: %v (created %v)", err, created)
	}
	return id
}

func ptr[T any](v T) *T { return &v }

func TestEnqueuedMatches(t *testing.T) {
	c := newClient(t)
	before := time.Now()
	a := enqueue(t, c, client.Task{Queue: "emails", Function: "send", Payload: []byte(`{"to":"a@b.c","n":1}`), Priority: 7,
		MaxRetries: client.Retries(2), Timeout: 5 * time.Second, Unique: "welcome-a"})
	b := enqueue(t, c, client.Task{Queue: "emails", Function: "remind", Payload: []byte("plain text"), Delay: time.Hour})
	after := time.Now()

	jobs := dtqtest.Enqueued(t, c, "emails")
	if len(jobs) != 2 || jobs[0].ID != a || jobs[0].State != client.StateQueued || jobs[1].ID != b || jobs[1].State != client.StateScheduled {
		t.Fatalf("enqueued %+v", jobs)
	}
	rec := &recorder{TB: t}
	j := dtqtest.RequireEnqueued(rec, c, "emails", dtqtest.Want{
		Function: "send", Payload: map[string]any{"n": 1, "to": "a@b.c"}, Priority: ptr(7), MaxRetries: ptr(2),
		Timeout: ptr(5 * time.Second), Unique: "welcome-a", RunAfter: before, RunBefore: after, State: client.StateQueued,
	})
	if len(rec.errors)+len(rec.fatals) != 0 || j == nil || j.ID != a {
		t.Fatalf("a match failed: %q %q %+v", rec.errors, rec.fatals, j)
	}
	j = dtqtest.RequireEnqueued(rec, c, "emails", dtqtest.Want{Function: "remind", Payload: "plain text",
		RunAfter: before.Add(time.Hour), RunBefore: after.Add(time.Hour), MaxRetries: ptr(-1), Timeout: ptr(time.Duration(0))})
	if len(rec.errors)+len(rec.fatals) != 0 || j == nil || j.ID != b {
		t.Fatalf("the delayed task: %q %q %+v", rec.errors, rec.fatals, j)
	}
	if j := dtqtest.RequireEnqueued(rec, c, "emails", dtqtest.Want{Payload: []byte(`{ "n": 1, "to": "a@b.c" }`)}); j == nil || j.ID != a || len(rec.errors) != 0 {
		t.Fatalf("JSON-equal bytes: %q", rec.errors)
	}
	dtqtest.RequireNotEnqueued(rec, c, "emails", dtqtest.Want{Function: "send", Priority: ptr(3)})
	dtqtest.RequireNotEnqueued(rec, c, "other", dtqtest.Want{})
	if len(rec.errors)+len(rec.fatals) != 0 {
		t.Fatalf("not enqueued: %q %q", rec.errors, rec.fatals)
	}
}

// A mismatch fails the test, naming each task there and every field that differs.
func TestEnqueuedMismatchFails(t *testing.T) {
	c := newClient(t)
	a := enqueue(t, c, client.Task{Queue: "emails", Function: "send", Payload: []byte(`{"to":"a@b.c"}`), Priority: 7})
	enqueue(t, c, client.Task{Queue: "emails", Function: "noop"})
	for _, c2 := range []struct {
		want  dtqtest.Want
		texts []string
	}{
		{dtqtest.Want{Function: "send", Priority: ptr(3)}, []string{"no task of the 2 waiting", a + " (send, queued): priority 7, want 3", `function "noop", want "send"`}},
		{dtqtest.Want{Payload: map[string]string{"to": "x@y.z"}}, []string{`payload "{\"to\":\"a@b.c\"}", want "{\"to\":\"x@y.z\"}"`}},
		{dtqtest.Want{Payload: "{\"to\":\"a@b.c\"} "}, nil}, // JSON-equal: a match
		{dtqtest.Want{Function: "send", RunAfter: time.Now().Add(time.Minute)}, []string{"due ", "before "}},
		{dtqtest.Want{Function: "send", State: client.StateScheduled}, []string{"state queued, want scheduled"}},
		{dtqtest.Want{Function: "send", Unique: "k", MaxRetries: ptr(0), Timeout: ptr(time.Second)}, []string{`unique "", want "k"`, "max_retries -1, want 0", "timeout 0s, want 1s"}},
	} {
		rec := &recorder{TB: t}
		j := dtqtest.RequireEnqueued(rec, c, "emails", c2.want)
		if c2.texts == nil {
			if len(rec.errors) != 0 || j == nil {
				t.Fatalf("%s: %q", c2.want, rec.errors)
			}
			continue
		}
		if len(rec.errors) != 1 || j != nil {
			t.Fatalf("%s: errors %q, job %+v", c2.want, rec.errors, j)
		}
		for _, want := range c2.texts {
			if !strings.Contains(rec.errors[0], want) {
				t.Errorf("%s: the failure %q does not say %q", c2.want, rec.errors[0], want)
			}
		}
	}
	rec := &recorder{TB: t}
	dtqtest.RequireEnqueued(rec, c, "empty", dtqtest.Want{Function: "send"})
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], `no task waits in queue "empty"; want {function=send}`) {
		t.Fatalf("empty queue: %q", rec.errors)
	}
	rec = &recorder{TB: t}
	dtqtest.RequireNotEnqueued(rec, c, "emails", dtqtest.Want{Function: "send"})
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], a) || !strings.Contains(rec.errors[0], "want none") {
		t.Fatalf("not enqueued, but it is: %q", rec.errors)
	}
	rec = &recorder{TB: t}
	dtqtest.Enqueued(rec, c, "bad queue name")
	if len(rec.fatals) != 1 || !strings.Contains(rec.fatals[0], "bad queue name") {
		t.Fatalf("a bad queue name: %q", rec.fatals)
	}
}

// Redis starts a server of the test's own.
func TestRedis(t *testing.T) {
	rdb := dtqtest.Redis(t)
	c := client.New(rdb, client.Options{})
	id := enqueue(t, c, client.Task{Queue: "default", Function: "noop"})
	dtqtest.RequireEnqueued(t, c, "default", dtqtest.Want{Function: "noop"})
	if jobs := dtqtest.Enqueued(t, c, "default"); len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("%+v", jobs)
	}
}
