package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/envcfg"
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

// helpWidth is the column the defaults of --help's environment list start after.
const helpWidth = 28

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
			envcfg.WriteHelp(out, env, helpWidth, "")
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

// clientConfig is what the producer and inspection commands read. They read it
// variable by variable (clientVar), with flags over some; its tags give their --help
// list and the defaults.
type clientConfig struct {
	RedisURL        string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0" help:"Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"`
	RedisCAFile     string `env:"DTQ_REDIS_CA_FILE" help:"PEM CA bundle trusted for rediss://"`
	KeyPrefix       string `env:"DTQ_KEY_PREFIX, default=dtq" help:"prefix of every Redis key"`
	MaxPayloadBytes int    `env:"DTQ_MAX_PAYLOAD_BYTES, default=1048576" help:"largest payload enqueue sends"`
	LogFormat       string `env:"DTQ_LOG_FORMAT, default=auto" help:"format of go-redis's log lines: auto (text on a terminal), json, text"`
	LogLevel        string `env:"DTQ_LOG_LEVEL, default=error" help:"least level logged: debug, info, warn (go-redis's dial retries), error"`
}

// clientEnv is the --help list of the producer and inspection commands.
func clientEnv() []runtime.EnvVar { return envcfg.Vars(reflect.TypeFor[clientConfig]()) }

// clientVar returns the environment's value of name, one of clientConfig's variables,
// or its default when unset or empty.
func clientVar(name string) string {
	for _, v := range clientEnv() {
		if v.Name == name {
			return envDefault(name, v.Default)
		}
	}
	panic("dtq: " + name + " is not a variable of the client commands")
}

// cliLogs routes go-redis's own log lines through slog for the commands other than
// the worker (which does it with its own configuration): DTQ_LOG_FORMAT and
// DTQ_LOG_LEVEL, at error by default, since a command's failure is its error line.
func cliLogs(cmd string) bool {
	format := clientVar("DTQ_LOG_FORMAT")
	level := clientVar("DTQ_LOG_LEVEL")
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
	fs.StringVar(&r.prefix, "prefix", clientVar("DTQ_KEY_PREFIX"), "key prefix (default from DTQ_KEY_PREFIX)")
	r.ca = os.Getenv("DTQ_REDIS_CA_FILE")
	return r
}

func (r *redisFlags) open() (redis.UniversalClient, error) {
	r.fromFlag = r.url != ""
	if r.url == "" {
		r.url = clientVar("DTQ_REDIS_URL")
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
