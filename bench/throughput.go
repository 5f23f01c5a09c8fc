package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/internal/keys"
)

// throughputResult is one run of the throughput mode.
type throughputResult struct {
	N           int     `json:"n"`
	Workers     int     `json:"workers"`
	Concurrency int     `json:"concurrency"`
	EnqueueS    float64 `json:"enqueue_s"`
	EnqueuePerS float64 `json:"enqueue_per_s"`
	ProcessS    float64 `json:"process_s"`
	ProcessPerS float64 `json:"process_per_s"`
	AckedPerS   float64 `json:"acked_per_s"`
	// ExecToFirstTaskMS counts from the exec (the peer's first_task_ms starts
	// in-process); nil when no task's start time could be read.
	ExecToFirstTaskMS  *float64 `json:"exec_to_first_task_ms,omitempty"`
	RedisCmdsPerTask   float64  `json:"redis_cmds_per_task"`
	WorkerCPUUsPerTask float64  `json:"worker_cpu_us_per_task"`
	// RedisCPUUsPerTask is nil for a Redis on another machine.
	RedisCPUUsPerTask *float64 `json:"redis_cpu_us_per_task,omitempty"`
	// RedisBusy is the share of the run's wall time Redis spent on a CPU (its CPU time
	// over the run's): how busy the run kept it. Steadier than the throughput itself
	// on a VM whose speed moves between runs. Nil for a Redis on another machine.
	RedisBusy *float64 `json:"redis_busy,omitempty"`
	// LinkRTTMS is the median round trip of a PING through the delaying proxy the
	// workers used (--link-delay); nil when they reached Redis directly.
	LinkRTTMS *float64 `json:"link_rtt_ms,omitempty"`
	// WorkerGOMAXPROCS is the first worker's go_sched_gomaxprocs_threads, read from its
	// /metrics at the end of the run (--worker-gomaxprocs sets it).
	WorkerGOMAXPROCS float64 `json:"worker_gomaxprocs"`
	Succeeded        int     `json:"succeeded"`
	Lost             int     `json:"lost"`
	Duplicates       int     `json:"duplicates"`
}

func (r throughputResult) figures() []figure {
	return []figure{
		fig("process_per_s", r.ProcessPerS), fig("enqueue_per_s", r.EnqueuePerS),
		optFig("exec_to_first_task_ms", r.ExecToFirstTaskMS), fig("redis_cmds_per_task", r.RedisCmdsPerTask),
		fig("worker_cpu_us_per_task", r.WorkerCPUUsPerTask), optFig("redis_cpu_us_per_task", r.RedisCPUUsPerTask),
		optFig("redis_busy", r.RedisBusy), optFig("link_rtt_ms", r.LinkRTTMS), fig("worker_gomaxprocs", r.WorkerGOMAXPROCS), fig("lost", float64(r.Lost)), fig("duplicates", float64(r.Duplicates)),
	}
}

func runThroughput(ctx context.Context, e *benchEnv, o options) (throughputResult, error) {
	n := o.n
	if n == 0 {
		n = 50000
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	ids, enqDur, err := enqueueNoops(ctx, c, n, "noop", nil)
	if err != nil {
		return throughputResult{}, err
	}
	// The first task a worker starts is the head of a band's stream (the highest band
	// first, each in stream order): not the first id enqueued, as enqueuers interleave.
	heads, err := streamHeads(ctx, e, prefix)
	if err != nil {
		return throughputResult{}, err
	}
	env := []string{"DTQ_WORKER_CONCURRENCY=" + strconv.Itoa(o.concurrency)}
	if o.workerProcs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(o.workerProcs))
	}
	var linkRTT *float64
	if o.linkDelay > 0 {
		url, rtt, stop, err := e.delayedLink(ctx, o.linkDelay)
		if err != nil {
			return throughputResult{}, err
		}
		defer stop()
		env, linkRTT = append(env, "DTQ_REDIS_URL="+url), some(round(rtt, 3))
	}
	cmd0 := e.commands(ctx)
	rcpu0 := cpuTime(e.redisPID)
	start := time.Now()
	var ws []*worker
	for i := 0; i < o.workers; i++ {
		w, err := e.startWorker(prefix, env...)
		if err != nil {
			return throughputResult{}, err
		}
		ws = append(ws, w)
	}
	done, err := waitDrained(ctx, e, prefix, int64(n), 10*time.Minute)
	if err != nil {
		for _, w := range ws {
			w.kill()
		}
		return throughputResult{}, err
	}
	rcpu := cpuTime(e.redisPID) - rcpu0
	cmds := e.commands(ctx) - cmd0
	var wcpu time.Duration
	var first float64 = math.MaxFloat64
	for _, w := range ws {
		wcpu += cpuTime(w.cmd.Process.Pid)
	}
	procs, err := ws[0].metric("go_sched_gomaxprocs_threads")
	if err != nil {
		return throughputResult{}, err
	}
	for _, w := range ws {
		if err := w.stop(); err != nil {
			return throughputResult{}, err
		}
	}
	// First task: the earliest started_at among the stream heads (ms resolution).
	if ts, err := firstStart(ctx, e, prefix, heads); err == nil && len(heads) > 0 {
		first = float64(ts.Sub(start).Microseconds()) / 1000
	}
	recs, err := recordFields(ctx, e.rdb, prefix, ids, "status", "finished_at")
	if err != nil {
		return throughputResult{}, err
	}
	st := tally(recs, 0)
	// The run lasts from the exec of the workers to the last outcome recorded: the
	// records say when that was, to the millisecond, whenever the poll noticed it.
	procDur := done.Sub(start)
	if st["succeeded"] == n {
		end, err := lastFinished(ids, recs, 1)
		if err != nil {
			return throughputResult{}, err
		}
		procDur = end.Sub(start)
	}
	r := throughputResult{
		N: n, Workers: o.workers, Concurrency: o.concurrency,
		EnqueueS: round(enqDur.Seconds(), 4), EnqueuePerS: round(float64(n)/enqDur.Seconds(), 0),
		ProcessS: round(procDur.Seconds(), 4), ProcessPerS: round(float64(n)/procDur.Seconds(), 0),
		AckedPerS:          round(float64(n)/procDur.Seconds(), 0),
		RedisCmdsPerTask:   round(float64(cmds)/float64(n), 2),
		WorkerCPUUsPerTask: round(float64(wcpu.Microseconds())/float64(n), 1),
		Succeeded:          st["succeeded"],
		Lost:               n - st["succeeded"],
		Duplicates:         0,
	}
	if first != math.MaxFloat64 {
		r.ExecToFirstTaskMS = some(round(first, 1))
	}
	r.LinkRTTMS, r.WorkerGOMAXPROCS = linkRTT, procs
	if e.redisPID > 0 {
		r.RedisCPUUsPerTask = some(round(float64(rcpu.Microseconds())/float64(n), 1))
		r.RedisBusy = some(round(rcpu.Seconds()/done.Sub(start).Seconds(), 3)) // the window rcpu covers
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
	recs, err := recordFields(ctx, e.rdb, prefix, ids, "started_at")
	if err != nil {
		return time.Time{}, err
	}
	best := int64(math.MaxInt64)
	for _, r := range recs {
		if ms, err := strconv.ParseInt(r[0], 10, 64); err == nil && ms < best {
			best = ms
		}
	}
	return time.UnixMilli(best), nil
}

// delayedLink puts a proxy (chaos.Proxy) that holds each chunk for d, both ways, in
// front of Redis, and returns the URL that reaches Redis through it, the median round
// trip of a PING through it (ms; the VM's timers make it longer than 2d), and the stop.
func (e *benchEnv) delayedLink(ctx context.Context, d time.Duration) (string, float64, func(), error) {
	u, err := url.Parse(e.url)
	if err != nil || u.Scheme != "redis" {
		return "", 0, nil, fmt.Errorf("--link-delay takes a redis:// DTQ_REDIS_URL")
	}
	proxy, err := chaos.NewProxy(e.addr)
	if err != nil {
		return "", 0, nil, err
	}
	proxy.SetDelay(d)
	u.Host = proxy.Addr()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		_ = proxy.Close()
		return "", 0, nil, err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	rtts := make([]float64, 0, 21)
	for range 21 {
		t := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			_ = proxy.Close()
			return "", 0, nil, fmt.Errorf("PING through the delaying proxy: %w", err)
		}
		rtts = append(rtts, float64(time.Since(t).Microseconds())/1000)
	}
	med, _, _ := spread(rtts)
	return u.String(), med, func() { _ = proxy.Close() }, nil
}
