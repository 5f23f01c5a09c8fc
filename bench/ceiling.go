package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

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
				var done *redis.Cmd
				if len(prev) > 0 {
					done = lua.CompleteCmd(ctx, p, q, time.Now().UnixMilli(), 86400000, prev)
				}
				claim := lua.ClaimCmd(ctx, p, q, lua.ClaimArgs{Consumer: consumer, NowMS: time.Now().UnixMilli(), Want: 32, MaxPayload: 1 << 20})
				_, _ = p.Exec(ctx)
				var err error
				if done != nil {
					_, err = lua.CompleteReply(done)
				}
				r, cerr := lua.ClaimReply(claim)
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
