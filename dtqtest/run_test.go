package dtqtest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/dtqtest"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// recorder is a testing.TB that keeps the failures it is told of instead of failing.
type recorder struct {
	testing.TB
	errors, fatals []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}

func blockOnCtx(ctx context.Context, _ *runtime.Task) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestRunSucceeds(t *testing.T) {
	r := dtqtest.Run(t, func(_ context.Context, tk *runtime.Task) ([]byte, error) {
		return []byte(fmt.Sprintf("%s %s %s %d p%d %s", tk.ID, tk.Queue, tk.Function, tk.Attempt, tk.Priority, tk.Payload)), nil
	}, dtqtest.Task{ID: "t1", Queue: "mail", Function: "send", Attempt: 2, Failures: 1, Priority: 7, Payload: []byte(`{"to":"a"}`)})
	if r.Outcome != dtqtest.Succeeded || string(r.Result) != `t1 mail send 2 p7 {"to":"a"}` || r.Err != nil || r.Error != "" || r.Attempt != 2 {
		t.Fatalf("%+v", r)
	}
	if r.MaxRetries != runtime.DefaultMaxRetries || r.Timeout != 30*time.Minute {
		t.Fatalf("budget %d, limit %s: want the worker defaults", r.MaxRetries, r.Timeout)
	}
}

// A function blocking on its context gets the timeout the worker would choose: the
// task's, else the function's, else the worker's; it is a retry while the budget lasts.
func TestRunTimeout(t *testing.T) {
	reg := runtime.NewRegistry()
	reg.Register("block", blockOnCtx, runtime.FuncOptions{Timeout: 15 * time.Millisecond, MaxRetries: -1})
	for _, c := range []struct {
		name     string
		w        dtqtest.Worker
		task     dtqtest.Task
		limit    time.Duration
		outcome  dtqtest.Outcome
		failures int
	}{
		{"task's own", dtqtest.Worker{}, dtqtest.Task{Function: "block", Timeout: 10 * time.Millisecond, MaxRetries: client.Retries(1)}, 10 * time.Millisecond, dtqtest.Retry, 0},
		{"the last retry", dtqtest.Worker{}, dtqtest.Task{Function: "block", Timeout: 10 * time.Millisecond, MaxRetries: client.Retries(1), Attempt: 2, Failures: 1}, 10 * time.Millisecond, dtqtest.Dead, 1},
		{"function's", dtqtest.Worker{}, dtqtest.Task{Function: "block"}, 15 * time.Millisecond, dtqtest.Retry, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.w.Run(t, reg, c.task)
			if r.Outcome != c.outcome || r.Timeout != c.limit || !errors.Is(r.Err, context.DeadlineExceeded) ||
				r.Error != "timed out after "+c.limit.String()+": context deadline exceeded" {
				t.Fatalf("%+v", r)
			}
		})
	}
	r := dtqtest.Worker{DefaultTimeout: 5 * time.Millisecond}.Run(t, blockOnCtx, dtqtest.Task{})
	if r.Outcome != dtqtest.Retry || r.Timeout != 5*time.Millisecond || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("worker's default: %+v", r)
	}
}

func TestRunPanic(t *testing.T) {
	fn := func(context.Context, *runtime.Task) ([]byte, error) { panic("boom") }
	r := dtqtest.Run(t, fn, dtqtest.Task{})
	var pe *runtime.PanicError
	if r.Outcome != dtqtest.Retry || !r.Panicked || !errors.As(r.Err, &pe) || pe.Value != "boom" || r.Error != "function panicked: boom" {
		t.Fatalf("%+v", r)
	}
	if r := dtqtest.Run(t, fn, dtqtest.Task{MaxRetries: client.Retries(0)}); r.Outcome != dtqtest.Dead || !r.Panicked {
		t.Fatalf("no retries: %+v", r)
	}
}

func TestRunBackoff(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return at }
	fail := func(context.Context, *runtime.Task) ([]byte, error) { return nil, errors.New("no") }
	reg := runtime.NewRegistry()
	reg.Register("f", fail, runtime.FuncOptions{MaxRetries: 10, Backoff: func(n int) time.Duration { return time.Duration(n) * time.Second }})
	r := dtqtest.Worker{Now: clock}.Run(t, reg, dtqtest.Task{Function: "f", Attempt: 3, Failures: 2})
	if r.Outcome != dtqtest.Retry || r.Backoff != 3*time.Second || !r.RetryAt.Equal(at.Add(3*time.Second)) || r.MaxRetries != 10 {
		t.Fatalf("the function's backoff after the third failure: %+v", r)
	}
	// The worker's: base·2ⁿ⁻¹ capped at max, its upper half jittered.
	w := dtqtest.Worker{Now: clock, RetryBase: 100 * time.Millisecond, RetryMax: time.Second}
	for failures, span := range map[int][2]time.Duration{0: {50 * time.Millisecond, 100 * time.Millisecond},
		2: {200 * time.Millisecond, 400 * time.Millisecond}, 6: {500 * time.Millisecond, time.Second}} {
		r := w.Run(t, fail, dtqtest.Task{Failures: failures, MaxRetries: client.Retries(10)})
		if r.Outcome != dtqtest.Retry || r.Backoff < span[0] || r.Backoff > span[1] || !r.RetryAt.Equal(at.Add(r.Backoff)) {
			t.Fatalf("after %d failures: backoff %s, want %s..%s (%+v)", failures, r.Backoff, span[0], span[1], r)
		}
	}
}

// The budget: the task's, else the function's, else the default; SkipRetry kills.
func TestRunRetryBudget(t *testing.T) {
	fail := func(context.Context, *runtime.Task) ([]byte, error) { return nil, errors.New("no") }
	reg := runtime.NewRegistry()
	reg.Register("once", fail, runtime.FuncOptions{MaxRetries: 0})
	if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "once"}); r.Outcome != dtqtest.Dead || r.MaxRetries != 0 || r.Error != "no" {
		t.Fatalf("the function's budget of 0: %+v", r)
	}
	if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "once", MaxRetries: client.Retries(2)}); r.Outcome != dtqtest.Retry || r.MaxRetries != 2 {
		t.Fatalf("the task's budget wins: %+v", r)
	}
	if r := dtqtest.Run(t, fail, dtqtest.Task{Attempt: 4, Failures: 3}); r.Outcome != dtqtest.Dead || r.MaxRetries != runtime.DefaultMaxRetries {
		t.Fatalf("the fourth failure with the default budget: %+v", r)
	}
	errBad := errors.New("bad input")
	r := dtqtest.Run(t, func(context.Context, *runtime.Task) ([]byte, error) { return nil, runtime.SkipRetry(errBad) }, dtqtest.Task{})
	if r.Outcome != dtqtest.Dead || !errors.Is(r.Err, errBad) || r.Error != "bad input" {
		t.Fatalf("SkipRetry: %+v", r)
	}
}

// RunUntilDone counts attempts and failures as the worker does.
func TestRunUntilDone(t *testing.T) {
	var seen []string
	flaky := func(_ context.Context, tk *runtime.Task) ([]byte, error) {
		seen = append(seen, fmt.Sprintf("%d/%d", tk.Attempt, tk.Failures))
		if tk.Attempt < 3 {
			return nil, errors.New("not yet")
		}
		return []byte("ok"), nil
	}
	rs := dtqtest.RunUntilDone(t, flaky, dtqtest.Task{})
	if len(rs) != 3 || rs[0].Outcome != dtqtest.Retry || rs[1].Outcome != dtqtest.Retry || rs[2].Outcome != dtqtest.Succeeded ||
		rs[2].Attempt != 3 || strings.Join(seen, " ") != "1/0 2/1 3/2" {
		t.Fatalf("%+v, seen %v", rs, seen)
	}
	seen = nil
	rs = dtqtest.RunUntilDone(t, flaky, dtqtest.Task{MaxRetries: client.Retries(1)})
	if len(rs) != 2 || rs[1].Outcome != dtqtest.Dead || rs[1].Attempt != 2 {
		t.Fatalf("one retry: %+v", rs)
	}
}

func TestRunUnknownFunctionAndLostWorker(t *testing.T) {
	r := dtqtest.Run(t, runtime.NewRegistry(), dtqtest.Task{Function: "nope"})
	if r.Outcome != dtqtest.Retry || !errors.Is(r.Err, runtime.ErrUnknownFunction) || !strings.Contains(r.Error, `"nope"`) {
		t.Fatalf("unknown: %+v", r)
	}
	ran := false
	fn := func(context.Context, *runtime.Task) ([]byte, error) { ran = true; return nil, nil }
	r = dtqtest.Run(t, fn, dtqtest.Task{Attempt: 2, Failures: 1, Reclaimed: true, MaxRetries: client.Retries(0)})
	if r.Outcome != dtqtest.Dead || ran || !strings.Contains(r.Error, "worker lost") {
		t.Fatalf("reclaimed with no retries left: %+v, ran %v", r, ran)
	}
}

// The worker's context ending while the function runs (a drain deadline) records
// nothing: the task is handed back.
func TestRunHandedBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := dtqtest.Worker{Context: ctx}.Run(t, blockOnCtx, dtqtest.Task{})
	if r.Outcome != dtqtest.HandedBack || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("%+v", r)
	}
}

func TestRunRefusesABadTarget(t *testing.T) {
	for _, target := range []any{nil, "echo", (*runtime.Registry)(nil), runtime.Func(nil)} {
		rec := &recorder{TB: t}
		dtqtest.Run(rec, target, dtqtest.Task{Function: "x"})
		if len(rec.fatals) != 1 || !strings.Contains(rec.fatals[0], "dtqtest.Run") {
			t.Fatalf("%#v: %q", target, rec.fatals)
		}
	}
	rec := &recorder{TB: t}
	dtqtest.Run(rec, runtime.NewRegistry(), dtqtest.Task{})
	if len(rec.fatals) != 1 || !strings.Contains(rec.fatals[0], "Task.Function") {
		t.Fatalf("a registry without a function name: %q", rec.fatals)
	}
}

// The same failures run by a real worker over Redis record the same outcome and text.
func TestRunMatchesTheWorker(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	reg := runtime.NewRegistry()
	reg.Register("panics", func(context.Context, *runtime.Task) ([]byte, error) { panic("boom") }, runtime.FuncOptions{MaxRetries: 0})
	reg.Register("blocks", blockOnCtx, runtime.FuncOptions{MaxRetries: 0})
	reg.Register("refuses", func(context.Context, *runtime.Task) ([]byte, error) {
		return nil, runtime.SkipRetry(errors.New("bad input"))
	}, runtime.FuncOptions{MaxRetries: 5})
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": prefix, "DTQ_QUEUES": "q", "DTQ_LOG_LEVEL": "error",
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, fn := range []string{"panics", "blocks", "refuses"} {
		id, _, err := c.Enqueue(context.Background(), client.Task{Queue: "q", Function: fn, Timeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var ti *client.TaskInfo
		deadline := time.Now().Add(30 * time.Second)
		for ti == nil || ti.Status != client.StatusDead {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not dead in time: %+v", fn, ti)
			}
			time.Sleep(5 * time.Millisecond)
			if ti, err = c.Get(context.Background(), "q", id); err != nil {
				t.Fatal(err)
			}
		}
		r := dtqtest.Run(t, reg, dtqtest.Task{Function: fn, Timeout: 20 * time.Millisecond})
		if r.Outcome != dtqtest.Dead || r.Error != ti.Error {
			t.Fatalf("%s: inline %s %q; the worker recorded dead %q", fn, r.Outcome, r.Error, ti.Error)
		}
	}
}
