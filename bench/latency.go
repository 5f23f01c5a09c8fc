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

// latencyResult is one run of the latency mode.
type latencyResult struct {
	N                  int     `json:"n"`
	GapMS              float64 `json:"gap_ms"`
	Concurrency        int     `json:"concurrency"`
	P50MS              float64 `json:"p50_ms"`
	P90MS              float64 `json:"p90_ms"`
	P99MS              float64 `json:"p99_ms"`
	MaxMS              float64 `json:"max_ms"`
	MinMS              float64 `json:"min_ms"`
	MeanMS             float64 `json:"mean_ms"`
	IdleRedisCmdsPerS  float64 `json:"idle_redis_cmds_per_s"`
	IdleRoundtripsPerS float64 `json:"idle_roundtrips_per_s"`
	IdleRSSMB          float64 `json:"idle_rss_mb"`
	FloorP50MS         float64 `json:"floor_p50_ms"`
	FloorP99MS         float64 `json:"floor_p99_ms"`
	HandoffShare       float64 `json:"handoff_share"`
}

func (r latencyResult) figures() []figure {
	return []figure{
		fig("p50_ms", r.P50MS), fig("p90_ms", r.P90MS), fig("p99_ms", r.P99MS), fig("max_ms", r.MaxMS),
		fig("floor_p50_ms", r.FloorP50MS), fig("floor_p99_ms", r.FloorP99MS), fig("handoff_share", r.HandoffShare),
		fig("idle_redis_cmds_per_s", r.IdleRedisCmdsPerS), fig("idle_roundtrips_per_s", r.IdleRoundtripsPerS),
		fig("idle_rss_mb", r.IdleRSSMB),
	}
}

func runLatency(ctx context.Context, e *benchEnv, o options) (latencyResult, error) {
	n := o.n
	if n == 0 {
		n = 300
	}
	// The Redis-bound floor first, with no worker running.
	floor50, floor99, err := latencyFloor(ctx, e, o, n)
	if err != nil {
		return latencyResult{}, err
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
	if err != nil {
		return latencyResult{}, err
	}
	defer w.stop()
	if err := w.ready(10 * time.Second); err != nil {
		return latencyResult{}, err
	}
	// Register the queue and let the worker settle into its idle state.
	if _, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "noop"}); err != nil {
		return latencyResult{}, err
	}
	time.Sleep(min(2*time.Second, o.idle))
	// Idle cost: Redis commands and the worker's round trips over o.idle.
	c0 := e.commands(ctx)
	rt0, err := w.metric("dtq_worker_redis_roundtrips_total")
	if err != nil {
		return latencyResult{}, err
	}
	t0 := time.Now()
	time.Sleep(o.idle)
	c1 := e.commands(ctx)
	rt1, err := w.metric("dtq_worker_redis_roundtrips_total")
	if err != nil {
		return latencyResult{}, err
	}
	idle := time.Since(t0).Seconds()
	idleCmds := float64(c1-c0-1) / idle // -1: our own INFO
	idleRT := (rt1 - rt0) / idle
	idleRSS := rss(w.cmd.Process.Pid)

	h0, err := w.metric("dtq_worker_handoffs_total")
	if err != nil {
		return latencyResult{}, err
	}
	ids := make([]string, n)
	sent := make([]int64, n)
	next := time.Now()
	pr := newProgress("latency", int64(n))
	for i := 0; i < n; i++ {
		sent[i] = time.Now().UnixNano()
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "stamp"})
		if err != nil {
			return latencyResult{}, err
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
					return latencyResult{}, fmt.Errorf("task %s result %q", id, res)
				}
				lat = append(lat, float64(v-sent[i])/1e6)
				break
			}
			if time.Now().After(deadline) {
				return latencyResult{}, fmt.Errorf("task %s not done in time", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	h1, err := w.metric("dtq_worker_handoffs_total")
	if err != nil {
		return latencyResult{}, err
	}
	sort.Float64s(lat)
	pctl := func(p float64) float64 { return round(pct(lat, p), 3) }
	var sum float64
	for _, v := range lat {
		sum += v
	}
	return latencyResult{
		N: n, GapMS: float64(o.gap) / 1e6, Concurrency: o.concurrency,
		P50MS: pctl(0.5), P90MS: pctl(0.9), P99MS: pctl(0.99), MaxMS: round(lat[n-1], 3),
		MinMS: round(lat[0], 3), MeanMS: round(sum/float64(n), 3),
		IdleRedisCmdsPerS: round(idleCmds, 2), IdleRoundtripsPerS: round(idleRT, 2),
		IdleRSSMB:  round(idleRSS, 1),
		FloorP50MS: floor50, FloorP99MS: floor99,
		HandoffShare: round((h1-h0)/float64(n), 3),
	}, nil
}
