package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/dtq/dtq/client"
)

// waitResult is one run of the wait mode: how soon client.Wait returns once a task's
// function has returned.
type waitResult struct {
	N      int     `json:"n"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	Pushed int     `json:"pushed"` // waits that registered before the end (woken by the push)
}

func (r waitResult) figures() []figure {
	return []figure{fig("p50_ms", r.P50MS), fig("p90_ms", r.P90MS), fig("p99_ms", r.P99MS), fig("max_ms", r.MaxMS), fig("pushed", float64(r.Pushed))}
}

// runWait enqueues "stamp" tasks due 20 ms later, one at a time, and waits on each with
// client.Wait, registered before the task runs: the figure is Wait's return minus the
// time the function ran (its result), i.e. the worker's completion, complete.lua, the
// push and the read of the record, on this Redis.
func runWait(ctx context.Context, e *benchEnv, o options) (waitResult, error) {
	n := o.n
	if n == 0 {
		n = 200
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency), "DTQ_SCHEDULER_INTERVAL_S=0.01")
	if err != nil {
		return waitResult{}, err
	}
	defer w.stop()
	if err := w.ready(10 * time.Second); err != nil {
		return waitResult{}, err
	}
	pr := newProgress("wait", int64(n))
	lat := make([]float64, 0, n)
	pushed := 0
	for i := 0; i < n; i++ {
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "stamp", Delay: 20 * time.Millisecond})
		if err != nil {
			return waitResult{}, err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ti, err := c.Wait(wctx, benchQueue, id)
		back := time.Now().UnixNano()
		cancel()
		if err != nil {
			return waitResult{}, fmt.Errorf("wait %s: %w", id, err)
		}
		ran, err := strconv.ParseInt(string(ti.Result), 10, 64)
		if err != nil || ti.Status != client.StatusSucceeded {
			return waitResult{}, fmt.Errorf("task %s ended %s with %q", id, ti.Status, ti.Result)
		}
		if ti.StartedAt > 0 {
			pushed++
		}
		lat = append(lat, float64(back-ran)/1e6)
		pr.set(int64(i + 1))
	}
	pr.done()
	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return waitResult{N: n, P50MS: pct(0.5), P90MS: pct(0.9), P99MS: pct(0.99), MaxMS: lat[len(lat)-1], Pushed: pushed}, nil
}
