package runtime_test

import (
	"context"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/runtime"
)

// Register a function, as README shows it, and run a worker inside a program of one's
// own (compiled, not run: it needs a Redis).
func ExampleNew() {
	r := runtime.NewRegistry()
	r.Register("send", func(ctx context.Context, t *runtime.Task) ([]byte, error) {
		// t.ID, t.Queue, t.Attempt, t.Payload; honour ctx (timeout, drain deadline)
		return nil, nil // or an error: retried with exponential backoff, then dead
	}, runtime.FuncOptions{Timeout: time.Minute, MaxRetries: 5})

	cfg, err := runtime.LoadConfig(context.Background(), envconfig.OsLookuper())
	if err != nil {
		panic(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), Registry: r})
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = w.Run(ctx) // drains on SIGTERM
}
