package scaler

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(context.Background(), envconfig.MapLookuper(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisURL != "redis://127.0.0.1:6379/0" || c.KeyPrefix != "dtq" || c.Port != 8080 || c.Addr != ":6000" ||
		c.RedisTimeout != 2*time.Second || c.CacheTTL != time.Second || c.PushPoll != 500*time.Millisecond || c.PushMaxBlock != 5*time.Second ||
		c.ShutdownTimeout != 10*time.Second ||
		c.MaxQueues != 1024 {
		t.Errorf("defaults = %+v", c)
	}
	// Every variable has a default in EnvVars matching the tag.
	for _, v := range EnvVars() {
		if v.Help == "" {
			t.Errorf("%s has no help", v.Name)
		}
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"PORT":                          {"PORT": "http"},
		"DTQ_SCALER_REDIS_TIMEOUT_MS":   {"DTQ_SCALER_REDIS_TIMEOUT_MS": "0"},
		"DTQ_SCALER_CACHE_TTL_MS":       {"DTQ_SCALER_CACHE_TTL_MS": "soon"},
		"DTQ_SCALER_ADDR":               {"DTQ_SCALER_ADDR": "6000"},
		"DTQ_SCALER_TLS_KEY_FILE":       {"DTQ_SCALER_TLS_CERT_FILE": "/etc/hosts"},
		"DTQ_SCALER_TLS_CERT_FILE":      {"DTQ_SCALER_TLS_CERT_FILE": "/nonexistent", "DTQ_SCALER_TLS_KEY_FILE": "/etc/hosts"},
		"DTQ_SCALER_TLS_CLIENT_CA_FILE": {"DTQ_SCALER_TLS_CLIENT_CA_FILE": "/etc/hosts"},
		"DTQ_REDIS_URL":                 {"DTQ_REDIS_URL": "http://x"},
		"DTQ_KEY_PREFIX":                {"DTQ_KEY_PREFIX": "a{b}"},
		"DTQ_LOG_FORMAT":                {"DTQ_LOG_FORMAT": "xml"},
		"DTQ_SCALER_PUSH_POLL_MS":       {"DTQ_SCALER_PUSH_POLL_MS": "-1"},
		"DTQ_SCALER_SHUTDOWN_TIMEOUT_S": {"DTQ_SCALER_SHUTDOWN_TIMEOUT_S": "NaN"},
		"DTQ_SCALER_MAX_QUEUES":         {"DTQ_SCALER_MAX_QUEUES": "lots"},
	} {
		_, err := LoadConfig(context.Background(), envconfig.MapLookuper(env))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != name || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: err = %v, want one line naming %s", env, err, name)
		}
	}
}

// TestMaxQueuesBounds: the watched-queue bound holds at least one trigger's queues (256)
// and at most 16384, and a value outside is refused naming the variable.
func TestMaxQueuesBounds(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{"256": true, "16384": true, "4096": true, "255": false, "16385": false, "0": false, "-1": false, "1e3": false} {
		c, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_SCALER_MAX_QUEUES": v}))
		var ce *ConfigError
		switch {
		case ok && err != nil:
			t.Errorf("%s: %v", v, err)
		case ok && strconv.Itoa(c.MaxQueues) != v:
			t.Errorf("%s: MaxQueues = %d", v, c.MaxQueues)
		case !ok && (!errors.As(err, &ce) || ce.Var != "DTQ_SCALER_MAX_QUEUES"):
			t.Errorf("%s: err = %v, want one naming DTQ_SCALER_MAX_QUEUES", v, err)
		}
	}
}

// Every number has both bounds: they are accepted, just past them is refused, and so
// are overflowing values, NaN, ±Inf and negatives; --help states each range.
func TestConfigBoundsEveryNumber(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, min, max, below, above string }{
		{"PORT", "0", "65535", "-1", "65536"},
		{"DTQ_SCALER_REDIS_TIMEOUT_MS", "10", "60000", "9", "60001"},
		{"DTQ_SCALER_CACHE_TTL_MS", "0", "60000", "-1", "60001"},
		{"DTQ_SCALER_PUSH_POLL_MS", "10", "60000", "9", "60001"},
		{"DTQ_SCALER_PUSH_MAX_BLOCK_MS", "10", "300000", "9", "300001"},
		{"DTQ_SCALER_SHUTDOWN_TIMEOUT_S", "0", "3600", "-0.001", "3600.001"},
		{"DTQ_SCALER_MAX_QUEUES", "256", "16384", "255", "16385"},
	} {
		load := func(v string) error {
			_, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{c.name: v}))
			return err
		}
		for _, v := range []string{c.min, c.max} {
			if err := load(v); err != nil {
				t.Errorf("%s=%s (a bound) refused: %v", c.name, v, err)
			}
		}
		for _, v := range []string{c.below, c.above, "-1", "NaN", "Inf", "-Inf", "1e400", "9223372036854775807",
			"9223372036854775808", "-9223372036854775809", "1e19"} {
			err := load(v)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Var != c.name || strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("%s=%s: err = %v, want one line naming %s", c.name, v, err, c.name)
			}
		}
		found := false
		for _, v := range EnvVars() {
			if v.Name == c.name {
				found = strings.Contains(v.Help, c.min+".."+c.max)
			}
		}
		if !found {
			t.Errorf("%s: --help does not state its range %s..%s", c.name, c.min, c.max)
		}
	}
}

// scaler/README.md's table lists every variable --help lists, with the same range.
func TestReadmeTableMatchesEnvVars(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envcfg.TableMismatches(string(readme), EnvVars()) {
		t.Errorf("scaler/README.md: %s", m)
	}
}

// The bounds of DTQ_SCALER_MAX_QUEUES hold one trigger's queues (MaxQueues), and its
// default is DefaultMaxQueues.
func TestMaxQueuesTags(t *testing.T) {
	t.Parallel()
	for _, f := range envcfg.Fields(reflect.TypeFor[Config]()) {
		if f.Var == "DTQ_SCALER_MAX_QUEUES" {
			if f.Min != MaxQueues || f.Default != strconv.Itoa(DefaultMaxQueues) {
				t.Errorf("DTQ_SCALER_MAX_QUEUES: min %v, default %s; want %d and %d", f.Min, f.Default, MaxQueues, DefaultMaxQueues)
			}
			return
		}
	}
	t.Error("no DTQ_SCALER_MAX_QUEUES")
}

// Durations are read in their variable's unit, and refused past their range with the
// wording they always had; Validate changes nothing.
func TestConfigDurations(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_SCALER_REDIS_TIMEOUT_MS": "10", "DTQ_SCALER_CACHE_TTL_MS": "0", "DTQ_SCALER_PUSH_POLL_MS": "60000",
		"DTQ_SCALER_PUSH_MAX_BLOCK_MS": "300000", "DTQ_SCALER_SHUTDOWN_TIMEOUT_S": "0.5",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisTimeout != 10*time.Millisecond || c.CacheTTL != 0 || c.PushPoll != time.Minute || c.PushMaxBlock != 5*time.Minute ||
		c.ShutdownTimeout != 500*time.Millisecond {
		t.Errorf("durations: %+v", c)
	}
	for env, want := range map[string]string{
		"DTQ_SCALER_REDIS_TIMEOUT_MS=9":        "DTQ_SCALER_REDIS_TIMEOUT_MS: 9 must be between 10 and 60000",
		"DTQ_SCALER_SHUTDOWN_TIMEOUT_S=3600.5": "DTQ_SCALER_SHUTDOWN_TIMEOUT_S: 3600.5 must be between 0 and 3600 seconds",
		"DTQ_SCALER_MAX_QUEUES=255":            "DTQ_SCALER_MAX_QUEUES: 255 must be between 256 and 16384",
		"PORT=65536":                           "PORT: 65536 is not a TCP port",
		"DTQ_SCALER_PUSH_POLL_MS=1.5":          `DTQ_SCALER_PUSH_POLL_MS: "1.5" is not a valid value (invalid syntax)`,
	} {
		name, v, _ := strings.Cut(env, "=")
		if _, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{name: v})); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", env, err, want)
		}
	}
	before := c
	bad := c
	bad.PushPoll = time.Millisecond
	if err := bad.Validate(); err == nil || err.Error() != "DTQ_SCALER_PUSH_POLL_MS: 1 must be between 10 and 60000" {
		t.Errorf("PushPoll 1ms: %v", err)
	}
	if err := c.Validate(); err != nil || !reflect.DeepEqual(c, before) {
		t.Errorf("Validate: %v, changed %+v into %+v", err, before, c)
	}
}
