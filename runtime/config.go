package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/internal/keys"
)

// Config is the worker's configuration, read from the environment. Every field's
// default is in its tag; Validate holds the rules that span fields.
type Config struct {
	// RedisURL: redis://, rediss://, redis+cluster://, redis+sentinel:// (see README).
	RedisURL string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0"`
	// RedisCAFile: PEM CA bundle for rediss:// ("" = system roots).
	RedisCAFile string `env:"DTQ_REDIS_CA_FILE"`
	// KeyPrefix: the first part of every key.
	KeyPrefix string `env:"DTQ_KEY_PREFIX, default=dtq"`
	// Queues: the queues this worker serves, in order.
	Queues []string `env:"DTQ_QUEUES, default=default"`
	// Concurrency: how many functions run at once.
	Concurrency int `env:"DTQ_WORKER_CONCURRENCY, default=16"`
	// VisibilityTimeoutS: seconds an entry may sit unheartbeated before a peer reclaims it.
	VisibilityTimeoutS float64 `env:"DTQ_VISIBILITY_TIMEOUT_S, default=30"`
	// HeartbeatIntervalS: seconds between heartbeats; must be below the visibility timeout.
	HeartbeatIntervalS float64 `env:"DTQ_HEARTBEAT_INTERVAL_S, default=5"`
	// DrainTimeoutS: seconds SIGTERM waits for running functions before cancelling them.
	DrainTimeoutS float64 `env:"DTQ_DRAIN_TIMEOUT_S, default=30"`
	// WorkerID: consumer name, lock token and metrics label ("" = worker-<8 hex>).
	WorkerID string `env:"DTQ_WORKER_ID"`
	// Port: HTTP port of /healthz, /readyz, /metrics (Knative and Cloud Run set PORT).
	Port int `env:"PORT, default=8080"`
	// MaxPayloadBytes: payloads above this are refused at enqueue and killed at claim.
	MaxPayloadBytes int `env:"DTQ_MAX_PAYLOAD_BYTES, default=1048576"`
	// ResultTTLS: seconds a succeeded or cancelled task's record is kept (0 = forever).
	ResultTTLS float64 `env:"DTQ_RESULT_TTL_S, default=86400"`
	// DeadMax: dead tasks kept per queue; the scheduler leader deletes the oldest beyond it.
	DeadMax int64 `env:"DTQ_DEAD_MAX, default=10000"`
	// DeadTTLS: seconds a dead task is kept (0 = no age bound: DTQ_DEAD_MAX alone bounds them).
	DeadTTLS float64 `env:"DTQ_DEAD_TTL_S, default=7776000"`
	// PollBlockMS: longest blocking read while idle; new work wakes it at once and
	// SIGTERM unblocks it, so this only bounds idle round trips.
	PollBlockMS int `env:"DTQ_POLL_BLOCK_MS, default=30000"`
	// SchedulerIntervalS: seconds between scheduler passes (plus up to a fifth, at random).
	SchedulerIntervalS float64 `env:"DTQ_SCHEDULER_INTERVAL_S, default=1"`
	// SchedulerLockTTLMS: the leader lock's lifetime; renewed once a third of it has passed.
	SchedulerLockTTLMS int `env:"DTQ_SCHEDULER_LOCK_TTL_MS, default=10000"`
	// EventsMaxLen: approximate cap of the events stream (0 = no events).
	EventsMaxLen int64 `env:"DTQ_EVENTS_MAXLEN, default=10000"`
	// EventsVerbose: also publish TASK_STARTED and TASK_SUCCEEDED (one write per task).
	EventsVerbose bool `env:"DTQ_EVENTS_VERBOSE, default=false"`
	// RetryBaseMS, RetryMaxMS: default backoff between retries: base·2ⁿ⁻¹ capped at max,
	// half of it jittered (ExpBackoff).
	RetryBaseMS int `env:"DTQ_RETRY_BASE_MS, default=1000"`
	RetryMaxMS  int `env:"DTQ_RETRY_MAX_MS, default=600000"`
	// DefaultTimeoutS: a function's run limit when neither task nor function sets one (0 = none).
	DefaultTimeoutS float64 `env:"DTQ_DEFAULT_TIMEOUT_S, default=1800"`
	// LogFormat: json, text, or auto (text on a terminal, json otherwise).
	LogFormat string `env:"DTQ_LOG_FORMAT, default=auto"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `env:"DTQ_LOG_LEVEL, default=info"`
	// MaxTasks: after starting this many tasks the worker drains and exits 0 (0 = no
	// limit): a KEDA ScaledJob's worker, one Job per batch of work.
	MaxTasks int64 `env:"DTQ_WORKER_MAX_TASKS, default=0"`
	// IdleExitS: a worker with nothing running and nothing arriving for this many seconds
	// drains and exits 0 (0 = never): a ScaledJob's worker ends when the queue is empty.
	IdleExitS float64 `env:"DTQ_WORKER_IDLE_EXIT_S, default=0"`
	// RedisFatalAfterS: how long Redis may refuse the worker in a way no wait heals (a
	// wrong password, a missing ACL permission, a database number out of range) before
	// it exits 3 (0 = at the first refusal).
	RedisFatalAfterS float64 `env:"DTQ_REDIS_FATAL_AFTER_S, default=10"`
	// Pprof serves net/http/pprof under /debug/pprof/ on PORT.
	Pprof bool `env:"DTQ_PPROF, default=false"`
}

// EnvVar describes one variable for --help.
type EnvVar struct{ Name, Default, Help string }

// EnvVars lists every variable the worker reads, with its default; the help of a
// numeric one ends with its accepted range.
func EnvVars() []EnvVar {
	vars := []EnvVar{
		{"DTQ_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"},
		{"DTQ_REDIS_CA_FILE", "", "PEM CA bundle trusted for rediss://"},
		{"DTQ_KEY_PREFIX", "dtq", "prefix of every Redis key"},
		{"DTQ_QUEUES", "default", "queues to serve, comma-separated, in order"},
		{"DTQ_WORKER_CONCURRENCY", "16", "functions running at once"},
		{"DTQ_VISIBILITY_TIMEOUT_S", "30", "seconds before a silent worker's entries are reclaimed"},
		{"DTQ_HEARTBEAT_INTERVAL_S", "5", "seconds between heartbeats (< visibility timeout)"},
		{"DTQ_DRAIN_TIMEOUT_S", "30", "seconds SIGTERM waits for running functions"},
		{"DTQ_WORKER_ID", "worker-<8 hex>", "consumer name, lock token, metrics label"},
		{"PORT", "8080", "HTTP port for /healthz, /readyz, /metrics (0 = any free port)"},
		{"DTQ_MAX_PAYLOAD_BYTES", "1048576", "largest payload accepted"},
		{"DTQ_RESULT_TTL_S", "86400", "seconds finished task records are kept (0 = forever)"},
		{"DTQ_DEAD_MAX", "10000", "dead tasks kept per queue; the scheduler leader deletes the oldest beyond it"},
		{"DTQ_DEAD_TTL_S", "7776000", "seconds dead tasks are kept (90 days; 0 = no age bound, DTQ_DEAD_MAX still holds)"},
		{"DTQ_POLL_BLOCK_MS", "30000", "longest idle blocking read (new work and SIGTERM end it at once)"},
		{"DTQ_SCHEDULER_INTERVAL_S", "1", "seconds between scheduler passes (plus up to a fifth, at random)"},
		{"DTQ_SCHEDULER_LOCK_TTL_MS", "10000", "scheduler leader lock lifetime (> the interval; a killed leader holds it this long)"},
		{"DTQ_EVENTS_MAXLEN", "10000", "approximate cap of the events stream (0 = off)"},
		{"DTQ_EVENTS_VERBOSE", "false", "also publish TASK_STARTED and TASK_SUCCEEDED"},
		{"DTQ_RETRY_BASE_MS", "1000", "first retry backoff; the nth is base·2ⁿ⁻¹ capped at DTQ_RETRY_MAX_MS, half of it jittered (<= DTQ_RETRY_MAX_MS)"},
		{"DTQ_RETRY_MAX_MS", "600000", "longest retry backoff"},
		{"DTQ_DEFAULT_TIMEOUT_S", "1800", "function time limit when none is set (0 = none)"},
		{"DTQ_LOG_FORMAT", "auto", "json, text or auto"},
		{"DTQ_LOG_LEVEL", "info", "debug, info, warn, error"},
		{"DTQ_WORKER_MAX_TASKS", "0", "drain and exit 0 after starting this many tasks (0 = no limit; ScaledJob)"},
		{"DTQ_WORKER_IDLE_EXIT_S", "0", "drain and exit 0 after this many idle seconds (0 = never; ScaledJob)"},
		{"DTQ_REDIS_FATAL_AFTER_S", "10", "seconds Redis may refuse the worker (password, ACL, DB number) before it exits 3 (0 = at once)"},
		{"DTQ_PPROF", "false", "serve /debug/pprof/ on PORT (profiling)"},
	}
	for i, v := range vars {
		if l, ok := limits[v.Name]; ok {
			vars[i].Help += "; " + l.String()
		}
	}
	return vars
}

// limit is the accepted range of a numeric variable.
type limit struct {
	min, max float64
	unit     string // "seconds", "ms", "bytes" or ""
}

func (l limit) String() string {
	s := strconv.FormatFloat(l.min, 'f', -1, 64) + ".." + strconv.FormatFloat(l.max, 'f', -1, 64)
	if l.unit != "" {
		s += " " + l.unit
	}
	return s
}

const (
	day  = 86400
	week = 7 * day
	year = 365 * day
)

// limits bound every numeric variable: a value outside is an error at start, not an
// overflow or a wait of years later.
var limits = map[string]limit{
	"DTQ_WORKER_CONCURRENCY":    {1, 100000, ""},
	"DTQ_VISIBILITY_TIMEOUT_S":  {0.05, day, "seconds"},
	"DTQ_HEARTBEAT_INTERVAL_S":  {0.01, 3600, "seconds"},
	"DTQ_DRAIN_TIMEOUT_S":       {0, day, "seconds"},
	"PORT":                      {0, 65535, ""},
	"DTQ_MAX_PAYLOAD_BYTES":     {1, 512 << 20, "bytes"},
	"DTQ_RESULT_TTL_S":          {0, year, "seconds"},
	"DTQ_DEAD_MAX":              {1, 10_000_000, ""},
	"DTQ_DEAD_TTL_S":            {0, 10 * year, "seconds"},
	"DTQ_POLL_BLOCK_MS":         {1, 60000, "ms"},
	"DTQ_SCHEDULER_INTERVAL_S":  {0.01, 60, "seconds"},
	"DTQ_SCHEDULER_LOCK_TTL_MS": {100, 600000, "ms"},
	"DTQ_EVENTS_MAXLEN":         {0, 100_000_000, ""},
	"DTQ_RETRY_BASE_MS":         {0, week * 1000, "ms"},
	"DTQ_RETRY_MAX_MS":          {0, week * 1000, "ms"},
	"DTQ_DEFAULT_TIMEOUT_S":     {0, week, "seconds"},
	"DTQ_WORKER_MAX_TASKS":      {0, 1_000_000_000, ""},
	"DTQ_WORKER_IDLE_EXIT_S":    {0, day, "seconds"},
	"DTQ_REDIS_FATAL_AFTER_S":   {0, 3600, "seconds"},
}

// ConfigError names the variable a bad value came from.
type ConfigError = envcfg.Error

// LoadConfig reads the configuration from l (envconfig.OsLookuper in production,
// envconfig.MapLookuper in tests) and validates it.
func LoadConfig(ctx context.Context, l envconfig.Lookuper) (Config, error) {
	var c Config
	if err := envcfg.Load(ctx, l, &c); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Validate checks every rule, fills derived defaults (the worker id) and returns the
// first violation as a *ConfigError.
func (c *Config) Validate() error {
	bad := func(v, f string, a ...any) error { return envcfg.Bad(v, fmt.Errorf(f, a...)) }
	if c.RedisURL == "" {
		return bad("DTQ_REDIS_URL", "must not be empty")
	}
	if !strings.HasPrefix(c.RedisURL, "redis") {
		return bad("DTQ_REDIS_URL", "must start with redis:// or rediss:// (or redis+cluster://, redis+sentinel://)")
	}
	if c.KeyPrefix == "" || len(c.KeyPrefix) > 64 || strings.ContainsFunc(c.KeyPrefix, func(r rune) bool { return r <= ' ' || r == '{' || r == '}' || r > '~' }) {
		return bad("DTQ_KEY_PREFIX", "%q must be 1..64 printable characters without braces or spaces", c.KeyPrefix)
	}
	if len(c.Queues) == 0 {
		return bad("DTQ_QUEUES", "must name at least one queue")
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		q = strings.TrimSpace(q)
		c.Queues[i] = q
		if err := keys.ValidQueue(q); err != nil {
			return bad("DTQ_QUEUES", "%v", err)
		}
		if seen[q] {
			return bad("DTQ_QUEUES", "queue %q listed twice", q)
		}
		seen[q] = true
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"DTQ_WORKER_CONCURRENCY", float64(c.Concurrency)},
		{"DTQ_VISIBILITY_TIMEOUT_S", c.VisibilityTimeoutS},
		{"DTQ_HEARTBEAT_INTERVAL_S", c.HeartbeatIntervalS},
		{"DTQ_DRAIN_TIMEOUT_S", c.DrainTimeoutS},
		{"PORT", float64(c.Port)},
		{"DTQ_MAX_PAYLOAD_BYTES", float64(c.MaxPayloadBytes)},
		{"DTQ_RESULT_TTL_S", c.ResultTTLS},
		{"DTQ_DEAD_MAX", float64(c.DeadMax)},
		{"DTQ_DEAD_TTL_S", c.DeadTTLS},
		{"DTQ_POLL_BLOCK_MS", float64(c.PollBlockMS)},
		{"DTQ_SCHEDULER_INTERVAL_S", c.SchedulerIntervalS},
		{"DTQ_SCHEDULER_LOCK_TTL_MS", float64(c.SchedulerLockTTLMS)},
		{"DTQ_EVENTS_MAXLEN", float64(c.EventsMaxLen)},
		{"DTQ_RETRY_BASE_MS", float64(c.RetryBaseMS)},
		{"DTQ_RETRY_MAX_MS", float64(c.RetryMaxMS)},
		{"DTQ_DEFAULT_TIMEOUT_S", c.DefaultTimeoutS},
		{"DTQ_WORKER_MAX_TASKS", float64(c.MaxTasks)},
		{"DTQ_WORKER_IDLE_EXIT_S", c.IdleExitS},
		{"DTQ_REDIS_FATAL_AFTER_S", c.RedisFatalAfterS},
	} {
		// NaN fails both comparisons: !(in range) catches it, and ±Inf is out of range.
		if l := limits[f.name]; !(f.v >= l.min && f.v <= l.max) {
			return bad(f.name, "%v must be within %s", f.v, l)
		}
	}
	if c.HeartbeatIntervalS >= c.VisibilityTimeoutS {
		return bad("DTQ_HEARTBEAT_INTERVAL_S", "%v must be below DTQ_VISIBILITY_TIMEOUT_S (%v), or live workers' tasks get reclaimed", c.HeartbeatIntervalS, c.VisibilityTimeoutS)
	}
	if float64(c.SchedulerLockTTLMS) <= c.SchedulerIntervalS*1000 {
		return bad("DTQ_SCHEDULER_LOCK_TTL_MS", "%d must exceed the scheduler interval (%vs) or the leader loses its lock between passes", c.SchedulerLockTTLMS, c.SchedulerIntervalS)
	}
	if c.RetryMaxMS < c.RetryBaseMS {
		return bad("DTQ_RETRY_MAX_MS", "%d must not be below DTQ_RETRY_BASE_MS (%d)", c.RetryMaxMS, c.RetryBaseMS)
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
	if c.WorkerID == "" {
		c.WorkerID = NewWorkerID()
	} else if len(c.WorkerID) > 128 || strings.ContainsFunc(c.WorkerID, func(r rune) bool { return r <= ' ' || r == '{' || r == '}' || r > '~' }) {
		return bad("DTQ_WORKER_ID", "%q must be at most 128 bytes without spaces or braces", c.WorkerID)
	}
	return nil
}

// NewWorkerID returns "worker-" and 8 random hex characters.
func NewWorkerID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "worker-" + hex.EncodeToString(b[:])
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// VisibilityTimeout, HeartbeatInterval, DrainTimeout as durations.
func (c Config) VisibilityTimeout() time.Duration { return seconds(c.VisibilityTimeoutS) }
func (c Config) HeartbeatInterval() time.Duration { return seconds(c.HeartbeatIntervalS) }
func (c Config) DrainTimeout() time.Duration      { return seconds(c.DrainTimeoutS) }
