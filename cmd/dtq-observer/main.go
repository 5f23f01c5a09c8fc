// Command dtq-observer serves dtq's observer API (see observer/README.md); `dtq
// observer` runs it. It is a binary of its own so that the worker binary, started on
// every scale-up, carries none of it.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/internal/logging"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/tlsreload"
	"github.com/dtq/dtq/observer"
)

const usage = `usage: dtq observer [--check]

Serves the observer's JSON API under /api/v1 (queues, tasks, workers, the events as
Server-Sent Events; pause, resume, cancel and requeue behind DTQ_OBSERVER_TOKEN), and
/healthz, /readyz, /metrics, on PORT, and publishes WORKER_STALE when a worker's
heartbeat goes stale. Configuration comes from the environment.

flags:
  --check      validate the configuration, print it (password and token redacted) and exit
  -h, --help   print this help

environment (default in brackets):
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], envconfig.OsLookuper(), os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// shutdownTimeout is how long SIGTERM waits for requests in flight.
const shutdownTimeout = 10 * time.Second

// run is the command, until ctx ends (SIGTERM); ready, when set, gets the address
// served once it listens.
func run(ctx context.Context, args []string, env envconfig.Lookuper, stdout, stderr io.Writer, ready func(addr string)) int {
	check := false
	for _, a := range args {
		switch a {
		case "-h", "--help", "-help", "help":
			printUsage(stdout)
			return 0
		case "--check", "-check":
			check = true
		default:
			fmt.Fprintf(stderr, "dtq observer: unknown argument %q\n", a)
			printUsage(stderr)
			return 2
		}
	}
	cfg, err := observer.LoadConfig(ctx, env)
	if err != nil {
		fmt.Fprintf(stderr, "dtq observer: %s\n", oneLine(err.Error()))
		return 2
	}
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{CAFile: cfg.RedisCAFile, Name: "dtq-observer"})
	if err != nil {
		fmt.Fprintf(stderr, "dtq observer: %s: %s\n", redisconn.Variable(err), oneLine(err.Error()))
		return 2
	}
	defer rdb.Close()
	boundByContext(rdb)
	if check {
		for _, v := range observer.EnvVars() {
			val, _ := env.Lookup(v.Name)
			switch v.Name {
			case "DTQ_REDIS_URL":
				val = redisconn.Redact(cfg.RedisURL)
			case "DTQ_OBSERVER_TOKEN":
				if val != "" {
					val = "xxxxx"
				}
			}
			fmt.Fprintf(stdout, "%s=%s\n", v.Name, val)
		}
		return 0
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, stderr)
	logging.RouteRedis(log)
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		fmt.Fprintf(stderr, "dtq observer: PORT: %s\n", oneLine(err.Error()))
		return 2
	}
	if cfg.TLSCertFile != "" {
		tc, err := tlsreload.Server(cfg.TLSCertFile, cfg.TLSKeyFile, "", "h2", "http/1.1")
		if err != nil {
			fmt.Fprintf(stderr, "dtq observer: DTQ_OBSERVER_TLS_CERT_FILE/DTQ_OBSERVER_TLS_KEY_FILE: %s\n", oneLine(err.Error()))
			ln.Close()
			return 2
		}
		ln = tls.NewListener(ln, tc)
	}
	obs := observer.New(observer.Options{Config: cfg, Redis: rdb, Logger: log})
	defer obs.Close()
	srv := &http.Server{
		Handler:           obs.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	// Shutdown waits for requests in flight: the event streams end at once.
	srv.RegisterOnShutdown(obs.Close)
	stale := observer.NewStaleWatcher(observer.StaleOptions{Redis: rdb, KeyPrefix: cfg.KeyPrefix,
		Every: cfg.StaleEvery, MaxLen: cfg.EventsMaxLen, Logger: log})
	if cfg.StaleEvery > 0 {
		_ = stale.Start(ctx)
	}
	defer stale.Stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("observer: started", "addr", ln.Addr().String(), "redis", redisconn.Redact(cfg.RedisURL),
		"key_prefix", cfg.KeyPrefix, "tls", cfg.TLSCertFile != "", "actions", cfg.Token != "", "read_open", cfg.ReadOpen,
		"stale_check_s", cfg.StaleEvery.Seconds())
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-served:
		log.Error("observer: serve failed", "err", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("observer: stopping")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("observer: shutdown", "err", err)
	}
	log.Info("observer: stopped")
	return 0
}

// boundByContext makes the client honour context deadlines on its sockets, so every
// request's Redis work is bounded by its deadline and not only by the read timeout.
func boundByContext(c redis.UniversalClient) {
	switch cc := c.(type) {
	case *redis.Client:
		cc.Options().ContextTimeoutEnabled = true
	case *redis.ClusterClient:
		cc.Options().ContextTimeoutEnabled = true
	}
}

// helpWidth is the column the defaults of --help's environment list start after.
const helpWidth = 24

func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	envcfg.WriteHelp(w, observer.EnvVars(), helpWidth, "unset")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
