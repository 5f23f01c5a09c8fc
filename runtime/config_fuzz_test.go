package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// LoadConfig reads an environment anyone may have set: it never panics, a value it
// refuses comes back as a one-line *ConfigError naming the variable and never echoing
// the Redis password, and a configuration it accepts holds every cross-field rule.
func FuzzLoadConfig(f *testing.F) {
	f.Add("s3cret", "default,emails", "16", "30", "5", "30", "8080", "1048576", "1000", "10000", "worker-1")
	f.Add("pw", "a{b}", "0", "nan", "inf", "-1", "99999", "0", "0", "1", "")
	f.Add("p@ss:w/rd", " q1 , q2 ", "1e3", "0.05", "0.049", "1e400", "-1", "abc", "60001", "99", "w w")
	f.Add("x", strings.Repeat("q", 10000), "100001", "1", "1", "0", "65535", "536870913", "1", "100", strings.Repeat("w", 129))
	f.Add("x", "default,default", "8", "2", "2", "0", "0", "1", "1", "1000", "{}")
	f.Fuzz(func(t *testing.T, password, queues, conc, vt, hb, drain, port, payload, block, lock, id string) {
		env := map[string]string{
			"DTQ_REDIS_URL":             "redis://dtq:" + password + "@127.0.0.1:6379/0",
			"DTQ_QUEUES":                queues,
			"DTQ_WORKER_CONCURRENCY":    conc,
			"DTQ_VISIBILITY_TIMEOUT_S":  vt,
			"DTQ_HEARTBEAT_INTERVAL_S":  hb,
			"DTQ_DRAIN_TIMEOUT_S":       drain,
			"PORT":                      port,
			"DTQ_MAX_PAYLOAD_BYTES":     payload,
			"DTQ_POLL_BLOCK_MS":         block,
			"DTQ_SCHEDULER_LOCK_TTL_MS": lock,
			"DTQ_WORKER_ID":             id,
		}
		cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(env))
		if err != nil {
			var ce *runtime.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not a *ConfigError", err, err)
			}
			if _, ok := env[ce.Var]; !ok && !strings.HasPrefix(ce.Var, "DTQ_") {
				t.Fatalf("error names %q, not a variable: %v", ce.Var, err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("error is not one line: %q", msg)
			}
			if len(password) >= 4 && strings.Contains(msg, password) && !strings.Contains(queues+id+conc+vt+hb+drain+port+payload+block+lock, password) {
				t.Fatalf("error shows the password: %q", msg)
			}
			return
		}
		if cfg.HeartbeatInterval >= cfg.VisibilityTimeout || cfg.Concurrency < 1 || cfg.Port < 0 || cfg.Port > 65535 ||
			cfg.MaxPayloadBytes < 1 || cfg.PollBlock < time.Millisecond || cfg.SchedulerLockTTL <= cfg.SchedulerInterval ||
			cfg.WorkerID == "" || len(cfg.Queues) == 0 {
			t.Fatalf("accepted a configuration that breaks a rule: %+v", cfg)
		}
		seen := map[string]bool{}
		for _, q := range cfg.Queues {
			if keys.ValidQueue(q) != nil || seen[q] {
				t.Fatalf("accepted queue %q of %q", q, queues)
			}
			seen[q] = true
		}
	})
}
