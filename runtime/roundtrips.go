package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/prom"
	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redisconn"
)

// roundTrips counts what the worker's client sends to Redis: one per command or
// pipeline, i.e. per network round trip. dtq_worker_redis_roundtrips_total shows what an
// idle worker costs. It also hands every outcome to the worker's Redis health, which
// readiness follows: no pings of its own, and one atomic load per answered command.
type roundTrips struct {
	c *prom.Counter
	h *redisconn.Health
	// down is set (unix ns) whenever a command finds Redis unreachable: the reaper
	// holds its reclaims for a while after it (reaper.reclaimHold).
	down *atomic.Int64
}

func (h roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.Inc()
		err := next(ctx, cmd)
		h.h.Observe(cmd, err)
		h.sawDown(err)
		return err
	}
}

func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.Inc()
		err := next(ctx, cmds)
		h.h.ObservePipeline(cmds, err)
		h.sawDown(err)
		return err
	}
}

func (h roundTrips) sawDown(err error) {
	if err != nil && h.down != nil && redisconn.Classify(err) == redisconn.Unreachable {
		h.down.Store(time.Now().UnixNano())
	}
}

// ErrRedisRefused is what Run's error wraps (errors.Is) when Redis refused the worker
// for DTQ_REDIS_FATAL_AFTER_S in a way no wait heals (a wrong password, a missing ACL
// permission, a database number out of range); errors.As finds the
// *redisconn.RefusedError with the cause.
var ErrRedisRefused = errors.New("redis refuses the worker")

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{ErrRedisRefused, e.err} }

// redisHealth is the worker's view of Redis, fed by roundTrips.
type redisHealth = redisconn.Health

func newRedisHealth(w *Worker) *redisconn.Health {
	return redisconn.NewHealth(redisconn.HealthOptions{
		FatalAfter: w.cfg.RedisFatalAfter,
		URL:        w.cfg.RedisURL,
		Logger:     w.log,
		OnChange: func(up bool) {
			if up {
				w.metrics.redisUp.Set(1)
				select {
				case w.redisUp <- struct{}{}:
				default:
				}
			} else {
				w.metrics.redisUp.Set(0)
			}
		},
	})
}

// RedisUp reports whether Redis answered the worker's latest command (and refuses
// none): readiness follows it.
func (w *Worker) RedisUp() bool { return w.redis.Up() }

// RedisReason says why Redis is not up for the worker ("" when it is), without secrets.
func (w *Worker) RedisReason() string { return w.redis.Reason() }

// awaitRedis waits for Redis' first answer, and reports whether it came (false: the
// worker was stopped, or Redis refused it for good, before that). An answer while
// Redis refuses the worker's own commands (a PING that an ACL user may send, beside a
// claim it may not) is not one: it waits for the refusal to heal, or to become final.
func (w *Worker) awaitRedis(ctx context.Context) bool {
	select {
	case <-w.redis.Answered():
	default:
		select {
		case <-w.redis.Answered():
		case <-ctx.Done():
			return false
		case <-w.stop.quit:
			return false
		case <-w.redis.Refused():
			return false
		}
	}
	for w.redis.Refusing() {
		select {
		case <-w.redisUp: // up since: check again
		case <-ctx.Done():
			return false
		case <-w.stop.quit:
			return false
		case <-w.redis.Refused():
			return false
		}
	}
	return true
}

// sawRedis feeds the worker's Redis health with the outcome of one of its own commands
// (err: the command's, or a pipeline's first error). The loops call it with every
// command's error. An instrumented client (Options.InstrumentRedis) feeds the health
// from its hook instead, and sawRedis does nothing; otherwise it costs one atomic load
// while Redis answers.
func (w *Worker) sawRedis(err error) {
	if w.instrumented || (err == nil && w.redis.Up()) {
		return
	}
	if redisconn.Classify(err) == redisconn.Unreachable {
		w.reaper.unreachableAt.Store(time.Now().UnixNano())
	}
	w.redis.Observe(ownCommand, err)
}

// ownCommand names the worker's own commands to the health (it reads only the name).
var ownCommand = redis.NewCmd(context.Background(), "dtq")
