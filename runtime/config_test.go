package runtime_test

import (
	"context"
	"errors"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/runtime"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainTimeout != 30*time.Second || c.VisibilityTimeout != 30*time.Second || c.HeartbeatInterval != 5*time.Second || c.Port != 8080 ||
		c.MaxPayloadBytes != 1<<20 || len(c.Queues) != 1 || c.Queues[0] != "default" || c.KeyPrefix != "dtq" ||
		c.DeadMax != 10000 || c.DeadTTL != 90*24*time.Hour || c.PollBlock != 30*time.Second || c.SchedulerLockTTL != 10*time.Second ||
		c.RetryBase != time.Second || c.RetryMax != 10*time.Minute || c.IdleExit != 0 || c.RedisFatalAfter != 10*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	if !strings.HasPrefix(c.WorkerID, "worker-") || len(c.WorkerID) != len("worker-")+8 {
		t.Fatalf("worker id %q, want worker-<8 hex>", c.WorkerID)
	}
	// Every variable --help lists is one LoadConfig reads.
	for _, v := range runtime.EnvVars() {
		if _, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{v.Name: "\x00bad"})); err == nil &&
			v.Name != "DTQ_REDIS_CA_FILE" {
			t.Errorf("%s: a bad value was accepted", v.Name)
		}
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DTQ_WORKER_CONCURRENCY": "lots"}, "DTQ_WORKER_CONCURRENCY"},
		{map[string]string{"DTQ_WORKER_CONCURRENCY": "0"}, "DTQ_WORKER_CONCURRENCY"},
		{map[string]string{"DTQ_VISIBILITY_TIMEOUT_S": "-1"}, "DTQ_VISIBILITY_TIMEOUT_S"},
		{map[string]string{"DTQ_VISIBILITY_TIMEOUT_S": "NaN"}, "DTQ_VISIBILITY_TIMEOUT_S"},
		{map[string]string{"DTQ_HEARTBEAT_INTERVAL_S": "30", "DTQ_VISIBILITY_TIMEOUT_S": "30"}, "DTQ_HEARTBEAT_INTERVAL_S"},
		{map[string]string{"DTQ_DRAIN_TIMEOUT_S": "soon"}, "DTQ_DRAIN_TIMEOUT_S"},
		{map[string]string{"DTQ_QUEUES": "a,b{c}"}, "DTQ_QUEUES"},
		{map[string]string{"DTQ_QUEUES": "a,a"}, "DTQ_QUEUES"},
		{map[string]string{"DTQ_QUEUES": strings.Repeat("q", 10000)}, "DTQ_QUEUES"},
		{map[string]string{"PORT": "99999"}, "PORT"},
		{map[string]string{"PORT": "http"}, "PORT"},
		{map[string]string{"DTQ_REDIS_URL": "http://x"}, "DTQ_REDIS_URL"},
		{map[string]string{"DTQ_MAX_PAYLOAD_BYTES": "0"}, "DTQ_MAX_PAYLOAD_BYTES"},
		{map[string]string{"DTQ_LOG_FORMAT": "xml"}, "DTQ_LOG_FORMAT"},
		{map[string]string{"DTQ_EVENTS_VERBOSE": "maybe"}, "DTQ_EVENTS_VERBOSE"},
		{map[string]string{"DTQ_WORKER_ID": "has space"}, "DTQ_WORKER_ID"},
		{map[string]string{"DTQ_SCHEDULER_LOCK_TTL_MS": "500", "DTQ_SCHEDULER_INTERVAL_S": "1"}, "DTQ_SCHEDULER_LOCK_TTL_MS"},
		{map[string]string{"DTQ_WORKER_MAX_TASKS": "-1"}, "DTQ_WORKER_MAX_TASKS"},
		{map[string]string{"DTQ_WORKER_IDLE_EXIT_S": "-2"}, "DTQ_WORKER_IDLE_EXIT_S"},
		{map[string]string{"DTQ_DEAD_MAX": "0"}, "DTQ_DEAD_MAX"}, // no "unbounded": see README
		{map[string]string{"DTQ_DEAD_MAX": "20000000"}, "DTQ_DEAD_MAX"},
		{map[string]string{"DTQ_DEAD_TTL_S": "-1"}, "DTQ_DEAD_TTL_S"},
		{map[string]string{"DTQ_DEAD_TTL_S": "7776000000"}, "DTQ_DEAD_TTL_S"}, // 90 days in ms
	} {
		_, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(c.env))
		var ce *runtime.ConfigError
		if !errors.As(err, &ce) || ce.Var != c.want {
			t.Errorf("env %v: err = %v, want a ConfigError naming %s", c.env, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("env %v: error spans lines: %q", c.env, err)
		}
	}
}

// ExpBackoff stays within [cap/2, cap] for every attempt number, cap = min(base·2ⁿ⁻¹,
// max), even where base·2ⁿ⁻¹ overflows int64 and for a max near the largest duration.
func TestExpBackoffNeverOverflows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ base, max time.Duration }{
		{time.Millisecond, math.MaxInt64},
		{time.Second, 9_200_000_000_000 * time.Millisecond}, // DTQ_RETRY_MAX_MS=9.2e12, refused now
		{0, time.Second},
		{math.MaxInt64 / 3, math.MaxInt64},
		{time.Millisecond, 7 * 24 * time.Hour},
		{time.Nanosecond, time.Nanosecond},
	} {
		b := runtime.ExpBackoff(c.base, c.max)
		for _, n := range []int{0, 1, 2, 3, 10, 40, 43, 44, 45, 46, 62, 63, 64, 65, 100, 1000, 1 << 20, math.MaxInt} {
			capped := c.max
			if n <= 1 || c.base == 0 {
				capped = min(c.base, c.max)
			} else if n < 64 && c.base <= c.max>>(n-1) {
				capped = c.base << (n - 1)
			}
			if d := b(n); d < capped/2 || d > capped {
				t.Fatalf("ExpBackoff(%v, %v)(%d) = %v, want within [%v, %v]", c.base, c.max, n, d, capped/2, capped)
			}
		}
	}
}

// Every duration and count has a lower and an upper bound: the bounds are accepted,
// just past them is refused, and so are overflowing values, NaN, ±Inf and negatives;
// --help states each range.
func TestConfigBoundsEveryNumber(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, min, max, below, above string
		other                        map[string]string // keeps cross-variable rules out of the way
	}{
		{"DTQ_WORKER_CONCURRENCY", "1", "100000", "0", "100001", nil},
		{"DTQ_VISIBILITY_TIMEOUT_S", "0.05", "86400", "0.0499", "86400.001", map[string]string{"DTQ_HEARTBEAT_INTERVAL_S": "0.01"}},
		{"DTQ_HEARTBEAT_INTERVAL_S", "0.01", "3600", "0.0099", "3600.001", map[string]string{"DTQ_VISIBILITY_TIMEOUT_S": "86400"}},
		{"DTQ_DRAIN_TIMEOUT_S", "0", "86400", "-0.001", "86400.001", nil},
		{"PORT", "0", "65535", "-1", "65536", nil},
		{"DTQ_MAX_PAYLOAD_BYTES", "1", "536870912", "0", "536870913", nil},
		{"DTQ_RESULT_TTL_S", "0", "31536000", "-0.001", "31536000.001", nil},
		{"DTQ_POLL_BLOCK_MS", "1", "60000", "0", "60001", nil},
		{"DTQ_SCHEDULER_INTERVAL_S", "0.01", "60", "0.0099", "60.001", map[string]string{"DTQ_SCHEDULER_LOCK_TTL_MS": "600000"}},
		{"DTQ_SCHEDULER_LOCK_TTL_MS", "100", "600000", "99", "600001", map[string]string{"DTQ_SCHEDULER_INTERVAL_S": "0.05"}},
		{"DTQ_EVENTS_MAXLEN", "0", "100000000", "-1", "100000001", nil},
		{"DTQ_RETRY_BASE_MS", "0", "604800000", "-1", "604800001", map[string]string{"DTQ_RETRY_MAX_MS": "604800000"}},
		{"DTQ_RETRY_MAX_MS", "0", "604800000", "-1", "604800001", map[string]string{"DTQ_RETRY_BASE_MS": "0"}},
		{"DTQ_DEFAULT_TIMEOUT_S", "0", "604800", "-0.001", "604800.001", nil},
		{"DTQ_WORKER_MAX_TASKS", "0", "1000000000", "-1", "1000000001", nil},
		{"DTQ_WORKER_IDLE_EXIT_S", "0", "86400", "-0.001", "86400.001", nil},
		{"DTQ_REDIS_FATAL_AFTER_S", "0", "3600", "-0.001", "3600.001", nil},
	} {
		load := func(v string) error {
			env := map[string]string{c.name: v}
			for k, x := range c.other {
				env[k] = x
			}
			_, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(env))
			return err
		}
		for _, v := range []string{c.min, c.max} {
			if err := load(v); err != nil {
				t.Errorf("%s=%s (a bound) refused: %v", c.name, v, err)
			}
		}
		for _, v := range []string{c.below, c.above, "-1", "NaN", "Inf", "-Inf", "1e400", "9223372036854775807",
			"9223372036854775808", "-9223372036854775809", "9.3e12", "1e19"} {
			err := load(v)
			var ce *runtime.ConfigError
			if !errors.As(err, &ce) || ce.Var != c.name || strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("%s=%s: err = %v, want one line naming %s", c.name, v, err, c.name)
			}
		}
		found := false
		for _, v := range runtime.EnvVars() {
			if v.Name == c.name {
				found = true
				if !strings.Contains(v.Help, c.min+".."+c.max) {
					t.Errorf("%s: help %q does not state its range %s..%s", c.name, v.Help, c.min, c.max)
				}
			}
		}
		if !found {
			t.Errorf("%s is not in EnvVars", c.name)
		}
	}
}

// README.md's configuration table lists every variable --help lists, with the same
// range.
func TestReadmeTableMatchesEnvVars(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envcfg.TableMismatches(string(readme), runtime.EnvVars()) {
		t.Errorf("README.md: %s", m)
	}
}

// WithDefaults fills every zero field with the default LoadConfig takes for a variable
// not set, and a new worker id; a field already set stays as it is.
func TestWithDefaults(t *testing.T) {
	t.Parallel()
	loaded, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(nil))
	if err != nil {
		t.Fatal(err)
	}
	d := runtime.Config{}.WithDefaults()
	if !strings.HasPrefix(d.WorkerID, "worker-") || d.WorkerID == loaded.WorkerID {
		t.Errorf("worker id %q (loaded %q): want a new worker-<8 hex>", d.WorkerID, loaded.WorkerID)
	}
	d.WorkerID = loaded.WorkerID
	if !reflect.DeepEqual(d, loaded) {
		t.Errorf("Config{}.WithDefaults() = %+v\nLoadConfig of no environment = %+v", d, loaded)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	set := runtime.Config{Queues: []string{"emails"}, Concurrency: 3, VisibilityTimeout: 2 * time.Second,
		PollBlock: 5 * time.Millisecond, WorkerID: "w1", EventsVerbose: true}
	got := set.WithDefaults()
	if got.Queues[0] != "emails" || len(got.Queues) != 1 || got.Concurrency != 3 || got.VisibilityTimeout != 2*time.Second ||
		got.PollBlock != 5*time.Millisecond || got.WorkerID != "w1" || !got.EventsVerbose ||
		got.HeartbeatInterval != 5*time.Second || got.KeyPrefix != "dtq" || got.RetryMax != 10*time.Minute {
		t.Errorf("WithDefaults of %+v = %+v", set, got)
	}
	if set.HeartbeatInterval != 0 || set.KeyPrefix != "" {
		t.Errorf("WithDefaults changed its receiver: %+v", set)
	}
}

// Validate changes nothing, whether it accepts the configuration or not: queue names
// are not trimmed (a name with spaces is refused) and an empty worker id stays empty.
func TestValidateChangesNothing(t *testing.T) {
	t.Parallel()
	base := runtime.Config{}.WithDefaults()
	for _, c := range []struct {
		set func(*runtime.Config)
		ok  bool
	}{
		{func(*runtime.Config) {}, true},
		{func(c *runtime.Config) { c.WorkerID = "" }, true}, // New fills it in
		{func(c *runtime.Config) { c.Queues = []string{"a", " b"} }, false},
		{func(c *runtime.Config) { c.Queues = []string{"a", "a"} }, false},
		{func(c *runtime.Config) { c.HeartbeatInterval = c.VisibilityTimeout }, false},
		{func(c *runtime.Config) { c.SchedulerLockTTL = c.SchedulerInterval }, false},
		{func(c *runtime.Config) { c.RetryMax = c.RetryBase - 1 }, false},
		{func(c *runtime.Config) { c.PollBlock = 0 }, false},
		{func(c *runtime.Config) {
			c.VisibilityTimeout = 49 * time.Millisecond
			c.HeartbeatInterval = 10 * time.Millisecond
		}, false},
		{func(c *runtime.Config) {
			c.VisibilityTimeout = 50 * time.Millisecond
			c.HeartbeatInterval = 10 * time.Millisecond
		}, true},
		{func(c *runtime.Config) { c.DeadTTL = 3651 * 24 * time.Hour }, false},
	} {
		cfg := base
		cfg.Queues = slices.Clone(base.Queues)
		c.set(&cfg)
		before := cfg
		before.Queues = slices.Clone(cfg.Queues)
		err := cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", cfg, err, c.ok)
		}
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("Validate changed %+v into %+v", before, cfg)
		}
	}
}

// Every duration is read in the unit its variable names: seconds with fractions,
// whole milliseconds; a Go duration is no value of either.
func TestConfigDurationUnits(t *testing.T) {
	t.Parallel()
	c, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_VISIBILITY_TIMEOUT_S": "0.05", "DTQ_HEARTBEAT_INTERVAL_S": "0.01", "DTQ_DRAIN_TIMEOUT_S": "1e3",
		"DTQ_RESULT_TTL_S": "0", "DTQ_DEAD_TTL_S": "1.5", "DTQ_POLL_BLOCK_MS": "1500", "DTQ_SCHEDULER_INTERVAL_S": "0.25",
		"DTQ_SCHEDULER_LOCK_TTL_MS": "251", "DTQ_RETRY_BASE_MS": "0", "DTQ_RETRY_MAX_MS": "604800000",
		"DTQ_DEFAULT_TIMEOUT_S": "604800", "DTQ_WORKER_IDLE_EXIT_S": "2.5", "DTQ_REDIS_FATAL_AFTER_S": "0.2",
		"DTQ_QUEUES": " a , b ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name      string
		got, want time.Duration
	}{
		{"DTQ_VISIBILITY_TIMEOUT_S", c.VisibilityTimeout, 50 * time.Millisecond},
		{"DTQ_HEARTBEAT_INTERVAL_S", c.HeartbeatInterval, 10 * time.Millisecond},
		{"DTQ_DRAIN_TIMEOUT_S", c.DrainTimeout, 1000 * time.Second},
		{"DTQ_RESULT_TTL_S", c.ResultTTL, 0},
		{"DTQ_DEAD_TTL_S", c.DeadTTL, 1500 * time.Millisecond},
		{"DTQ_POLL_BLOCK_MS", c.PollBlock, 1500 * time.Millisecond},
		{"DTQ_SCHEDULER_INTERVAL_S", c.SchedulerInterval, 250 * time.Millisecond},
		{"DTQ_SCHEDULER_LOCK_TTL_MS", c.SchedulerLockTTL, 251 * time.Millisecond},
		{"DTQ_RETRY_BASE_MS", c.RetryBase, 0},
		{"DTQ_RETRY_MAX_MS", c.RetryMax, 7 * 24 * time.Hour},
		{"DTQ_DEFAULT_TIMEOUT_S", c.DefaultTimeout, 7 * 24 * time.Hour},
		{"DTQ_WORKER_IDLE_EXIT_S", c.IdleExit, 2500 * time.Millisecond},
		{"DTQ_REDIS_FATAL_AFTER_S", c.RedisFatalAfter, 200 * time.Millisecond},
	} {
		if f.got != f.want {
			t.Errorf("%s: %v, want %v", f.name, f.got, f.want)
		}
	}
	if !reflect.DeepEqual(c.Queues, []string{"a", "b"}) {
		t.Errorf("DTQ_QUEUES: %q, want the names trimmed", c.Queues)
	}
	for name, v := range map[string]string{
		"DTQ_DRAIN_TIMEOUT_S": "30s", "DTQ_POLL_BLOCK_MS": "1.5", "DTQ_RETRY_BASE_MS": "1s", "DTQ_SCHEDULER_LOCK_TTL_MS": "1e4",
		"DTQ_RESULT_TTL_S": "1e300", "DTQ_WORKER_IDLE_EXIT_S": "-Inf",
	} {
		_, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{name: v}))
		var ce *runtime.ConfigError
		if !errors.As(err, &ce) || ce.Var != name {
			t.Errorf("%s=%s: err = %v, want a ConfigError naming %s", name, v, err, name)
		}
	}
	// The wording of a value outside its range is the one it always had.
	_, err = runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_POLL_BLOCK_MS": "60001"}))
	if err == nil || err.Error() != "DTQ_POLL_BLOCK_MS: 60001 must be within 1..60000 ms" {
		t.Errorf("DTQ_POLL_BLOCK_MS=60001: %v", err)
	}
	_, err = runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_WORKER_CONCURRENCY": "0"}))
	if err == nil || err.Error() != "DTQ_WORKER_CONCURRENCY: 0 must be within 1..100000" {
		t.Errorf("DTQ_WORKER_CONCURRENCY=0: %v", err)
	}
}

// Each default --help shows is the one a variable not set takes: setting a variable to
// its shown default changes nothing.
func TestEnvVarsDefaultsAreTheDefaults(t *testing.T) {
	t.Parallel()
	unset, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_WORKER_ID": "w"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range runtime.EnvVars() {
		if v.Name == "DTQ_WORKER_ID" {
			continue // shown as worker-<8 hex>, filled in at load
		}
		set, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_WORKER_ID": "w", v.Name: v.Default}))
		if err != nil || !reflect.DeepEqual(set, unset) {
			t.Errorf("%s=%q (its default) gives %+v, %v; unset gives %+v", v.Name, v.Default, set, err, unset)
		}
	}
}
