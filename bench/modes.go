package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

const benchQueue = "default"

// enqueueNoops enqueues n no-op tasks in pipelined batches from a few goroutines and
// returns their ids and the time it took.
func enqueueNoops(ctx context.Context, c *client.Client, n int, fn string, payload func(i int) []byte) ([]string, time.Duration, error) {
	const batch, senders = 500, 4
	ids := make([]string, n)
	var next int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	pr := newProgress("enqueue", int64(n))
	start := time.Now()
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				lo := int(next)
				next += batch
				mu.Unlock()
				if lo >= n || firstErr != nil {
					return
				}
				hi := min(lo+batch, n)
				ts := make([]client.Task, hi-lo)
				for i := range ts {
					ts[i] = client.Task{Queue: benchQueue, Function: fn}
					if payload != nil {
						ts[i].Payload = payload(lo + i)
					}
				}
				res, err := c.EnqueueMany(ctx, ts)
				if err == nil {
					for i, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
						ids[lo+i] = r.ID
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				pr.set(int64(hi))
			}
		}()
	}
	wg.Wait()
	pr.done()
	return ids, time.Since(start), firstErr
}

// statuses reads the status of every task in pipelined batches.
func statuses(ctx context.Context, rdb redis.UniversalClient, prefix string, ids []string) (map[string]int, error) {
	q := keys.New(prefix).Queue(benchQueue)
	out := map[string]int{}
	for lo := 0; lo < len(ids); lo += 2000 {
		hi := min(lo+2000, len(ids))
		p := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, hi-lo)
		for i := lo; i < hi; i++ {
			cmds[i-lo] = p.HGet(ctx, q.Task(ids[i]), "status")
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for _, c := range cmds {
			out[c.Val()]++
		}
	}
	return out, nil
}

// waitDrained polls the queue's backlog until it is empty.
func waitDrained(ctx context.Context, e *benchEnv, prefix string, total int64, limit time.Duration) (time.Time, error) {
	pr := newProgress("process", total)
	defer pr.done()
	deadline := time.Now().Add(limit)
	for {
		n, err := e.backlog(ctx, prefix, benchQueue)
		if err != nil {
			return time.Time{}, err
		}
		if n == 0 {
			return time.Now(), nil
		}
		pr.set(total - n)
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d tasks still queued after %s", n, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

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

func runColdstart(ctx context.Context, e *benchEnv, o options) (result, error) {
	reps := o.reps
	if reps == 0 {
		reps = 20
	}
	// The finish is seen through a keyspace notification on the task's hash, not by
	// polling: a poller sharing the machine's two cores with Redis and the starting
	// worker slows what it measures. Without CONFIG rights it falls back to polling.
	restore, notify := e.keyspaceNotifications(ctx)
	defer restore()
	seenBy := "polling"
	if notify {
		seenBy = "notification"
	}
	var first, finished, ready []float64
	for i := 0; i < reps; i++ {
		prefix := e.prefix()
		c := e.client(prefix)
		// stamp returns the time it was called: exec → that is the peer's figure (exec to
		// its handler called); exec → the outcome recorded is the task finished.
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "stamp"})
		if err != nil {
			return nil, err
		}
		q := keys.New(prefix).Queue(benchQueue)
		watch, err := e.watchFinish(ctx, q, id, notify)
		if err != nil {
			return nil, err
		}
		w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
		if err != nil {
			watch.stop()
			return nil, err
		}
		start := w.execAt
		// exec → the waiting task finished (its outcome recorded).
		end, err := watch.wait(30 * time.Second)
		if err != nil {
			w.kill()
			return nil, fmt.Errorf("cold start: %w", err)
		}
		finished = append(finished, float64(end.Sub(start).Microseconds())/1000)
		if err := w.ready(10 * time.Second); err != nil {
			w.kill()
			return nil, err
		}
		if err := w.stop(); err != nil {
			return nil, err
		}
		st, err := c.Get(ctx, benchQueue, id)
		if err != nil || st.Status != "succeeded" {
			return nil, fmt.Errorf("cold start task %s: %v %v", id, st, err)
		}
		called, err := strconv.ParseInt(st.Result, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cold start task %s: result %q", id, st.Result)
		}
		first = append(first, float64(called-start.UnixNano())/1e6)
		e.drop(prefix)

		// exec → /readyz, separately, with nothing waiting.
		prefix = e.prefix()
		w, err = e.startWorker(prefix)
		if err != nil {
			return nil, err
		}
		if err := w.ready(10 * time.Second); err != nil {
			w.kill()
			return nil, err
		}
		ready = append(ready, float64(time.Since(w.execAt).Microseconds())/1000)
		if err := w.stop(); err != nil {
			return nil, err
		}
		e.drop(prefix)
	}
	mf, _, _ := spread(first)
	md, _, _ := spread(finished)
	mr, _, _ := spread(ready)
	return result{"reps": reps, "exec_to_first_median_ms": round(mf, 3), "exec_to_finished_median_ms": round(md, 2),
		"exec_to_ready_median_ms": round(mr, 2),
		"exec_to_first_ms":        first, "exec_to_finished_ms": finished, "exec_to_ready_ms": ready, "finish_seen_by": seenBy}, nil
}

func runDrain(ctx context.Context, e *benchEnv, o options) (result, error) {
	reps := o.reps
	if reps == 0 {
		reps = 5
	}
	var idle, busy, recovery []float64
	lost := 0
	for i := 0; i < reps; i++ {
		// SIGTERM of an idle worker.
		prefix := e.prefix()
		w, err := e.startWorker(prefix)
		if err != nil {
			return nil, err
		}
		if err := w.ready(10 * time.Second); err != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond) // let it settle into its blocking read
		t0 := time.Now()
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		<-w.exit
		idle = append(idle, float64(time.Since(t0).Microseconds())/1000)
		e.drop(prefix)

		// SIGTERM with 8 tasks of 300 ms in flight (drain timeout 30 s): exit once they end.
		prefix = e.prefix()
		c := e.client(prefix)
		w, err = e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY=8")
		if err != nil {
			return nil, err
		}
		var ids []string
		for j := 0; j < 8; j++ {
			id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "sleep", Payload: []byte(`{"ms":300}`)})
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		if err := waitStatus(ctx, c, ids, "running", 10*time.Second); err != nil {
			return nil, err
		}
		t0 = time.Now()
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		<-w.exit
		busy = append(busy, float64(time.Since(t0).Microseconds())/1000)
		st, err := statuses(ctx, e.rdb, prefix, ids)
		if err != nil {
			return nil, err
		}
		lost += len(ids) - st["succeeded"]
		e.drop(prefix)

		// SIGKILL of the worker running a task: a peer finishes it (visibility 1 s).
		prefix = e.prefix()
		c = e.client(prefix)
		vt := []string{"DTQ_VISIBILITY_TIMEOUT_S=1", "DTQ_HEARTBEAT_INTERVAL_S=0.25"}
		victim, err := e.startWorker(prefix, vt...)
		if err != nil {
			return nil, err
		}
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "sleep", Payload: []byte(`{"ms":100}`)})
		if err != nil {
			return nil, err
		}
		if err := waitStatus(ctx, c, []string{id}, "running", 10*time.Second); err != nil {
			return nil, err
		}
		peer, err := e.startWorker(prefix, vt...)
		if err != nil {
			return nil, err
		}
		if err := peer.ready(10 * time.Second); err != nil {
			return nil, err
		}
		t0 = time.Now()
		victim.kill()
		if err := waitStatus(ctx, c, []string{id}, "succeeded", 30*time.Second); err != nil {
			return nil, err
		}
		recovery = append(recovery, float64(time.Since(t0).Microseconds())/1000)
		_ = peer.stop()
		e.drop(prefix)
	}
	mi, _, _ := spread(idle)
	mb, _, _ := spread(busy)
	mr, _, _ := spread(recovery)
	return result{"reps": reps, "sigterm_idle_exit_median_ms": round(mi, 2), "sigterm_busy_exit_median_ms": round(mb, 2),
		"busy_tasks_lost": lost, "sigkill_recovery_median_ms": round(mr, 1), "visibility_timeout_s": 1,
		"sigterm_idle_exit_ms": idle, "sigterm_busy_exit_ms": busy, "sigkill_recovery_ms": recovery}, nil
}

func waitStatus(ctx context.Context, c *client.Client, ids []string, status string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, id := range ids {
		for {
			t, err := c.Get(ctx, benchQueue, id)
			if err == nil && t.Status == status {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("task %s did not reach %s", id, status)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	return nil
}

// runCeiling drives the design's Redis work without a worker: the claim script (read +
// start, 32 entries a call) and the complete script (32 outcomes a call), pipelined —
// each round trip completes one batch and claims the next — from a few goroutines, on n
// enqueued no-op tasks. No function runs, no bookkeeping happens in Go: what is left is
// the cost of the design's Redis commands.
func runCeiling(ctx context.Context, e *benchEnv, o options) (result, error) {
	n := o.n
	if n == 0 {
		n = 50000
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	if _, _, err := enqueueNoops(ctx, c, n, "noop", nil); err != nil {
		return nil, err
	}
	if err := lua.Load(ctx, e.rdb); err != nil {
		return nil, err
	}
	q := keys.New(prefix).Queue(benchQueue)
	cmd0 := e.commands(ctx)
	rcpu0 := cpuTime(e.redisPID)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consumer := "ceiling-" + strconv.Itoa(g)
			var prev []lua.Completion
			for {
				p := e.rdb.Pipeline()
				var done *lua.Pending[[]lua.CompleteCode]
				if len(prev) > 0 {
					done = lua.Complete.Queue(ctx, p, lua.CompleteArgs{Queue: q, NowMS: time.Now().UnixMilli(), KeepMS: 86400000, Items: prev})
				}
				claim := lua.Claim.Queue(ctx, p, lua.ClaimArgs{Queue: q, Consumer: consumer, NowMS: time.Now().UnixMilli(), Want: 32, MaxPayload: 1 << 20})
				_, _ = p.Exec(ctx)
				var err error
				if done != nil {
					_, err = done.Result()
				}
				r, cerr := claim.Result()
				if err == nil {
					err = cerr
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				prev = succeeded(r.Started)
				if len(prev) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	dur := time.Since(start)
	if firstErr != nil {
		return nil, firstErr
	}
	r := result{"n": n, "ceiling_per_s": round(float64(n)/dur.Seconds(), 0),
		"redis_cmds_per_task": round(float64(e.commands(ctx)-cmd0)/float64(n), 2)}
	if e.redisPID > 0 {
		r["redis_cpu_us_per_task"] = round(float64((cpuTime(e.redisPID)-rcpu0).Microseconds())/float64(n), 1)
	}
	return r, nil
}

// pct is the nearest-rank percentile p (0..1) of sorted, which is not empty.
func pct(sorted []float64, p float64) float64 {
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}
