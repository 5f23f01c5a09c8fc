package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

func runLatency(ctx context.Context, e *benchEnv, o options) (result, error) {
	n := o.n
	if n == 0 {
		n = 300
	}
	// The Redis-bound floor first, with no worker running.
	floor50, floor99, err := latencyFloor(ctx, e, o, n)
	if err != nil {
		return nil, err
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
	if err != nil {
		return nil, err
	}
	defer w.stop()
	if err := w.ready(10 * time.Second); err != nil {
		return nil, err
	}
	// Register the queue and let the worker settle into its idle state.
	if _, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "noop"}); err != nil {
		return nil, err
	}
	time.Sleep(min(2*time.Second, o.idle))
	// Idle cost: Redis commands and the worker's round trips over o.idle.
	c0 := e.commands(ctx)
	rt0, err := w.metric("dtq_worker_redis_roundtrips_total")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(o.idle)
	c1 := e.commands(ctx)
	rt1, err := w.metric("dtq_worker_redis_roundtrips_total")
	if err != nil {
		return nil, err
	}
	idle := time.Since(t0).Seconds()
	idleCmds := float64(c1-c0-1) / idle // -1: our own INFO
	idleRT := (rt1 - rt0) / idle
	idleRSS := rss(w.cmd.Process.Pid)

	h0, err := w.metric("dtq_worker_handoffs_total")
	if err != nil {
		return nil, err
	}
	ids := make([]string, n)
	sent := make([]int64, n)
	next := time.Now()
	pr := newProgress("latency", int64(n))
	for i := 0; i < n; i++ {
		sent[i] = time.Now().UnixNano()
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "stamp"})
		if err != nil {
			return nil, err
		}
		ids[i] = id
		pr.set(int64(i + 1))
		next = next.Add(o.gap)
		time.Sleep(time.Until(next))
	}
	pr.done()
	lat := make([]float64, 0, n)
	deadline := time.Now().Add(30 * time.Second)
	q := keys.New(prefix).Queue(benchQueue)
	for i, id := range ids {
		for {
			res, err := e.rdb.HGet(ctx, q.Task(id), "result").Result()
			if err == nil && res != "" {
				v, perr := strconv.ParseInt(res, 10, 64)
				if perr != nil {
					return nil, fmt.Errorf("task %s result %q", id, res)
				}
				lat = append(lat, float64(v-sent[i])/1e6)
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("task %s not done in time", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	h1, err := w.metric("dtq_worker_handoffs_total")
	if err != nil {
		return nil, err
	}
	sort.Float64s(lat)
	pctl := func(p float64) float64 { return round(pct(lat, p), 3) }
	var sum float64
	for _, v := range lat {
		sum += v
	}
	return result{
		"n": n, "gap_ms": float64(o.gap) / 1e6, "concurrency": o.concurrency,
		"p50_ms": pctl(0.5), "p90_ms": pctl(0.9), "p99_ms": pctl(0.99), "max_ms": round(lat[n-1], 3),
		"min_ms": round(lat[0], 3), "mean_ms": round(sum/float64(n), 3),
		"idle_redis_cmds_per_s": round(idleCmds, 2), "idle_roundtrips_per_s": round(idleRT, 2),
		"idle_rss_mb":  round(idleRSS, 1),
		"floor_p50_ms": floor50, "floor_p99_ms": floor99,
		"handoff_share": round((h1-h0)/float64(n), 3),
	}, nil
}
