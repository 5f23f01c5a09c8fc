package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/logging"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/scaler"
)

const scalerUsage = `usage: dtq scaler [--check]

Runs the KEDA external scaler: gRPC externalscaler.ExternalScaler (external and
external-push triggers, plus the gRPC health service) on DTQ_SCALER_ADDR, and HTTP
/metrics, /healthz, /readyz on PORT. Configuration comes from the environment.

flags:
  --check      validate the configuration, print it (password redacted) and exit
  -h, --help   print this help

environment (default in brackets):
`

// Command dtq-scaler is the KEDA external scaler; `dtq scaler` runs it. It is a binary
// of its own so that the worker binary, started on every scale-up, carries none of
// gRPC: a smaller binary starts measurably faster and holds less memory.
func main() {
	os.Exit(scalerMain(os.Args[1:], envconfig.OsLookuper(), os.Stdout, os.Stderr))
}

func scalerMain(args []string, env envconfig.Lookuper, stdout, stderr io.Writer) int {
	check := false
	for _, a := range args {
		switch a {
		case "-h", "--help", "-help", "help":
			printScalerUsage(stdout)
			return 0
		case "--check", "-check":
			check = true
		default:
			fmt.Fprintf(stderr, "dtq scaler: unknown argument %q\n", a)
			printScalerUsage(stderr)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := scaler.LoadConfig(ctx, env)
	if err != nil {
		fmt.Fprintf(stderr, "dtq scaler: %s\n", scalerOneLine(err.Error()))
		return 2
	}
	client, err := redisconn.Open(cfg.RedisURL, redisconn.Options{CAFile: cfg.RedisCAFile, Name: "dtq-scaler"})
	if err != nil {
		fmt.Fprintf(stderr, "dtq scaler: %s: %s\n", redisconn.Variable(err), scalerOneLine(err.Error()))
		return 2
	}
	defer client.Close()
	boundByContext(client)
	if check {
		for _, v := range scaler.EnvVars() {
			val, _ := env.Lookup(v.Name)
			if v.Name == "DTQ_REDIS_URL" {
				val = redisconn.Redact(cfg.RedisURL)
			}
			fmt.Fprintf(stdout, "%s=%s\n", v.Name, val)
		}
		return 0
	}
	log := logging.New(cfg.LogFormat, cfg.LogLevel, stderr)
	logging.RouteRedis(log)
	s, err := scaler.New(cfg, client, scaler.Options{Logger: log})
	if err != nil {
		var ce *scaler.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "dtq scaler: %s\n", scalerOneLine(err.Error()))
		} else {
			fmt.Fprintf(stderr, "dtq scaler: DTQ_SCALER_TLS_CERT_FILE: %s\n", scalerOneLine(err.Error()))
		}
		return 2
	}
	if err := s.Start(ctx); err != nil {
		log.Error("scaler: start failed", "err", err)
		return 1
	}
	log.Info("scaler: started", "redis", redisconn.Redact(cfg.RedisURL), "key_prefix", cfg.KeyPrefix)
	<-ctx.Done()
	log.Info("scaler: stopping")
	s.Stop()
	log.Info("scaler: stopped")
	return 0
}

// boundByContext makes the client honour context deadlines on its sockets, so every
// scaler call is bounded by DTQ_SCALER_REDIS_TIMEOUT_MS and not only by the read timeout.
// It runs before the client's first command.
func boundByContext(c redis.UniversalClient) {
	switch cc := c.(type) {
	case *redis.Client:
		cc.Options().ContextTimeoutEnabled = true
	case *redis.ClusterClient:
		cc.Options().ContextTimeoutEnabled = true
	}
}

func printScalerUsage(w io.Writer) {
	fmt.Fprint(w, scalerUsage)
	for _, v := range scaler.EnvVars() {
		def := v.Default
		if def == "" {
			def = "unset"
		}
		fmt.Fprintf(w, "  %-31s [%s]\n      %s\n", v.Name, def, v.Help)
	}
}

func scalerOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
