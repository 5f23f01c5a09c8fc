package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// limitResult is one run of the limit mode.
type limitResult struct {
	LimitPerS    float64 `json:"limit_per_s"`
	AchievedPerS float64 `json:"achieved_per_s"`
	// ErrorPct is (achieved − limit) / limit, in percent.
	ErrorPct float64 `json:"error_pct"`
	Started  int     `json:"started"`
	WindowS  float64 `json:"window_s"`
	Workers  int     `json:"workers"`
	Burst    int     `json:"burst"`
}

func (r limitResult) figures() []figure {
	return []figure{fig("limit_per_s", r.LimitPerS), fig("achieved_per_s", r.AchievedPerS),
		fig("error_pct", r.ErrorPct), fig("started", float64(r.Started))}
}

// runLimit sets a rate limit (with --burst) on the bench queue, starts W worker processes on a backlog
// of N no-op tasks and, after --duration, counts the starts (the task records'
// Redis-side started_at) in the window from the first start to the duration's end.
func runLimit(ctx context.Context, e *benchEnv, o options) (limitResult, error) {
	n := o.n
	if n == 0 {
		n = 10000
	}
	rate, per, err := client.ParseRate(o.rate)
	if err != nil {
		return limitResult{}, err
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	if err := c.SetLimit(ctx, benchQueue, client.Limit{Rate: rate, Per: per, Burst: o.burst}); err != nil {
		return limitResult{}, err
	}
	ids, _, err := enqueueNoops(ctx, c, n, "noop", nil)
	if err != nil {
		return limitResult{}, err
	}
	var ws []*worker
	for i := 0; i < o.workers; i++ {
		w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
		if err != nil {
			return limitResult{}, err
		}
		ws = append(ws, w)
	}
	time.Sleep(o.duration)
	for _, w := range ws {
		if err := w.stop(); err != nil {
			return limitResult{}, err
		}
	}
	q := keys.New(prefix).Queue(benchQueue)
	cmds := make([]*redis.StringCmd, len(ids))
	if _, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, q.Task(id), "started_at")
		}
		return nil
	}); err != nil && err != redis.Nil {
		return limitResult{}, err
	}
	var starts []int64
	first, last := int64(0), int64(0)
	for _, cmd := range cmds {
		v, err := cmd.Int64()
		if err != nil {
			continue // never started
		}
		starts = append(starts, v)
		if first == 0 || v < first {
			first = v
		}
		last = max(last, v)
	}
	if len(starts) < 2 {
		return limitResult{}, fmt.Errorf("only %d tasks started", len(starts))
	}
	if len(starts) == n {
		return limitResult{}, fmt.Errorf("the backlog of %d ran out before the window's end: give a larger --n", n)
	}
	// starts after the first, over the time from the first to the last: the burst taken
	// at the first start does not count, nor the time the workers took to stop
	window := float64(last-first) / 1000
	limit := float64(rate) / per.Seconds()
	got := float64(len(starts)-1) / window
	return limitResult{LimitPerS: limit, AchievedPerS: got, ErrorPct: (got - limit) / limit * 100,
		Started: len(starts), WindowS: window, Workers: o.workers, Burst: o.burst}, nil
}
