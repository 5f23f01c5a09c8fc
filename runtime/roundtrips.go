package runtime

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// roundTrips counts what the worker's client sends to Redis: one per command or
// pipeline, i.e. per network round trip. dtq_worker_redis_roundtrips_total shows what an
// idle worker costs.
type roundTrips struct{ c prometheus.Counter }

func (h roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.Inc()
		return next(ctx, cmd)
	}
}

func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.Inc()
		return next(ctx, cmds)
	}
}
