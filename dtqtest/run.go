// Package dtqtest helps test code that uses dtq: run a function on a task inline, as a
// worker would run it, and assert what a piece of code enqueued.
//
// Run executes one attempt through the worker's own executor code
// (runtime.RunInline): the timeout the worker would choose (the task's, else the
// function's, else DTQ_DEFAULT_TIMEOUT_S) and its context, panic recovery, the retry
// budget (the task's, else the function's, else runtime.DefaultMaxRetries),
// runtime.SkipRetry, the backoff and the dead decision are the worker's, not a copy.
// RunUntilDone runs attempts one after another, counting them as the worker does, until
// one succeeds or the task is dead. Neither touches Redis.
//
// Enqueued, RequireEnqueued and RequireNotEnqueued read a queue through the public
// client (client.List and client.Get), so they see what dtq stored. They take a
// testing.TB and report a mismatch with t.Errorf, naming each field that differs.
// Redis starts a throwaway redis-server for a test.
package dtqtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/runtime"
)

// Task is the task an attempt runs on: what a worker's claim would hand the function,
// and the settings given at enqueue.
type Task struct {
	ID       string // "" reads as "task-1"
	Queue    string // "" reads as "default"
	Function string // the registered name; with a bare function, "" reads as "fn"
	Payload  []byte
	Priority int
	// Attempt numbers the attempt from 1 (0 reads as 1).
	Attempt int64
	// Failures counts the failed attempts before this one, as the worker counts them
	// against the budget: Attempt-1 when every earlier attempt failed.
	Failures int
	// MaxRetries is the task's own budget (nil: the function's, else
	// runtime.DefaultMaxRetries), as client.Task.MaxRetries.
	MaxRetries *int
	// Timeout is the task's own limit (0: the function's, else the worker's default).
	Timeout time.Duration
	// Reclaimed: the attempt was taken over from a worker that went silent.
	Reclaimed bool
	CreatedAt time.Time // zero reads as now
}

// Outcome is what the worker records after an attempt.
type Outcome string

// Outcomes.
const (
	Succeeded Outcome = "succeeded"
	Retry     Outcome = "retry" // failed, retried at RetryAt
	Dead      Outcome = "dead"  // failed with no retry left, or runtime.SkipRetry
	// HandedBack: Worker.Context ended while the function ran (a drain deadline): the
	// worker records nothing and another worker runs the task again.
	HandedBack Outcome = "handed_back"
)

// Result is the outcome of one attempt.
type Result struct {
	Outcome Outcome
	Result  []byte // what a success stores on the task
	// Err is the function's own error, for errors.Is and errors.As: a
	// *runtime.PanicError when it panicked, context.DeadlineExceeded (possibly wrapped)
	// when it gave up at its timeout, an error matching runtime.ErrUnknownFunction when
	// no function has the task's name.
	Err error
	// Error is the text the worker records on the task (a timeout reads "timed out
	// after …").
	Error    string
	Panicked bool
	// RetryAt is when the retry is due; Backoff is RetryAt less the worker's clock at
	// the failure (Outcome Retry only; in whole milliseconds, as the worker keeps
	// RetryAt).
	RetryAt time.Time
	Backoff time.Duration
	// Attempt, MaxRetries and Timeout are the attempt's number and the budget and limit
	// it ran with (Timeout 0: none).
	Attempt    int64
	MaxRetries int
	Timeout    time.Duration
}

// Worker holds the worker settings an attempt depends on. Its zero value is a worker
// with the defaults of runtime.LoadConfig.
type Worker struct {
	// DefaultTimeout is DTQ_DEFAULT_TIMEOUT_S (0: its default, 30 min; negative: no limit).
	DefaultTimeout time.Duration
	// RetryBase and RetryMax are DTQ_RETRY_BASE_MS and DTQ_RETRY_MAX_MS (0: their
	// defaults).
	RetryBase, RetryMax time.Duration
	// Now is the worker's clock, read once per attempt (time.Now when nil).
	Now func() time.Time
	// Context is the parent of the function's context: ending it is a drain deadline
	// (nil: never ends).
	Context context.Context
}

// FromConfig is the worker a runtime.Config describes.
func FromConfig(cfg runtime.Config) Worker {
	w := Worker{DefaultTimeout: cfg.DefaultTimeout, RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax}
	if w.DefaultTimeout == 0 {
		w.DefaultTimeout = -1
	}
	return w
}

var defaults = sync.OnceValues(func() (runtime.Config, error) {
	return runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{}))
})

// Run runs one attempt of task with target, a *runtime.Registry (the function named
// task.Function) or a function (runtime.Func or its signature), on a worker with the
// default settings.
func Run(t testing.TB, target any, task Task) Result {
	t.Helper()
	return Worker{}.Run(t, target, task)
}

// RunUntilDone runs the attempts of task one after another, as the worker would after
// each retry (the next attempt number, one more failure), until one succeeds or the
// task is dead (or handed back); it returns every attempt's Result, in order. It does
// not wait for the backoffs.
func RunUntilDone(t testing.TB, target any, task Task) []Result {
	t.Helper()
	return Worker{}.RunUntilDone(t, target, task)
}

// RunUntilDone is the package's RunUntilDone on w.
func (w Worker) RunUntilDone(t testing.TB, target any, task Task) []Result {
	t.Helper()
	var out []Result
	for {
		r := w.Run(t, target, task)
		out = append(out, r)
		if r.Outcome != Retry || len(out) > 10_000 {
			return out
		}
		task.Attempt = r.Attempt + 1
		task.Failures++
	}
}

// Run is the package's Run on w.
func (w Worker) Run(t testing.TB, target any, task Task) Result {
	t.Helper()
	reg, err := registryOf(target, &task)
	if err != nil {
		t.Fatalf("dtqtest.Run: %v", err)
		return Result{}
	}
	def, err := defaults()
	if err != nil {
		t.Fatalf("dtqtest.Run: the worker defaults: %v", err)
		return Result{}
	}
	o := runtime.InlineOptions{DefaultTimeout: w.DefaultTimeout, RetryBase: w.RetryBase, RetryMax: w.RetryMax,
		MaxRetries: -1, TimeoutMS: task.Timeout.Milliseconds(), WorkerID: "dtqtest"}
	switch {
	case o.DefaultTimeout == 0:
		o.DefaultTimeout = def.DefaultTimeout
	case o.DefaultTimeout < 0:
		o.DefaultTimeout = 0
	}
	if o.RetryBase == 0 {
		o.RetryBase = def.RetryBase
	}
	if o.RetryMax == 0 {
		o.RetryMax = def.RetryMax
	}
	if task.Timeout > 0 && o.TimeoutMS == 0 {
		o.TimeoutMS = 1 // the task stores whole milliseconds; below one is one
	}
	if task.MaxRetries != nil {
		o.MaxRetries = *task.MaxRetries
	}
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	now = now.Truncate(time.Millisecond) // the worker keeps due times in milliseconds
	o.Now = func() time.Time { return now }
	if task.Attempt <= 0 {
		task.Attempt = 1
	}
	if task.ID == "" {
		task.ID = "task-1"
	}
	if task.Queue == "" {
		task.Queue = "default"
	}
	if task.CreatedAt.IsZero() {
		task.CreatedAt = now
	}
	ctx := w.Context
	if ctx == nil {
		ctx = context.Background()
	}
	ir := runtime.RunInline(ctx, reg, runtime.Task{
		ID: task.ID, Queue: task.Queue, Function: task.Function, Attempt: task.Attempt, Payload: task.Payload,
		Priority: task.Priority, Failures: task.Failures, Reclaimed: task.Reclaimed, CreatedAt: task.CreatedAt,
	}, o)
	r := Result{
		Result: ir.Result, Err: ir.Err, Error: ir.Error, Panicked: ir.Panicked, Attempt: task.Attempt,
		MaxRetries: ir.MaxRetries, Timeout: ir.Timeout,
	}
	switch ir.Outcome {
	case runtime.OutcomeSucceeded:
		r.Outcome = Succeeded
	case runtime.OutcomeRetried:
		r.Outcome, r.RetryAt = Retry, ir.RetryAt
		r.Backoff = ir.RetryAt.Sub(now)
	case runtime.OutcomeDead:
		r.Outcome = Dead
	default:
		r.Outcome = HandedBack
	}
	return r
}

// registryOf is the registry target names; a bare function is registered under
// task.Function (set to "fn" when empty) with no defaults of its own.
func registryOf(target any, task *Task) (*runtime.Registry, error) {
	var fn runtime.Func
	switch v := target.(type) {
	case *runtime.Registry:
		if v == nil {
			return nil, fmt.Errorf("a nil registry")
		}
		if task.Function == "" {
			return nil, fmt.Errorf("Task.Function names no function of the registry")
		}
		return v, nil
	case runtime.Func:
		fn = v
	case func(context.Context, *runtime.Task) ([]byte, error):
		fn = v
	default:
		return nil, fmt.Errorf("target is a %T: want a *runtime.Registry or a runtime.Func", target)
	}
	if fn == nil {
		return nil, fmt.Errorf("a nil function")
	}
	if task.Function == "" {
		task.Function = "fn"
	}
	r := runtime.NewRegistry()
	r.Register(task.Function, fn, runtime.FuncOptions{MaxRetries: -1})
	return r, nil
}
