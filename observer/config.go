package observer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

// Config is the observer's configuration, read from the environment by LoadConfig or
// built in Go. Each field's tags name its variable, its default and its --help line:
// EnvVars is derived from them.
type Config struct {
	// RedisURL: redis://, rediss://, redis+cluster://, redis+sentinel:// (as the worker's).
	RedisURL string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0" help:"Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"`
	// RedisCAFile: PEM CA bundle for rediss:// ("" = system roots).
	RedisCAFile string `env:"DTQ_REDIS_CA_FILE" help:"PEM CA bundle trusted for rediss://"`
	// KeyPrefix: the first part of every key; must match the workers'.
	KeyPrefix string `env:"DTQ_KEY_PREFIX, default=dtq" help:"prefix of every Redis key (the workers' prefix)"`
	// Port: HTTP port of the API, /healthz, /readyz and /metrics (Validate checks its
	// range, stated in its help).
	Port int `env:"PORT, default=8080" help:"HTTP port of the API, /healthz, /readyz, /metrics; 0..65535 (0 = any free port)"`
	// Token: the bearer token of the actions (pause, resume, cancel, requeue), at least
	// MinTokenBytes; unset, the actions are off.
	Token string `env:"DTQ_OBSERVER_TOKEN" help:"bearer token of the actions (pause, resume, cancel, requeue), at least 16 bytes; unset: actions off"`
	// ReadOpen: the read endpoints need no token; false: they need it too.
	ReadOpen bool `env:"DTQ_OBSERVER_READ_OPEN, default=true" help:"read endpoints need no token (false: they need DTQ_OBSERVER_TOKEN too)"`
	// TLSCertFile, TLSKeyFile: serve HTTPS with this key pair (both or neither), read
	// again when the files change.
	TLSCertFile string `env:"DTQ_OBSERVER_TLS_CERT_FILE" help:"PEM certificate: serve HTTPS (with the key); unset: plain HTTP"`
	TLSKeyFile  string `env:"DTQ_OBSERVER_TLS_KEY_FILE" help:"PEM private key of the certificate"`
	// StaleEvery: how often the stale watcher judges the workers and publishes
	// WORKER_STALE (0 = off).
	StaleEvery time.Duration `env:"DTQ_OBSERVER_STALE_CHECK_S, default=2" unit:"s" range:"0..60" help:"seconds between the stale watcher's passes, which publish WORKER_STALE (0 = off)"`
	// EventsMaxLen: the approximate cap of the events stream the watcher publishes to,
	// as the workers' (0: the watcher publishes nothing).
	EventsMaxLen int64 `env:"DTQ_EVENTS_MAXLEN, default=10000" range:"0..100000000" help:"approximate cap of the events stream, as the workers' (0 = WORKER_STALE off)"`
	// MaxStreams: the most /api/v1/events streams served at once; one more is a 503.
	MaxStreams int `env:"DTQ_OBSERVER_MAX_STREAMS, default=256" range:"1..10000" help:"most /api/v1/events streams open at once (beyond: 503)"`
	// LogFormat: json, text, or auto (text on a terminal, json otherwise).
	LogFormat string `env:"DTQ_LOG_FORMAT, default=auto" help:"json, text or auto"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `env:"DTQ_LOG_LEVEL, default=info" help:"debug, info, warn, error"`
}

// MinStaleEvery is the shortest time between two passes of the stale watcher.
const MinStaleEvery = 50 * time.Millisecond

// MinTokenBytes is the shortest DTQ_OBSERVER_TOKEN accepted.
const MinTokenBytes = 16

// EnvVar describes one variable for --help.
type EnvVar = envcfg.Var

// EnvVars lists every variable the observer reads, with its default. It is derived
// from Config's tags.
func EnvVars() []EnvVar { return envcfg.Vars(reflect.TypeFor[Config]()) }

// LoadConfig reads and validates the configuration. A bad value is an *envcfg.Error
// naming its variable.
func LoadConfig(ctx context.Context, env envconfig.Lookuper) (Config, error) {
	var c Config
	if err := envcfg.Load(ctx, env, &c); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate checks every field.
func (c Config) Validate() error {
	if err := envcfg.Check(c); err != nil { // the range tags
		return err
	}
	switch {
	case c.KeyPrefix == "" || len(c.KeyPrefix) > 64 || !printable(c.KeyPrefix) || strings.ContainsAny(c.KeyPrefix, "{}"):
		// the worker's rule: a prefix one accepts, the other does too
		return envcfg.Bad("DTQ_KEY_PREFIX", fmt.Errorf("%q must be 1..64 printable characters without braces or spaces", c.KeyPrefix))
	case c.Port < 0 || c.Port > 65535:
		return envcfg.Bad("PORT", fmt.Errorf("%d must be within 0..65535", c.Port))
	case c.Token != "" && len(c.Token) < MinTokenBytes:
		// The token's value is never printed.
		return envcfg.Bad("DTQ_OBSERVER_TOKEN", fmt.Errorf("%d bytes is too short: at least %d", len(c.Token), MinTokenBytes))
	case c.Token != "" && !printable(c.Token):
		return envcfg.Bad("DTQ_OBSERVER_TOKEN", fmt.Errorf("must be printable ASCII without spaces"))
	case c.StaleEvery != 0 && c.StaleEvery < MinStaleEvery:
		return envcfg.Bad("DTQ_OBSERVER_STALE_CHECK_S", fmt.Errorf("%v must be 0 (off) or at least %v", c.StaleEvery.Seconds(), MinStaleEvery.Seconds()))
	case !c.ReadOpen && c.Token == "":
		return envcfg.Bad("DTQ_OBSERVER_READ_OPEN", fmt.Errorf("false needs DTQ_OBSERVER_TOKEN set"))
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return envcfg.Bad("DTQ_OBSERVER_TLS_KEY_FILE", fmt.Errorf("must be set when DTQ_OBSERVER_TLS_CERT_FILE is"))
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		return envcfg.Bad("DTQ_OBSERVER_TLS_CERT_FILE", fmt.Errorf("must be set when DTQ_OBSERVER_TLS_KEY_FILE is"))
	case c.LogFormat != "auto" && c.LogFormat != "json" && c.LogFormat != "text":
		return envcfg.Bad("DTQ_LOG_FORMAT", fmt.Errorf("%q must be auto, json or text", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return envcfg.Bad("DTQ_LOG_LEVEL", fmt.Errorf("%q must be debug, info, warn or error", c.LogLevel))
	}
	for _, f := range []struct{ name, path string }{
		{"DTQ_OBSERVER_TLS_CERT_FILE", c.TLSCertFile}, {"DTQ_OBSERVER_TLS_KEY_FILE", c.TLSKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return envcfg.Bad(f.name, fmt.Errorf("cannot read %s: %v", f.path, errors.Unwrap(err)))
		}
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
