package dtqtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/dtqtest"
	"github.com/dtq/dtq/runtime"
)

var t testing.TB = &testing.T{} // in a test: its *testing.T

// Run one attempt of a registered function, as a worker would.
func ExampleRun() {
	reg := runtime.NewRegistry()
	reg.Register("greet", func(_ context.Context, tk *runtime.Task) ([]byte, error) {
		return []byte("hello " + string(tk.Payload)), nil
	}, runtime.FuncOptions{MaxRetries: -1})

	r := dtqtest.Run(t, reg, dtqtest.Task{Function: "greet", Payload: []byte("ada")})
	fmt.Println(r.Outcome, string(r.Result))
	// Output: succeeded hello ada
}

// A function that outlives its timeout fails like on a worker: retried while the
// budget lasts, then dead.
func ExampleRun_timeout() {
	slow := func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	task := dtqtest.Task{Timeout: 10 * time.Millisecond, MaxRetries: client.Retries(1)}
	r := dtqtest.Run(t, slow, task)
	fmt.Println(r.Outcome, r.Error, errors.Is(r.Err, context.DeadlineExceeded))

	task.Attempt, task.Failures = 2, 1
	fmt.Println(dtqtest.Run(t, slow, task).Outcome)
	// Output:
	// retry timed out after 10ms: context deadline exceeded true
	// dead
}

// The backoff before a retry is the function's, or the worker's default.
func ExampleWorker_Run() {
	reg := runtime.NewRegistry()
	reg.Register("flaky", func(context.Context, *runtime.Task) ([]byte, error) {
		return nil, errors.New("upstream down")
	}, runtime.FuncOptions{MaxRetries: 5, Backoff: func(n int) time.Duration { return time.Duration(n) * time.Minute }})

	w := dtqtest.Worker{Now: func() time.Time { return time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC) }}
	r := w.Run(t, reg, dtqtest.Task{Function: "flaky", Attempt: 3, Failures: 2})
	fmt.Println(r.Outcome, r.Backoff, r.RetryAt.UTC().Format(time.Kitchen))
	// Output: retry 3m0s 9:03AM
}

// Every attempt until the task succeeds or is dead.
func ExampleRunUntilDone() {
	fn := func(_ context.Context, tk *runtime.Task) ([]byte, error) {
		if tk.Attempt < 3 {
			return nil, fmt.Errorf("attempt %d failed", tk.Attempt)
		}
		return []byte("done"), nil
	}
	for _, r := range dtqtest.RunUntilDone(t, fn, dtqtest.Task{}) {
		fmt.Println(r.Attempt, r.Outcome, r.Error)
	}
	// Output:
	// 1 retry attempt 1 failed
	// 2 retry attempt 2 failed
	// 3 succeeded
}

// Assert what code under test enqueued (compiled only: it starts a redis-server).
func ExampleRequireEnqueued() {
	c := client.New(dtqtest.Redis(t), client.Options{})

	// the code under test:
	_, _, _ = c.Enqueue(context.Background(), client.Task{Queue: "emails", Function: "send",
		Payload: []byte(`{"to":"ada@example.com"}`), Priority: 7, Delay: time.Hour})

	dtqtest.RequireEnqueued(t, c, "emails", dtqtest.Want{
		Function: "send", Payload: map[string]string{"to": "ada@example.com"}, Priority: new(7),
		RunAfter: time.Now().Add(59 * time.Minute), State: client.StateScheduled,
	})
	dtqtest.RequireNotEnqueued(t, c, "emails", dtqtest.Want{Function: "refund"})
}
