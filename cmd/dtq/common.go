package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

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
}

// redisFlags adds --redis and --prefix, defaulting to the environment.
type redisFlags struct{ url, prefix, ca string }

func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	r := &redisFlags{}
	// The default is resolved at open, not shown: DTQ_REDIS_URL may hold a password.
	fs.StringVar(&r.url, "redis", "", "Redis URL (default: $DTQ_REDIS_URL, else redis://127.0.0.1:6379/0)")
	fs.StringVar(&r.prefix, "prefix", envDefault("DTQ_KEY_PREFIX", "dtq"), "key prefix (default from DTQ_KEY_PREFIX)")
	r.ca = os.Getenv("DTQ_REDIS_CA_FILE")
	return r
}

func (r *redisFlags) open() (redis.UniversalClient, error) {
	if r.url == "" {
		r.url = envDefault("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
	}
	return redisconn.Open(r.url, redisconn.Options{CAFile: r.ca, Name: "dtq-cli"})
}

func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "dtq %s: %s\n", cmd, strings.Join(strings.Fields(err.Error()), " "))
	return exitFail
}
