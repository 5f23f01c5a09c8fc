package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/internal/keys"
)

// Config is the worker's configuration. LoadConfig reads it from the environment; a
// program embedding the worker may build it in Go instead, with WithDefaults for the
// fields it leaves zero. Each field's tags name its variable, its default, its range
// (in the variable's unit) and its --help line: EnvVars is derived from them. The
// durations are read from the environment in the unit their variable names (_S:
// seconds, fractions accepted; _MS: whole milliseconds).
type Config struct {
	// RedisURL: redis://, rediss://, redis+cluster://, redis+sentinel:// (see README).
	RedisURL string `env:"DTQ_REDIS_URL, default=redis://127.0.0.1:6379/0" help:"Redis: redis://, rediss://, redis+cluster://, redis+sentinel://"`
	// RedisCAFile: PEM CA bundle for rediss:// ("" = system roots).
	RedisCAFile string `env:"DTQ_REDIS_CA_FILE" help:"PEM CA bundle trusted for rediss://"`
	// KeyPrefix: the first part of every key.
	KeyPrefix string `env:"DTQ_KEY_PREFIX, default=dtq" help:"prefix of every Redis key"`
	// Queues: the queues this worker serves, in order (the loader trims spaces around
	// each name; Validate refuses a name with spaces).
	Queues []string `env:"DTQ_QUEUES, default=default" help:"queues to serve, comma-separated, in order"`
	// Concurrency: how many functions run at once.
	Concurrency int `env:"DTQ_WORKER_CONCURRENCY, default=16" range:"1..100000" help:"functions running at once"`
	// VisibilityTimeout: how long an entry may sit unheartbeated before a peer reclaims it.
	VisibilityTimeout time.Duration `env:"DTQ_VISIBILITY_TIMEOUT_S, default=30" unit:"s" range:"0.05..86400" help:"seconds before a silent worker's entries are reclaimed"`
	// HeartbeatInterval: the time between heartbeats; must be below VisibilityTimeout.
	HeartbeatInterval time.Duration `env:"DTQ_HEARTBEAT_INTERVAL_S, default=5" unit:"s" range:"0.01..3600" help:"seconds between heartbeats (< visibility timeout)"`
	// DrainTimeout: how long SIGTERM waits for running functions before cancelling them.
	DrainTimeout time.Duration `env:"DTQ_DRAIN_TIMEOUT_S, default=30" unit:"s" range:"0..86400" help:"seconds SIGTERM waits for running functions"`
	// WorkerID: consumer name, lock token and metrics label ("" = worker-<8 hex>,
	// filled by LoadConfig, WithDefaults and New).
	WorkerID string `env:"DTQ_WORKER_ID" shown:"worker-<8 hex>" help:"consumer name, lock token, metrics label"`
	// Port: HTTP port of /healthz, /readyz, /metrics (Knative and Cloud Run set PORT).
	Port int `env:"PORT, default=8080" range:"0..65535" help:"HTTP port for /healthz, /readyz, /metrics (0 = any free port)"`
	// MaxPayloadBytes: payloads above this are refused at enqueue and killed at claim.
	MaxPayloadBytes int `env:"DTQ_MAX_PAYLOAD_BYTES, default=1048576" unit:"bytes" range:"1..536870912" help:"largest payload accepted"`
	// ResultTTL: how long a succeeded or cancelled task's record is kept (0 = forever).
	ResultTTL time.Duration `env:"DTQ_RESULT_TTL_S, default=86400" unit:"s" range:"0..31536000" help:"seconds finished task records are kept (0 = forever)"`
	// DeadMax: dead tasks kept per queue; the scheduler leader deletes the oldest beyond it.
	DeadMax int64 `env:"DTQ_DEAD_MAX, default=10000" range:"1..10000000" help:"dead tasks kept per queue; the scheduler leader deletes the oldest beyond it"`
	// DeadTTL: how long a dead task is kept (0 = no age bound: DeadMax alone bounds them).
	DeadTTL time.Duration `env:"DTQ_DEAD_TTL_S, default=7776000" unit:"s" range:"0..315360000" help:"seconds dead tasks are kept (90 days; 0 = no age bound, DTQ_DEAD_MAX still holds)"`
	// PollBlock: longest blocking read while idle; new work wakes it at once and
	// SIGTERM unblocks it, so this only bounds idle round trips.
	PollBlock time.Duration `env:"DTQ_POLL_BLOCK_MS, default=30000" unit:"ms" range:"1..60000" help:"longest idle blocking read (new work and SIGTERM end it at once)"`
	// PollLanes: claim loops on a busy queue. With 2, while a queue's claims come back
	// full, a second claim is in Redis while the worker takes in the first's reply (a
	// remote Redis's round trip no longer caps a worker at 32 tasks a round trip); 1:
	// one claim at a time.
	PollLanes int `env:"DTQ_POLL_LANES, default=2" range:"1..2" help:"claims in flight on a busy queue (2: a second beside the first; 1: one at a time)"`
	// SchedulerInterval: the time between scheduler passes (plus up to a fifth, at random).
	SchedulerInterval time.Duration `env:"DTQ_SCHEDULER_INTERVAL_S, default=1" unit:"s" range:"0.01..60" help:"seconds between scheduler passes (plus up to a fifth, at random)"`
	// SchedulerLockTTL: the leader lock's lifetime; renewed once a third of it has passed.
	SchedulerLockTTL time.Duration `env:"DTQ_SCHEDULER_LOCK_TTL_MS, default=10000" unit:"ms" range:"100..600000" help:"scheduler leader lock lifetime (> the interval; a killed leader holds it this long)"`
	// EventsMaxLen: approximate cap of the events stream (0 = no events).
	EventsMaxLen int64 `env:"DTQ_EVENTS_MAXLEN, default=10000" range:"0..100000000" help:"approximate cap of the events stream (0 = off)"`
	// EventsVerbose: also publish TASK_STARTED and TASK_SUCCEEDED (one write per task).
	EventsVerbose bool `env:"DTQ_EVENTS_VERBOSE, default=false" help:"also publish TASK_STARTED and TASK_SUCCEEDED"`
	// RetryBase, RetryMax: default backoff between retries: base·2ⁿ⁻¹ capped at max,
	// half of it jittered (ExpBackoff).
	RetryBase time.Duration `env:"DTQ_RETRY_BASE_MS, default=1000" unit:"ms" range:"0..604800000" help:"first retry backoff; the nth is base·2ⁿ⁻¹ capped at DTQ_RETRY_MAX_MS, half of it jittered (<= DTQ_RETRY_MAX_MS)"`
	RetryMax  time.Duration `env:"DTQ_RETRY_MAX_MS, default=600000" unit:"ms" range:"0..604800000" help:"longest retry backoff"`
	// DefaultTimeout: a function's run limit when neither task nor function sets one (0 = none).
	DefaultTimeout time.Duration `env:"DTQ_DEFAULT_TIMEOUT_S, default=1800" unit:"s" range:"0..604800" help:"function time limit when none is set (0 = none)"`
	// LogFormat: json, text, or auto (text on a terminal, json otherwise).
	LogFormat string `env:"DTQ_LOG_FORMAT, default=auto" help:"json, text or auto"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `env:"DTQ_LOG_LEVEL, default=info" help:"debug, info, warn, error"`
	// MaxTasks: after starting this many tasks the worker drains and exits 0 (0 = no
	// limit): a KEDA ScaledJob's worker, one Job per batch of work.
	MaxTasks int64 `env:"DTQ_WORKER_MAX_TASKS, default=0" range:"0..1000000000" help:"drain and exit 0 after starting this many tasks (0 = no limit; ScaledJob)"`
	// IdleExit: a worker with nothing running and nothing arriving for this long drains
	// and exits 0 (0 = never): a ScaledJob's worker ends when the queue is empty.
	IdleExit time.Duration `env:"DTQ_WORKER_IDLE_EXIT_S, default=0" unit:"s" range:"0..86400" help:"drain and exit 0 after this many idle seconds (0 = never; ScaledJob)"`
	// RedisFatalAfter: how long Redis may refuse the worker in a way no wait heals (a
	// wrong password, a missing ACL permission, a database number out of range) before
	// it exits 3 (0 = at the first refusal).
	RedisFatalAfter time.Duration `env:"DTQ_REDIS_FATAL_AFTER_S, default=10" unit:"s" range:"0..3600" help:"seconds Redis may refuse the worker (password, ACL, DB number) before it exits 3 (0 = at once)"`
	// Pprof serves net/http/pprof under /debug/pprof/ on PORT.
	Pprof bool `env:"DTQ_PPROF, default=false" help:"serve /debug/pprof/ on PORT (profiling)"`
	// HeapFloorMB: the worker keeps this many MiB of never-touched heap as a floor
	// under its garbage collector's target (internal/heapfloor), set once, right after
	// the process's first collection (a start that never allocates its way to one
	// never collects): a small live heap then collects an order of magnitude less
	// often under load. Address space, not resident memory; at most an eighth of
	// GOMEMLIMIT (0 = none).
	HeapFloorMB int `env:"DTQ_WORKER_HEAP_FLOOR_MB, default=32" unit:"MB" range:"0..1024" help:"MiB of untouched heap under the GC's target: fewer collections for a small heap (not resident; at most GOMEMLIMIT/8; 0 = none)"`
	// Prefault: the dtq binary maps the pages its start touches in a few system calls
	// where a page fault is slow (internal/prefault, read by its initialiser before this
	// configuration loads; here it is validated and documented).
	Prefault bool `env:"DTQ_PREFAULT, default=true" help:"map the pages a start touches at once where a page fault takes 5 µs or more (faster starts there; ~2.7 MB more resident)"`
}

// ConfigError names the variable a bad value came from.
type ConfigError = envcfg.Error

// WithDefaults returns c with every zero field set to its default (the default of its
// variable; a new worker id for WorkerID). A field whose zero is a setting of its own
// (ResultTTL 0 = keep forever, DrainTimeout 0, MaxTasks 0 = no limit, Port 0 = any free
// port …) cannot be told from one left unset: set it after WithDefaults.
func (c Config) WithDefaults() Config {
	if err := envcfg.Defaults(&c); err != nil {
		panic("runtime: Config's default tags: " + err.Error()) // the tests load every default
	}
	return c.withWorkerID()
}

func (c Config) withWorkerID() Config {
	if c.WorkerID == "" {
		c.WorkerID = NewWorkerID()
	}
	return c
}

// Validate checks every rule and returns the first violation as a *ConfigError naming
// the variable. It changes nothing.
func (c Config) Validate() error {
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
	for _, q := range c.Queues {
		if err := keys.ValidQueue(q); err != nil {
			return bad("DTQ_QUEUES", "%v", err)
		}
		if seen[q] {
			return bad("DTQ_QUEUES", "queue %q listed twice", q)
		}
		seen[q] = true
	}
	if err := envcfg.Check(c); err != nil {
		return err
	}
	if c.HeartbeatInterval >= c.VisibilityTimeout {
		return bad("DTQ_HEARTBEAT_INTERVAL_S", "%v must be below DTQ_VISIBILITY_TIMEOUT_S (%v), or live workers' tasks get reclaimed", c.HeartbeatInterval.Seconds(), c.VisibilityTimeout.Seconds())
	}
	if c.SchedulerLockTTL <= c.SchedulerInterval {
		return bad("DTQ_SCHEDULER_LOCK_TTL_MS", "%d must exceed the scheduler interval (%vs) or the leader loses its lock between passes", c.SchedulerLockTTL.Milliseconds(), c.SchedulerInterval.Seconds())
	}
	if c.RetryMax < c.RetryBase {
		return bad("DTQ_RETRY_MAX_MS", "%d must not be below DTQ_RETRY_BASE_MS (%d)", c.RetryMax.Milliseconds(), c.RetryBase.Milliseconds())
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
	// "" is left to New (or WithDefaults) to fill in.
	if len(c.WorkerID) > 128 || strings.ContainsFunc(c.WorkerID, func(r rune) bool { return r <= ' ' || r == '{' || r == '}' || r > '~' }) {
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
