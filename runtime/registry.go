package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/dtq/dtq/client"
)

// Task is what a function receives: one execution attempt of a task.
type Task struct {
	ID       string
	Queue    string
	Function string
	// Attempt numbers executions from 1; a retry or a reclaim gets the next number.
	Attempt  int64
	Payload  []byte
	Priority int
	// Failures counts earlier failed attempts (errors, timeouts, panics, lost workers).
	Failures   int
	MaxRetries int
	// Reclaimed is true when this attempt was taken over from a worker that went silent.
	Reclaimed bool
	CreatedAt time.Time
}

// Func is a user function. It returns a result (stored on the task) or an error (the
// attempt failed and is retried while retries are left). It must honour ctx: ctx ends at
// the function's timeout and when a draining worker gives up waiting.
type Func func(ctx context.Context, t *Task) ([]byte, error)

// Backoff returns how long to wait before the retry that follows failure number n (1-based).
type Backoff func(n int) time.Duration

// FuncOptions are a function's defaults. A task's own settings, given at enqueue, win.
type FuncOptions struct {
	// Timeout bounds one attempt (0: the worker's DTQ_DEFAULT_TIMEOUT_S).
	Timeout time.Duration
	// MaxRetries is used when the task was enqueued without one (negative: the
	// worker's default of 3).
	MaxRetries int
	// Backoff between retries (nil: exponential with jitter from DTQ_RETRY_BASE_MS to
	// DTQ_RETRY_MAX_MS).
	Backoff Backoff
}

// DefaultMaxRetries applies when neither the task nor its function sets a retry budget.
const DefaultMaxRetries = 3

type registered struct {
	name string
	fn   Func
	opts FuncOptions
}

// Registry maps function names to functions. Safe for concurrent use.
type Registry struct {
	mu   sync.RWMutex
	m    map[string]*registered
	cron map[string]client.CronEntry // periodic entries (cron.go)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]*registered{}} }

// Register adds fn under name; a second registration of a name replaces the first.
func (r *Registry) Register(name string, fn Func, opts FuncOptions) {
	if name == "" || fn == nil {
		panic("runtime: Register needs a name and a function")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[name] = &registered{name: name, fn: fn, opts: opts}
}

// Names lists the registered functions, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) lookup(name string) *registered {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[name]
}

// ErrUnknownFunction is the error of a task naming a function nobody registered.
var ErrUnknownFunction = errors.New("unknown function")

// SkipRetry wraps err so the task dies at once instead of being retried.
func SkipRetry(err error) error { return &skipRetry{err} }

type skipRetry struct{ err error }

func (s *skipRetry) Error() string { return s.err.Error() }
func (s *skipRetry) Unwrap() error { return s.err }

func isSkipRetry(err error) bool {
	var s *skipRetry
	return errors.As(err, &s)
}

// PanicError is the failure of a function that panicked.
type PanicError struct{ Value any }

func (p *PanicError) Error() string { return fmt.Sprintf("function panicked: %v", p.Value) }

// ExpBackoff returns exponential backoff base·2^(n-1) capped at max, with equal jitter
// (half fixed, half random) so that retries of a burst spread out but never collapse to 0.
func ExpBackoff(base, max time.Duration) Backoff {
	return func(n int) time.Duration {
		if n < 1 {
			n = 1
		}
		d := base
		for i := 1; i < n && d > 0 && d < max; i++ {
			if d > max/2 {
				d = max // doubling would pass max (and, near the largest duration, overflow)
				break
			}
			d *= 2
		}
		if d > max {
			d = max
		}
		if d <= 0 {
			return 0
		}
		half := d / 2
		return half + time.Duration(rand.Int64N(int64(d-half)+1))
	}
}
