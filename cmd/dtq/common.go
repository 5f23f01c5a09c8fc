package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/logging"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/runtime"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// envDefault returns the environment's value of name, or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// newFlags makes a flag set whose --help lists its flags and the environment it reads.
func newFlags(name, usage string, env []runtime.EnvVar) *flag.FlagSet {
	fs := flag.NewFlagSet("dtq "+name, flag.ContinueOnError)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: dtq %s\n", usage)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nflags:")
			fs.PrintDefaults()
		}
		if len(env) > 0 {
			fmt.Fprintln(out, "\nenvironment (default in brackets):")
			for _, v := range env {
				fmt.Fprintf(out, "  %-28s [%s]\n      %s\n", v.Name, v.Default, v.Help)
			}
		}
	}
	return fs
}

// parse parses args; it returns (code, false) when the command must exit now.
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	fs.SetOutput(os.Stderr)
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(os.Stdout) // asked for: help goes to stdout
		}
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// clientEnv is what the producer and inspection commands read.
var clientEnv = []runtime.EnvVar{
	{Name: "DTQ_REDIS_URL", Default: "redis://127.0.0.1:6379/0", Help: "Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"},
	{Name: "DTQ_REDIS_CA_FILE", Default: "", Help: "PEM CA bundle trusted for rediss://"},
	{Name: "DTQ_KEY_PREFIX", Default: "dtq", Help: "prefix of every Redis key"},
	{Name: "DTQ_MAX_PAYLOAD_BYTES", Default: "1048576", Help: "largest payload enqueue sends"},
	{Name: "DTQ_LOG_FORMAT", Default: "auto", Help: "format of go-redis's log lines: auto (text on a terminal), json, text"},
	{Name: "DTQ_LOG_LEVEL", Default: "error", Help: "least level logged: debug, info, warn (go-redis's dial retries), error"},
}

// cliLogs routes go-redis's own log lines through slog for the commands other than
// the worker (which does it with its own configuration): DTQ_LOG_FORMAT and
// DTQ_LOG_LEVEL, at error by default, since a command's failure is its error line.
func cliLogs(cmd string) bool {
	format := envDefault("DTQ_LOG_FORMAT", "auto")
	level := envDefault("DTQ_LOG_LEVEL", "error")
	switch format {
	case "auto", "json", "text":
	default:
		fmt.Fprintf(os.Stderr, "dtq %s: DTQ_LOG_FORMAT: %q must be auto, json or text\n", cmd, format)
		return false
	}
	switch strings.ToLower(level) {
	case "debug", "info", "warn", "error":
	default:
		fmt.Fprintf(os.Stderr, "dtq %s: DTQ_LOG_LEVEL: %q must be debug, info, warn or error\n", cmd, level)
		return false
	}
	logging.RouteRedis(logging.New(format, level, os.Stderr))
	return true
}

// noArgs refuses the positional arguments of a command that takes none.
func noArgs(cmd string, fs *flag.FlagSet) bool {
	if fs.NArg() == 0 {
		return true
	}
	fmt.Fprintf(os.Stderr, "dtq %s: unexpected argument %q (flags go before arguments; see --help)\n", cmd, fs.Arg(0))
	return false
}

// CLI connections: one dial a connection and a bounded TLS handshake, so that a wrong
// address or a rediss:// URL at a server without TLS fails in seconds with its reason.
const (
	cliDialAttempts     = 1
	cliHandshakeTimeout = 3 * time.Second
)

// redisFlags adds --redis and --prefix, defaulting to the environment.
type redisFlags struct {
	url, prefix, ca string
	fromFlag        bool // the URL came from --redis, not DTQ_REDIS_URL
}

func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	r := &redisFlags{}
	// The default is resolved at open, not shown: DTQ_REDIS_URL may hold a password.
	fs.StringVar(&r.url, "redis", "", "Redis URL (default: $DTQ_REDIS_URL, else redis://127.0.0.1:6379/0)")
	fs.StringVar(&r.prefix, "prefix", envDefault("DTQ_KEY_PREFIX", "dtq"), "key prefix (default from DTQ_KEY_PREFIX)")
	r.ca = os.Getenv("DTQ_REDIS_CA_FILE")
	return r
}

func (r *redisFlags) open() (redis.UniversalClient, error) {
	r.fromFlag = r.url != ""
	if r.url == "" {
		r.url = envDefault("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
	}
	return redisconn.Open(r.url, redisconn.Options{CAFile: r.ca, Name: "dtq-cli",
		DialAttempts: cliDialAttempts, HandshakeTimeout: cliHandshakeTimeout})
}

// source names what an error of open is about: --redis, DTQ_REDIS_URL or
// DTQ_REDIS_CA_FILE.
func (r *redisFlags) source(err error) string {
	v := redisconn.Variable(err)
	if v == "DTQ_REDIS_URL" && r.fromFlag {
		return "--redis"
	}
	return v
}

func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "dtq %s: %s\n", cmd, strings.Join(strings.Fields(err.Error()), " "))
	return exitFail
}
