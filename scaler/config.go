package scaler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

// Config is the scaler's configuration, read from the environment by LoadConfig or
// built in Go. Each field's tags name its variable, its default, its range (in the
// variable's unit) and its --help line: EnvVars is derived from them. Validate holds
// the rules that span fields.
type Config struct {
	// RedisURL: redis://, rediss://, redis+cluster://, redis+sentinel:// (as the worker's).
	RedisURL string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0" help:"Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"`
	// RedisCAFile: PEM CA bundle for rediss:// ("" = system roots).
	RedisCAFile string `env:"DTQ_REDIS_CA_FILE" help:"PEM CA bundle trusted for rediss://"`
	// KeyPrefix: the first part of every key; must match the workers'.
	KeyPrefix string `env:"DTQ_KEY_PREFIX, default=dtq" help:"prefix of every Redis key (the workers' prefix)"`
	// Port: HTTP port of /metrics, /healthz, /readyz.
	Port int `env:"PORT, default=8080" range:"0..65535" help:"HTTP port for /metrics, /healthz, /readyz"`
	// Addr: where the gRPC external scaler listens.
	Addr string `env:"DTQ_SCALER_ADDR, default=:6000" help:"gRPC listen address of the external scaler"`
	// TLSCertFile, TLSKeyFile: serve gRPC over TLS with this key pair (both or neither);
	// the files are read again when they change, so a rotated certificate needs no restart.
	TLSCertFile string `env:"DTQ_SCALER_TLS_CERT_FILE" help:"PEM certificate: serve gRPC over TLS (with the key)"`
	TLSKeyFile  string `env:"DTQ_SCALER_TLS_KEY_FILE" help:"PEM private key of the certificate"`
	// TLSClientCAFile: require client certificates signed by this CA bundle (mTLS); KEDA
	// sends one from the trigger's tlsClientCert/tlsClientKey.
	TLSClientCAFile string `env:"DTQ_SCALER_TLS_CLIENT_CA_FILE" help:"PEM CA bundle: require client certificates it signed (mTLS)"`
	// RedisTimeout bounds every Redis round trip; a slower Redis is an error, not a hang.
	RedisTimeout time.Duration `env:"DTQ_SCALER_REDIS_TIMEOUT_MS, default=2000" unit:"ms" range:"10..60000" help:"bound of every Redis round trip"`
	// CacheTTL: GetMetrics and IsActive answer from a read at most this old, so one
	// KEDA poll (GetMetrics then IsActive, per metric) costs one Redis round trip.
	CacheTTL time.Duration `env:"DTQ_SCALER_CACHE_TTL_MS, default=1000" unit:"ms" range:"0..60000" help:"GetMetrics/IsActive answer from a read at most this old"`
	// PushPoll: how often an active StreamIsActive subscription is re-read to see its
	// backlog drain (draining makes no stream entry to wake on).
	PushPoll time.Duration `env:"DTQ_SCALER_PUSH_POLL_MS, default=500" unit:"ms" range:"10..60000" help:"re-read interval of active StreamIsActive streams (drain detection)"`
	// PushMaxBlock: longest blocking read while every subscription is idle; new entries
	// end it at once, so this only bounds how often an idle scaler resynchronises.
	PushMaxBlock time.Duration `env:"DTQ_SCALER_PUSH_MAX_BLOCK_MS, default=5000" unit:"ms" range:"10..300000" help:"longest idle blocking read before a resync"`
	// PushRepeat: after a StreamIsActive stream turns active, true is sent again this
	// long after, then twice and four times as long after that, while it stays active.
	// KEDA drops a push of true when its cached copy of the Deployment still shows
	// replicas (a task enqueued just as KEDA scales to zero): the repeat wakes the
	// Deployment then, instead of KEDA's next poll. 0 sends each change once.
	PushRepeat time.Duration `env:"DTQ_SCALER_PUSH_REPEAT_MS, default=1000" unit:"ms" range:"0..60000" help:"send an active stream's true again after this, 2x and 4x later (0 = once)"`
	// MaxQueues bounds the queues the scaler watches, since any gRPC caller may name
	// them: the shared read behind GetMetrics and IsActive (a queue joins it once one of
	// its keys exists; a queue with none reads as zero from one EXISTS; an existing one
	// beyond the bound is read for its caller alone), the distinct queues of open
	// StreamIsActive streams (a stream beyond it is refused with ResourceExhausted), and
	// the queues /metrics reports. At least the queues one trigger may name (MaxQueues),
	// so every trigger can be watched; at most what one pipelined read (about 24
	// commands a queue) does well within the default Redis timeout.
	MaxQueues int `env:"DTQ_SCALER_MAX_QUEUES, default=1024" range:"256..16384" help:"most queues watched: shared reads, push streams, /metrics"`
	// ShutdownTimeout: how long SIGTERM waits for requests in flight.
	ShutdownTimeout time.Duration `env:"DTQ_SCALER_SHUTDOWN_TIMEOUT_S, default=10" unit:"s" range:"0..3600" help:"seconds SIGTERM waits for requests in flight"`
	// LogFormat: json, text, or auto (text on a terminal, json otherwise).
	LogFormat string `env:"DTQ_LOG_FORMAT, default=auto" help:"json, text or auto"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `env:"DTQ_LOG_LEVEL, default=info" help:"debug, info, warn, error"`
}

// DefaultMaxQueues is DTQ_SCALER_MAX_QUEUES unset (and what New takes for a Config
// built by hand without it).
const DefaultMaxQueues = 1024

// EnvVar describes one variable for --help.
type EnvVar = envcfg.Var

// EnvVars lists every variable the scaler reads, with its default; the help of a
// numeric one ends with its accepted range. It is derived from Config's tags.
func EnvVars() []EnvVar { return envcfg.Vars(reflect.TypeFor[Config]()) }

// ConfigError names the variable a bad value came from.
type ConfigError = envcfg.Error

// outOfRange words a value outside its range as the scaler always has.
func outOfRange(v float64, f envcfg.Field) error {
	switch {
	case f.Var == "PORT":
		return fmt.Errorf("%v is not a TCP port", v)
	case f.Unit == "s":
		return fmt.Errorf("%v must be between %v and %v seconds", v, f.Min, f.Max)
	}
	return fmt.Errorf("%v must be between %v and %v", v, f.Min, f.Max)
}

// LoadConfig reads the configuration from l (os.Getenv-backed in production,
// envconfig.MapLookuper in tests) and validates it.
func LoadConfig(ctx context.Context, l envconfig.Lookuper) (Config, error) {
	var c Config
	if err := envcfg.Load(ctx, l, &c, envcfg.OutOfRange(outOfRange)); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Validate checks every rule and returns the first violation as a *ConfigError. It
// changes nothing.
func (c Config) Validate() error {
	bad := func(v, f string, a ...any) error { return envcfg.Bad(v, fmt.Errorf(f, a...)) }
	if c.RedisURL == "" {
		return bad("DTQ_REDIS_URL", "must not be empty")
	}
	if !strings.HasPrefix(c.RedisURL, "redis") {
		return bad("DTQ_REDIS_URL", "must start with redis:// or rediss:// (or redis+cluster://, redis+sentinel://)")
	}
	if c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, "{} ") {
		return bad("DTQ_KEY_PREFIX", "%q must be non-empty, without braces or spaces", c.KeyPrefix)
	}
	if err := envcfg.Check(c, envcfg.OutOfRange(outOfRange)); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return bad("DTQ_SCALER_ADDR", "%q must be host:port or :port", c.Addr)
	}
	if c.TLSCertFile != "" && c.TLSKeyFile == "" {
		return bad("DTQ_SCALER_TLS_KEY_FILE", "must be set when DTQ_SCALER_TLS_CERT_FILE is")
	}
	if c.TLSKeyFile != "" && c.TLSCertFile == "" {
		return bad("DTQ_SCALER_TLS_CERT_FILE", "must be set when DTQ_SCALER_TLS_KEY_FILE is")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		return bad("DTQ_SCALER_TLS_CLIENT_CA_FILE", "needs DTQ_SCALER_TLS_CERT_FILE and DTQ_SCALER_TLS_KEY_FILE: mTLS is TLS first")
	}
	for _, f := range []struct{ name, path string }{
		{"DTQ_REDIS_CA_FILE", c.RedisCAFile},
		{"DTQ_SCALER_TLS_CERT_FILE", c.TLSCertFile},
		{"DTQ_SCALER_TLS_KEY_FILE", c.TLSKeyFile},
		{"DTQ_SCALER_TLS_CLIENT_CA_FILE", c.TLSClientCAFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return bad(f.name, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
	switch c.LogFormat {
	case "auto", "json", "text":
	default:
		return bad("DTQ_LOG_FORMAT", "%q must be auto, json or text", c.LogFormat)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return bad("DTQ_LOG_LEVEL", "%q must be debug, info, warn or error", c.LogLevel)
	}
	return nil
}
