package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
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
	var own ownConfig
	if err := own.load(ctx, env); err != nil {
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
		for _, v := range envVars() {
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
	// Readiness follows the scaler's own probe; health only tells a refusal no wait
	// heals (a wrong password, a missing ACL permission), logged once, from the rest.
	health := redisconn.NewHealth(redisconn.HealthOptions{FatalAfter: own.fatalAfter(), URL: cfg.RedisURL, Logger: log, RefusalsOnly: true})
	defer health.Close()
	client.AddHook(health)
	s, err := scaler.New(cfg, client, scaler.Options{Logger: slog.New(redisconn.QuietRefusals(log.Handler()))})
	if err != nil {
		var ce *scaler.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "dtq scaler: %s\n", scalerOneLine(err.Error()))
		} else {
			fmt.Fprintf(stderr, "dtq scaler: DTQ_SCALER_TLS_CERT_FILE: %s\n", scalerOneLine(err.Error()))
		}
		return 2
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	// "Started" once Redis answered; until then /readyz says why not.
	answered := health.Answered()
	for {
		select {
		case <-answered:
			log.Info("scaler: started", "redis", redisconn.Redact(cfg.RedisURL), "key_prefix", cfg.KeyPrefix)
			answered = nil
		case err := <-ran:
			if err == nil { // ctx ended, and Run was quicker to see it
				log.Info("scaler: stopping")
				log.Info("scaler: stopped")
				return 0
			}
			log.Error("scaler: start failed", "err", err)
			return 1
		case <-health.Refused():
			var re *redisconn.RefusedError
			errors.As(health.Err(), &re)
			stopRun()
			<-ran
			log.Error("scaler: exiting: redis refuses the scaler", "cause", re.Cause, "reply", re.Reply, "exit_code", exitRedisRefused)
			terminationMessage("dtq scaler: " + re.Error())
			return exitRedisRefused
		case <-ctx.Done():
			log.Info("scaler: stopping")
			<-ran
			log.Info("scaler: stopped")
			return 0
		}
	}
}

// exitRedisRefused is the exit code when Redis refused the scaler for
// DTQ_REDIS_FATAL_AFTER_S in a way no wait heals (as the worker's).
const exitRedisRefused = 3

// terminationMessage writes msg to Kubernetes' termination log when it exists (kubectl
// describe pod shows it), and does nothing elsewhere.
func terminationMessage(msg string) {
	f, err := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(msg + "\n")
	_ = f.Close()
}

// ownConfig is what this command reads beyond scaler.Config.
type ownConfig struct {
	FatalAfter time.Duration `env:"DTQ_REDIS_FATAL_AFTER_S, default=10" unit:"s" range:"0..3600" help:"seconds Redis may refuse the scaler (password, ACL, DB number) before it exits 3 (0 = at once)"`
}

func (c *ownConfig) load(ctx context.Context, env envconfig.Lookuper) error {
	if err := envcfg.Load(ctx, env, c); err != nil {
		return err
	}
	return envcfg.Check(c)
}

func (c ownConfig) fatalAfter() time.Duration { return c.FatalAfter }

// envVars lists every variable the scaler reads.
func envVars() []scaler.EnvVar {
	return append(scaler.EnvVars(), envcfg.Vars(reflect.TypeFor[ownConfig]())...)
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

// helpWidth is the column the defaults of --help's environment list start after.
const helpWidth = 31

func printScalerUsage(w io.Writer) {
	fmt.Fprint(w, scalerUsage)
	envcfg.WriteHelp(w, envVars(), helpWidth, "unset")
}

func scalerOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
