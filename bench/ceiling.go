package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// ceilingResult is one run of the ceiling mode.
type ceilingResult struct {
	N                int     `json:"n"`
	CeilingPerS      float64 `json:"ceiling_per_s"`
	RedisCmdsPerTask float64 `json:"redis_cmds_per_task"`
	// RedisCPUUsPerTask is nil for a Redis on another machine.
	RedisCPUUsPerTask *float64 `json:"redis_cpu_us_per_task,omitempty"`
	// RedisBusy is the share of the run's wall time Redis spent on a CPU (its CPU time
	// over the run's): how busy the run kept it. Steadier than the throughput itself
	// on a VM whose speed moves between runs. Nil for a Redis on another machine.
	RedisBusy *float64 `json:"redis_busy,omitempty"`
}

func (r ceilingResult) figures() []figure {
	return []figure{
		fig("ceiling_per_s", r.CeilingPerS), fig("redis_cmds_per_task", r.RedisCmdsPerTask),
		optFig("redis_cpu_us_per_task", r.RedisCPUUsPerTask), optFig("redis_busy", r.RedisBusy),
	}
}

// runCeiling drives the design's Redis work without a worker: the claim script (read +
// start, 32 entries a call) and the complete script (32 outcomes a call), pipelined —
// each round trip completes one batch and claims the next — from a few goroutines, on n
// enqueued no-op tasks. No function runs, no bookkeeping happens in Go: what is left is
// the cost of the design's Redis commands.
func runCeiling(ctx context.Context, e *benchEnv, o options) (ceilingResult, error) {
	n := o.n
	if n == 0 {
		n = 50000
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	if _, _, err := enqueueNoops(ctx, c, n, "noop", nil); err != nil {
		return ceilingResult{}, err
	}
	if err := lua.Load(ctx, e.rdb); err != nil {
		return ceilingResult{}, err
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
					done = lua.Complete.Queue(ctx, p, lua.CompleteArgs{Queue: q, NowMS: time.Now().UnixMilli(), KeepMS: 86400000, Items: prev, Consumer: consumer})
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
		return ceilingResult{}, firstErr
	}
	r := ceilingResult{N: n, CeilingPerS: round(float64(n)/dur.Seconds(), 0),
		RedisCmdsPerTask: round(float64(e.commands(ctx)-cmd0)/float64(n), 2)}
	if e.redisPID > 0 {
		rcpu := cpuTime(e.redisPID) - rcpu0
		r.RedisCPUUsPerTask = some(round(float64(rcpu.Microseconds())/float64(n), 1))
		r.RedisBusy = some(round(rcpu.Seconds()/dur.Seconds(), 3))
	}
	return r, nil
}
