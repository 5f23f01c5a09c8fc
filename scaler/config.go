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
)

// Config is the scaler's configuration, read from the environment. Every field's
// default is in its tag; Validate holds the rules that span fields.
type Config struct {
	// RedisURL: redis://, rediss://, redis+cluster://, redis+sentinel:// (as the worker's).
	RedisURL string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0"`
	// RedisCAFile: PEM CA bundle for rediss:// ("" = system roots).
	RedisCAFile string `env:"DTQ_REDIS_CA_FILE"`
	// KeyPrefix: the first part of every key; must match the workers'.
	KeyPrefix string `env:"DTQ_KEY_PREFIX, default=dtq"`
	// Port: HTTP port of /metrics, /healthz, /readyz.
	Port int `env:"PORT, default=8080"`
	// Addr: where the gRPC external scaler listens.
	Addr string `env:"DTQ_SCALER_ADDR, default=:6000"`
	// TLSCertFile, TLSKeyFile: serve gRPC over TLS with this key pair (both or neither);
	// the files are read again when they change, so a rotated certificate needs no restart.
	TLSCertFile string `env:"DTQ_SCALER_TLS_CERT_FILE"`
	TLSKeyFile  string `env:"DTQ_SCALER_TLS_KEY_FILE"`
	// TLSClientCAFile: require client certificates signed by this CA bundle (mTLS); KEDA
	// sends one from the trigger's tlsClientCert/tlsClientKey.
	TLSClientCAFile string `env:"DTQ_SCALER_TLS_CLIENT_CA_FILE"`
	// RedisTimeoutMS bounds every Redis round trip; a slower Redis is an error, not a hang.
	RedisTimeoutMS int `env:"DTQ_SCALER_REDIS_TIMEOUT_MS, default=2000"`
	// CacheTTLMS: GetMetrics and IsActive answer from a read at most this old, so one
	// KEDA poll (GetMetrics then IsActive, per metric) costs one Redis round trip.
	CacheTTLMS int `env:"DTQ_SCALER_CACHE_TTL_MS, default=1000"`
	// PushPollMS: how often an active StreamIsActive subscription is re-read to see its
	// backlog drain (draining makes no stream entry to wake on).
	PushPollMS int `env:"DTQ_SCALER_PUSH_POLL_MS, default=500"`
	// PushMaxBlockMS: longest blocking read while every subscription is idle; new entries
	// end it at once, so this only bounds how often an idle scaler resynchronises.
	PushMaxBlockMS int `env:"DTQ_SCALER_PUSH_MAX_BLOCK_MS, default=5000"`
	// MaxQueues bounds the queues the scaler watches, since any gRPC caller may name
	// them: the shared read behind GetMetrics and IsActive (a queue joins it once one of
	// its keys exists; a queue with none reads as zero from one EXISTS; an existing one
	// beyond the bound is read for its caller alone), the distinct queues of open
	// StreamIsActive streams (a stream beyond it is refused with ResourceExhausted), and
	// the queues /metrics reports.
	MaxQueues int `env:"DTQ_SCALER_MAX_QUEUES, default=1024"`
	// ShutdownTimeoutS: how long SIGTERM waits for requests in flight.
	ShutdownTimeoutS float64 `env:"DTQ_SCALER_SHUTDOWN_TIMEOUT_S, default=10"`
	// LogFormat: json, text, or auto (text on a terminal, json otherwise).
	LogFormat string `env:"DTQ_LOG_FORMAT, default=auto"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `env:"DTQ_LOG_LEVEL, default=info"`
}

// DefaultMaxQueues is DTQ_SCALER_MAX_QUEUES unset (and what New takes for a Config
// built by hand without it).
const DefaultMaxQueues = 1024

// EnvVar describes one variable for --help.
type EnvVar struct{ Name, Default, Help string }

// EnvVars lists every variable the scaler reads, with its default.
func EnvVars() []EnvVar {
	return []EnvVar{
		{"DTQ_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"},
		{"DTQ_REDIS_CA_FILE", "", "PEM CA bundle trusted for rediss://"},
		{"DTQ_KEY_PREFIX", "dtq", "prefix of every Redis key (the workers' prefix)"},
		{"PORT", "8080", "HTTP port for /metrics, /healthz, /readyz; 0..65535"},
		{"DTQ_SCALER_ADDR", ":6000", "gRPC listen address of the external scaler"},
		{"DTQ_SCALER_TLS_CERT_FILE", "", "PEM certificate: serve gRPC over TLS (with the key)"},
		{"DTQ_SCALER_TLS_KEY_FILE", "", "PEM private key of the certificate"},
		{"DTQ_SCALER_TLS_CLIENT_CA_FILE", "", "PEM CA bundle: require client certificates it signed (mTLS)"},
		{"DTQ_SCALER_REDIS_TIMEOUT_MS", "2000", "bound of every Redis round trip; 10..60000 ms"},
		{"DTQ_SCALER_CACHE_TTL_MS", "1000", "GetMetrics/IsActive answer from a read at most this old; 0..60000 ms"},
		{"DTQ_SCALER_PUSH_POLL_MS", "500", "re-read interval of active StreamIsActive streams (drain detection); 10..60000 ms"},
		{"DTQ_SCALER_PUSH_MAX_BLOCK_MS", "5000", "longest idle blocking read before a resync; 10..300000 ms"},
		{"DTQ_SCALER_MAX_QUEUES", "1024", "most queues watched: shared reads, push streams, /metrics; 256..16384"},
		{"DTQ_SCALER_SHUTDOWN_TIMEOUT_S", "10", "seconds SIGTERM waits for requests in flight; 0..3600 seconds"},
		{"DTQ_LOG_FORMAT", "auto", "json, text or auto"},
		{"DTQ_LOG_LEVEL", "info", "debug, info, warn, error"},
	}
}

// ConfigError names the variable a bad value came from.
type ConfigError struct {
	Var string
	Err error
}

func (e *ConfigError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads the configuration from l (os.Getenv-backed in production,
// envconfig.MapLookuper in tests) and validates it.
func LoadConfig(ctx context.Context, l envconfig.Lookuper) (Config, error) {
	var c Config
	if err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: &c, Lookuper: l}); err != nil {
		return c, envError(err)
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// envError turns go-envconfig's error, which names the struct field ("Port:
// strconv.ParseInt: parsing \"x\": invalid syntax"), into a ConfigError naming the
// variable, with the reason only.
func envError(err error) error {
	msg := err.Error()
	t := reflect.TypeFor[Config]()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		rest, ok := strings.CutPrefix(msg, f.Name+": ")
		if !ok && !strings.Contains(msg, `"`+name+`"`) {
			continue
		}
		if !ok {
			rest = msg
		}
		if j := strings.Index(rest, "parsing "); j >= 0 {
			v := rest[j+len("parsing "):]
			if k := strings.LastIndex(v, ": "); k >= 0 {
				rest = v[:k] + " is not a valid value (" + v[k+2:] + ")"
			}
		}
		return &ConfigError{Var: name, Err: errors.New(rest)}
	}
	return &ConfigError{Var: "environment", Err: err}
}

// Validate checks every rule and returns the first violation as a *ConfigError.
func (c *Config) Validate() error {
	bad := func(v, f string, a ...any) error { return &ConfigError{Var: v, Err: fmt.Errorf(f, a...)} }
	if c.RedisURL == "" {
		return bad("DTQ_REDIS_URL", "must not be empty")
	}
	if !strings.HasPrefix(c.RedisURL, "redis") {
		return bad("DTQ_REDIS_URL", "must start with redis:// or rediss:// (or redis+cluster://, redis+sentinel://)")
	}
	if c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, "{} ") {
		return bad("DTQ_KEY_PREFIX", "%q must be non-empty, without braces or spaces", c.KeyPrefix)
	}
	if c.Port < 0 || c.Port > 65535 {
		return bad("PORT", "%d is not a TCP port", c.Port)
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
	for _, f := range []struct {
		name     string
		v        int
		min, max int
	}{
		{"DTQ_SCALER_REDIS_TIMEOUT_MS", c.RedisTimeoutMS, 10, 60000},
		{"DTQ_SCALER_CACHE_TTL_MS", c.CacheTTLMS, 0, 60000},
		{"DTQ_SCALER_PUSH_POLL_MS", c.PushPollMS, 10, 60000},
		{"DTQ_SCALER_PUSH_MAX_BLOCK_MS", c.PushMaxBlockMS, 10, 300000},
		// At least the queues one trigger may name, so every trigger can be watched;
		// at most what one pipelined read (about 24 commands a queue) does well within
		// the default Redis timeout.
		{"DTQ_SCALER_MAX_QUEUES", c.MaxQueues, MaxQueues, 16384},
	} {
		if f.v < f.min || f.v > f.max {
			return bad(f.name, "%d must be between %d and %d", f.v, f.min, f.max)
		}
	}
	if !(c.ShutdownTimeoutS >= 0 && c.ShutdownTimeoutS <= 3600) {
		return bad("DTQ_SCALER_SHUTDOWN_TIMEOUT_S", "%v must be between 0 and 3600 seconds", c.ShutdownTimeoutS)
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

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// RedisTimeout, CacheTTL, PushPoll, PushMaxBlock, ShutdownTimeout as durations.
func (c Config) RedisTimeout() time.Duration { return ms(c.RedisTimeoutMS) }
func (c Config) CacheTTL() time.Duration     { return ms(c.CacheTTLMS) }
func (c Config) PushPoll() time.Duration     { return ms(c.PushPollMS) }
func (c Config) PushMaxBlock() time.Duration { return ms(c.PushMaxBlockMS) }
func (c Config) ShutdownTimeout() time.Duration {
	return time.Duration(c.ShutdownTimeoutS * float64(time.Second))
}
