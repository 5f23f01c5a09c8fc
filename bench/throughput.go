package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

func runThroughput(ctx context.Context, e *benchEnv, o options) (result, error) {
	n := o.n
	if n == 0 {
		n = 50000
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	ids, enqDur, err := enqueueNoops(ctx, c, n, "noop", nil)
	if err != nil {
		return nil, err
	}
	// The first task a worker starts is the head of a band's stream (the highest band
	// first, each in stream order): not the first id enqueued, as enqueuers interleave.
	heads, err := streamHeads(ctx, e, prefix)
	if err != nil {
		return nil, err
	}
	cmd0 := e.commands(ctx)
	rcpu0 := cpuTime(e.redisPID)
	start := time.Now()
	var ws []*worker
	for i := 0; i < o.workers; i++ {
		w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	done, err := waitDrained(ctx, e, prefix, int64(n), 10*time.Minute)
	if err != nil {
		for _, w := range ws {
			w.kill()
		}
		return nil, err
	}
	procDur := done.Sub(start)
	rcpu := cpuTime(e.redisPID) - rcpu0
	cmds := e.commands(ctx) - cmd0
	var wcpu time.Duration
	var first float64 = math.MaxFloat64
	for _, w := range ws {
		wcpu += cpuTime(w.cmd.Process.Pid)
	}
	for _, w := range ws {
		if err := w.stop(); err != nil {
			return nil, err
		}
	}
	// First task: the earliest started_at among the stream heads (ms resolution).
	if ts, err := firstStart(ctx, e, prefix, heads); err == nil && len(heads) > 0 {
		first = float64(ts.Sub(start).Microseconds()) / 1000
	}
	st, err := statuses(ctx, e.rdb, prefix, ids)
	if err != nil {
		return nil, err
	}
	r := result{
		"n": n, "workers": o.workers, "concurrency": o.concurrency,
		"enqueue_s": round(enqDur.Seconds(), 4), "enqueue_per_s": round(float64(n)/enqDur.Seconds(), 0),
		"process_s": round(procDur.Seconds(), 4), "process_per_s": round(float64(n)/procDur.Seconds(), 0),
		"acked_per_s":            round(float64(n)/procDur.Seconds(), 0),
		"redis_cmds_per_task":    round(float64(cmds)/float64(n), 2),
		"worker_cpu_us_per_task": round(float64(wcpu.Microseconds())/float64(n), 1),
		"succeeded":              st["succeeded"],
		"lost":                   n - st["succeeded"],
		"duplicates":             0,
	}
	if first != math.MaxFloat64 {
		r["exec_to_first_task_ms"] = round(first, 1) // from the exec (the peer's first_task_ms starts in-process)
	}
	if e.redisPID > 0 {
		r["redis_cpu_us_per_task"] = round(float64(rcpu.Microseconds())/float64(n), 1)
	}
	if st["succeeded"] != n {
		return r, fmt.Errorf("%d of %d tasks succeeded: %v", st["succeeded"], n, st)
	}
	return r, nil
}

// streamHeads returns the task of the first entry of each band stream of the bench
// queue that has one.
func streamHeads(ctx context.Context, e *benchEnv, prefix string) ([]string, error) {
	q := keys.New(prefix).Queue(benchQueue)
	var heads []string
	for _, s := range q.Streams {
		xs, err := e.rdb.XRangeN(ctx, s, "-", "+", 1).Result()
		if err != nil {
			return nil, err
		}
		if len(xs) == 1 {
			if id, ok := xs[0].Values["task"].(string); ok {
				heads = append(heads, id)
			}
		}
	}
	return heads, nil
}

func firstStart(ctx context.Context, e *benchEnv, prefix string, ids []string) (time.Time, error) {
	q := keys.New(prefix).Queue(benchQueue)
	p := e.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i := range ids {
		cmds[i] = p.HGet(ctx, q.Task(ids[i]), "started_at")
	}
	if _, err := p.Exec(ctx); err != nil {
		return time.Time{}, err
	}
	best := int64(math.MaxInt64)
	for _, c := range cmds {
		if v, err := strconv.ParseInt(c.Val(), 10, 64); err == nil && v < best {
			best = v
		}
	}
	return time.UnixMilli(best), nil
}
