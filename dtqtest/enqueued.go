package dtqtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// Job is a task found waiting in a queue: its record as client.Get reads it, and the
// listing (client.List) it was found in.
type Job struct {
	client.TaskInfo
	State client.Status // client.StateQueued or client.StateScheduled
}

// Enqueued lists the tasks of queue that wait to run: queued ones (every band, 9
// first, oldest first in a band) then scheduled ones (soonest first). Retrying,
// running and finished tasks are not listed. A read that fails fails the test.
func Enqueued(t testing.TB, c *client.Client, queue string) []Job {
	t.Helper()
	ctx := context.Background()
	var out []Job
	for _, st := range []client.Status{client.StateQueued, client.StateScheduled} {
		cursor := ""
		for {
			p, err := c.List(ctx, queue, client.ListOptions{State: st, Band: -1, Cursor: cursor, Limit: client.MaxListLimit})
			if err != nil {
				t.Fatalf("dtqtest: list the %s tasks of %s: %v", st, queue, err)
				return nil
			}
			for _, it := range p.Items {
				if it.Missing || it.Malformed {
					continue
				}
				ti, err := c.Get(ctx, queue, it.ID)
				if err != nil {
					t.Fatalf("dtqtest: read task %s of %s: %v", it.ID, queue, err)
					return nil
				}
				out = append(out, Job{TaskInfo: *ti, State: st})
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
		}
	}
	return out
}

// Want describes an enqueued task. Every field left at its zero value (nil for the
// pointers) matches anything.
type Want struct {
	Function string
	// Payload is []byte, string or json.RawMessage: equal as JSON when both it and the
	// stored payload are JSON, else byte for byte; any other value is compared as its
	// JSON encoding.
	Payload any
	// Priority, MaxRetries (-1 for "the function's default") and Timeout (0 for "the
	// function's default") as stored.
	Priority   *int
	MaxRetries *int
	Timeout    *time.Duration
	Unique     string
	// RunAfter and RunBefore bound when the task is due (run_at; a task enqueued to run
	// at once is due at its enqueue time). Either may be zero.
	RunAfter, RunBefore time.Time
	// State is client.StateQueued or client.StateScheduled ("" either).
	State client.Status
}

// RequireEnqueued fails the test (t.Errorf) unless a task waiting in queue matches
// want; the failure lists the tasks there and how each differs. It returns the first
// match, or nil.
func RequireEnqueued(t testing.TB, c *client.Client, queue string, want Want) *Job {
	t.Helper()
	jobs := Enqueued(t, c, queue)
	var report strings.Builder
	for i := range jobs {
		diffs := want.diff(&jobs[i])
		if len(diffs) == 0 {
			return &jobs[i]
		}
		fmt.Fprintf(&report, "\n  %s (%s, %s): %s", jobs[i].ID, jobs[i].Function, jobs[i].State, strings.Join(diffs, "; "))
	}
	if len(jobs) == 0 {
		t.Errorf("dtqtest: no task waits in queue %q; want %s", queue, want)
	} else {
		t.Errorf("dtqtest: no task of the %d waiting in queue %q matches %s:%s", len(jobs), queue, want, report.String())
	}
	return nil
}

// RequireNotEnqueued fails the test (t.Errorf) when a task waiting in queue matches
// want, naming each one.
func RequireNotEnqueued(t testing.TB, c *client.Client, queue string, want Want) {
	t.Helper()
	var found []string
	for _, j := range Enqueued(t, c, queue) {
		if len(want.diff(&j)) == 0 {
			found = append(found, fmt.Sprintf("%s (%s, %s, payload %q)", j.ID, j.Function, j.State, j.Payload))
		}
	}
	if len(found) > 0 {
		t.Errorf("dtqtest: queue %q holds %d task(s) matching %s, want none: %s", queue, len(found), want, strings.Join(found, ", "))
	}
}

// String describes the fields want checks.
func (w Want) String() string {
	var p []string
	if w.Function != "" {
		p = append(p, "function="+w.Function)
	}
	if w.Payload != nil {
		b, err := payloadBytes(w.Payload)
		if err != nil {
			p = append(p, "payload=("+err.Error()+")")
		} else {
			p = append(p, fmt.Sprintf("payload=%q", b))
		}
	}
	if w.Priority != nil {
		p = append(p, fmt.Sprintf("priority=%d", *w.Priority))
	}
	if w.MaxRetries != nil {
		p = append(p, fmt.Sprintf("max_retries=%d", *w.MaxRetries))
	}
	if w.Timeout != nil {
		p = append(p, fmt.Sprintf("timeout=%s", *w.Timeout))
	}
	if w.Unique != "" {
		p = append(p, "unique="+w.Unique)
	}
	if !w.RunAfter.IsZero() {
		p = append(p, "due at or after "+w.RunAfter.UTC().Format(time.RFC3339Nano))
	}
	if !w.RunBefore.IsZero() {
		p = append(p, "due at or before "+w.RunBefore.UTC().Format(time.RFC3339Nano))
	}
	if w.State != "" {
		p = append(p, "state="+string(w.State))
	}
	if len(p) == 0 {
		return "{any task}"
	}
	return "{" + strings.Join(p, " ") + "}"
}

// diff names every field of j that want does not match.
func (w Want) diff(j *Job) []string {
	var d []string
	if w.Function != "" && j.Function != w.Function {
		d = append(d, fmt.Sprintf("function %q, want %q", j.Function, w.Function))
	}
	if w.Payload != nil {
		b, err := payloadBytes(w.Payload)
		if err != nil {
			d = append(d, "want payload: "+err.Error())
		} else if !samePayload([]byte(j.Payload), b) {
			d = append(d, fmt.Sprintf("payload %q, want %q", j.Payload, b))
		}
	}
	if w.Priority != nil && j.Priority != *w.Priority {
		d = append(d, fmt.Sprintf("priority %d, want %d", j.Priority, *w.Priority))
	}
	if w.MaxRetries != nil && j.MaxRetries != int64(*w.MaxRetries) {
		d = append(d, fmt.Sprintf("max_retries %d, want %d", j.MaxRetries, *w.MaxRetries))
	}
	if w.Timeout != nil && j.TimeoutMS != w.Timeout.Milliseconds() {
		d = append(d, fmt.Sprintf("timeout %s, want %s", time.Duration(j.TimeoutMS)*time.Millisecond, *w.Timeout))
	}
	if w.Unique != "" && j.Unique != w.Unique {
		d = append(d, fmt.Sprintf("unique %q, want %q", j.Unique, w.Unique))
	}
	due := time.UnixMilli(j.RunAt)
	if j.RunAt == 0 {
		due = time.UnixMilli(j.CreatedAt)
	}
	if !w.RunAfter.IsZero() && due.Before(w.RunAfter.Truncate(time.Millisecond)) {
		d = append(d, fmt.Sprintf("due %s, before %s", due.UTC().Format(time.RFC3339Nano), w.RunAfter.UTC().Format(time.RFC3339Nano)))
	}
	if !w.RunBefore.IsZero() && due.After(w.RunBefore) {
		d = append(d, fmt.Sprintf("due %s, after %s", due.UTC().Format(time.RFC3339Nano), w.RunBefore.UTC().Format(time.RFC3339Nano)))
	}
	if w.State != "" && j.State != w.State {
		d = append(d, fmt.Sprintf("state %s, want %s", j.State, w.State))
	}
	return d
}

func payloadBytes(v any) ([]byte, error) {
	switch p := v.(type) {
	case []byte:
		return p, nil
	case string:
		return []byte(p), nil
	case json.RawMessage:
		return p, nil
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encode %T as JSON: %v", v, err)
		}
		return b, nil
	}
}

// samePayload: equal as JSON when both are JSON, else byte for byte.
func samePayload(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return bytes.Equal(gb, wb)
}

// Redis starts a redis-server of its own (redis-server must be on PATH) on a free
// port for the test, and returns a client on it; both end with the test.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	return redistest.Start(t, redistest.Options{}).Client(t)
}
