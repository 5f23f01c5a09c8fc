package runtime

import (
	"context"
	"time"

	"github.com/dtq/dtq/lua"
)

// InlineOptions are the worker settings and the task fields, set at enqueue, that an
// attempt run by RunInline depends on.
type InlineOptions struct {
	// DefaultTimeout, RetryBase, RetryMax: the worker's DTQ_DEFAULT_TIMEOUT_S,
	// DTQ_RETRY_BASE_MS and DTQ_RETRY_MAX_MS (DefaultTimeout 0: no limit).
	DefaultTimeout      time.Duration
	RetryBase, RetryMax time.Duration
	// TimeoutMS is the task's own limit (0: the function's, then DefaultTimeout).
	TimeoutMS int64
	// MaxRetries is the task's own budget (negative: the function's, then
	// DefaultMaxRetries).
	MaxRetries int
	// Now is the worker's clock, read for the due time of a retry (time.Now when nil).
	Now func() time.Time
	// WorkerID names the worker in the error of an unknown function.
	WorkerID string
}

// InlineResult is the outcome of one attempt as the worker would record it.
type InlineResult struct {
	// Outcome is OutcomeSucceeded, OutcomeRetried, OutcomeDead, or OutcomeHandedBack
	// when ctx ended while the function ran (a draining worker hands the task back
	// without recording anything).
	Outcome string
	Result  []byte
	// Error is the text recorded on the task ("" on success).
	Error string
	// Err is the function's own error (a *PanicError when it panicked; one matching
	// ErrUnknownFunction when no function of that name is registered).
	Err      error
	Panicked bool
	// RetryAt is when the retry is due (Outcome retried only).
	RetryAt time.Time
	// MaxRetries and Timeout are the budget and limit the attempt ran with (Timeout
	// 0: none).
	MaxRetries int
	Timeout    time.Duration
}

// RunInline runs one attempt of t with the function reg holds under t.Function, through
// the executor's own code: the same timeout choice and context, panic recovery, retry
// budget, SkipRetry, backoff and dead decision. Nothing touches Redis. It is what the
// dtqtest package builds on; ctx plays the part of the drain deadline.
func RunInline(ctx context.Context, reg *Registry, t Task, o InlineOptions) InlineResult {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	w := &Worker{
		core: &core{
			reg: reg, now: now, id: o.WorkerID, defTimeout: o.DefaultTimeout,
			defBackoff: ExpBackoff(o.RetryBase, o.RetryMax), metrics: newMetrics(o.WorkerID),
		},
		tally:    &tally{},
		services: services{pool: &pool{runCtx: ctx}},
	}
	var out InlineResult
	fn := reg.lookup(t.Function)
	label := t.Function
	if fn != nil {
		// The same function, watched: its own error, or the value it panicked with.
		inner := fn.fn
		watched := *fn
		watched.fn = func(ctx context.Context, t *Task) (res []byte, err error) {
			defer func() {
				if r := recover(); r != nil {
					out.Panicked, out.Err = true, &PanicError{Value: r}
					panic(r) // for call, as without the watch
				}
			}()
			res, err = inner(ctx, t)
			out.Err = err
			return res, err
		}
		fn = &watched
	} else {
		label = "(unknown)"
	}
	s := lua.Started{
		ID: t.ID, Band: t.Priority, Attempt: t.Attempt, Function: t.Function, Payload: string(t.Payload),
		TimeoutMS: o.TimeoutMS, MaxRetries: o.MaxRetries, Failures: t.Failures,
		CreatedMS: t.CreatedAt.UnixMilli(), Reclaimed: t.Reclaimed,
	}
	t.MaxRetries = w.maxRetries(s, fn)
	e := &execution{s: s, fn: fn, fnLabel: label, task: t, claimed: now()}
	e.recorded.Store(true) // record (the completer's hand-off) is skipped: the outcome is read here
	w.execute(e)

	out.MaxRetries = t.MaxRetries
	out.Timeout = time.Duration(o.TimeoutMS) * time.Millisecond
	if out.Timeout <= 0 && fn != nil {
		out.Timeout = fn.opts.Timeout
	}
	if out.Timeout <= 0 {
		out.Timeout = o.DefaultTimeout
	}
	switch e.outcome {
	case lua.Succeeded:
		out.Outcome, out.Result = OutcomeSucceeded, []byte(e.text)
		if e.text == "" {
			out.Result = nil
		}
		return out
	case lua.Retry:
		out.Outcome, out.RetryAt = OutcomeRetried, time.UnixMilli(e.retryAt)
	case lua.Dead:
		out.Outcome = OutcomeDead
	default:
		out.Outcome = OutcomeHandedBack
		return out
	}
	out.Error = e.text
	if fn == nil {
		out.Err = unknownFunction(e.text)
	}
	return out
}

// unknownFunction is the failure of a task naming no registered function.
type unknownFunction string

func (u unknownFunction) Error() string { return string(u) }
func (u unknownFunction) Unwrap() error { return ErrUnknownFunction }
