package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/runtime"
)

// Environment of a chaos worker process.
const (
	// EnvWorker set to "1" makes a binary that calls MaybeWorker run a worker instead.
	EnvWorker = "DTQ_CHAOS_WORKER"
	// EnvLedger is the directory of the ledger files.
	EnvLedger = "DTQ_CHAOS_LEDGER"
)

// MaybeWorker runs a chaos worker and exits when the process was started as one (by
// Run); otherwise it returns at once. Call it first thing in main (or TestMain) of any
// binary that runs Run with the default WorkerCommand.
func MaybeWorker() {
	if os.Getenv(EnvWorker) == "1" {
		os.Exit(WorkerMain())
	}
}

// Registry returns the shipped functions (function.Register) with noop, sleep, fail,
// echo and burn recording every execution in l.
func Registry(l *Ledger) *runtime.Registry {
	r := function.Registry()
	for name, fn := range map[string]runtime.Func{
		"noop": function.Noop, "sleep": function.Sleep, "fail": function.Fail,
		"echo": function.Echo, "burn": function.Burn,
	} {
		r.Register(name, l.Wrap(fn), runtime.FuncOptions{MaxRetries: -1})
	}
	return r
}

// WorkerMain is a worker process wired as `dtq worker` is (configuration from the
// environment, redisconn, SIGTERM drains), whose functions write the ledger in
// $DTQ_CHAOS_LEDGER. It returns the exit code.
func WorkerMain() int {
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.OsLookuper())
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: %v\n", err)
		return 2
	}
	dir := os.Getenv(EnvLedger)
	if dir == "" {
		fmt.Fprintf(os.Stderr, "chaos worker: %s is not set\n", EnvLedger)
		return 2
	}
	l, err := OpenLedger(dir, cfg.WorkerID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close()
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{CAFile: cfg.RedisCAFile, PoolSize: cfg.Concurrency + 16, Name: cfg.WorkerID})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: DTQ_REDIS_URL: %v\n", err)
		return 2
	}
	defer rdb.Close()
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: Registry(l), Logger: logger(os.Stderr, cfg.LogLevel)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: %v\n", err)
		return 1
	}
	return 0
}

func logger(w io.Writer, level string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		lv = slog.LevelWarn
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv}))
}
