package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/logging"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/runtime"
)

func runWorker(args []string) int {
	fs := newFlags("worker", "worker   (configured by the environment only)", runtime.EnvVars())
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dtq worker: unexpected argument %q (configuration comes from the environment; see --help)\n", fs.Arg(0))
		return exitUsage
	}
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.OsLookuper())
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %v\n", err)
		return exitUsage
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	logging.RouteRedis(log.With("worker_id", cfg.WorkerID))
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{CAFile: cfg.RedisCAFile, PoolSize: cfg.Concurrency + 16, Name: cfg.WorkerID})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %s: %v\n", redisconn.Variable(err), err)
		return exitUsage
	}
	defer rdb.Close()
	// Dial the first connection while the worker is being built: the first fetch finds
	// it ready.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = rdb.Ping(ctx).Err()
	}()
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: function.Registry(), Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %v\n", err)
		return exitUsage
	}

	// The worker starts first; the HTTP endpoints follow (probes can wait a millisecond,
	// the first task should not).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()

	// The endpoints come up once the first fetch returned (setting them up costs a cold
	// start time), or after a second if Redis is slow to answer.
	select {
	case <-w.Fetched():
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		stop()
		<-runErr
		return fail("worker", fmt.Errorf("PORT %d: %w", cfg.Port, err))
	}
	srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http: serve failed", "err", err)
		}
	}()
	log.Info("worker: http listening", "addr", ln.Addr().String(), "redis", redisconn.Redact(cfg.RedisURL))
	err = <-runErr
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err != nil {
		return fail("worker", err)
	}
	return exitOK
}
