package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux: dtq worker passes it to the worker
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/envcfg"
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
	cfg, err := runtime.LoadConfig(context.Background(), runtime.OsLookuper())
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %v\n", err)
		return exitUsage
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	tp, flushSpans, err := workerTracing(log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %v\n", err)
		return exitUsage
	}
	defer flushSpans()
	logging.RouteRedis(log.With("worker_id", cfg.WorkerID))
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{CAFile: cfg.RedisCAFile, PoolSize: cfg.Concurrency + 16, Name: cfg.WorkerID})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %s: %v\n", redisconn.Variable(err), err)
		return exitUsage
	}
	defer rdb.Close()
	// Dial the first connection while the worker is being built; the first fetch waits
	// for it (below) rather than dialing a second beside it.
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = rdb.Ping(ctx).Err()
	}()
	// PORT is bound before any work is taken, so a port in use fails the start like a
	// bad variable, with nothing claimed; serving it waits for the first fetch (below).
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: PORT: %d cannot be bound: %s\n", cfg.Port, strings.Join(strings.Fields(err.Error()), " "))
		return exitUsage
	}
	defer ln.Close()
	// The worker's Redis health logs a refusal (a wrong password, a missing ACL
	// permission) once; the loops retrying into it stay quiet about it until the exit.
	quiet := slog.New(redisconn.QuietRefusals(log.Handler()))
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: function.Registry(), Logger: quiet,
		Pprof:           http.DefaultServeMux, // net/http/pprof registered there; served with DTQ_PPROF only
		InstrumentRedis: true,                 // the worker owns this client: count its round trips
		Tracer:          tp})                  // OTEL_TRACES_EXPORTER=otlp; nil: off
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq worker: %v\n", err)
		return exitUsage
	}

	// The worker starts first; serving PORT follows (probes can wait a millisecond, the
	// first task should not).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The first connection's set-up (connect, HELLO, the name, a PING) is under way: a
	// fetch sent now would find no connection idle and dial another, and the two
	// set-ups would share the start's processor time. A dial that fails or hangs ends
	// the wait within the PING's 2 s; the worker then retries as it does after any
	// failed fetch.
	select {
	case <-dialed:
	case <-ctx.Done():
	}
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()

	// The endpoints come up once the first fetch returned (setting them up costs a cold
	// start time), or after a second if Redis is slow to answer.
	select {
	case <-w.Fetched():
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http: serve failed", "err", err)
		}
	}()
	log.Info("worker: http listening", "addr", ln.Addr().String(), "redis", redisconn.Redact(cfg.RedisURL))
	// A typo in a variable's name leaves its default in force without a word: say so,
	// once the start is done (names only, never values).
	for _, m := range envcfg.Misspelt(os.Environ(), "DTQ_", runtime.EnvVars()) {
		log.Warn("config: variable not read by the worker, its value ignored", "var", m.Name, "did_you_mean", strings.Join(m.Meant, " or "))
	}
	err = <-runErr
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if errors.Is(err, runtime.ErrRedisRefused) {
		var re *redisconn.RefusedError
		errors.As(err, &re)
		log.Error("worker: exiting: redis refuses the worker", "cause", re.Cause, "reply", re.Reply, "exit_code", exitRedisRefused)
		terminationMessage("dtq worker: " + err.Error())
		return exitRedisRefused
	}
	if err != nil {
		return fail("worker", err)
	}
	return exitOK
}

// exitRedisRefused is the exit code of a worker (or scaler) that Redis refused for
// DTQ_REDIS_FATAL_AFTER_S in a way no wait heals: a wrong password or user, a missing
// ACL permission, a database number out of range. Kubernetes shows it as
// CrashLoopBackOff with exit code 3.
const exitRedisRefused = 3

// terminationLog is where Kubernetes reads a container's termination message from
// (the default terminationMessagePath): kubectl describe pod shows it.
const terminationLog = "/dev/termination-log"

// terminationMessage writes msg to the termination log when it exists (in a
// Kubernetes container), and does nothing elsewhere.
func terminationMessage(msg string) {
	f, err := os.OpenFile(terminationLog, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(msg + "\n")
	_ = f.Close()
}
