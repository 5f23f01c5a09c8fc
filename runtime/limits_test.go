package runtime_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// startedAt reads the Redis-side start times (ms) of tasks ids.
func startedAt(t *testing.T, e *env, ids []string) []int64 {
	t.Helper()
	q := keys.New(e.prefix).Queue("default")
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		v, err := e.rdb.HGet(e.ctx, q.Task(id), "started_at").Int64()
		if err != nil {
			t.Fatalf("started_at of %s: %v", id, err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// A queue's rate limit holds across several workers: by any start time t, no more than
// burst + rate·(t − t0) tasks have started (t0 the first start), from the records'
// Redis-side start times.
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if err := e.c.SetLimit(e.ctx, "default", client.Limit{Rate: 5, Per: time.Second, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 12 {
		ids = append(ids, e.enqueue(t, client.Task{Function: "noop"}))
	}
	for range 3 {
		startWorker(t, e.rdb, e.config(t), nil, nil)
	}
	eventually(t, "every task succeeded", func() bool {
		for _, id := range ids {
			if e.task(t, id).Status != client.StatusSucceeded {
				return false
			}
		}
		return true
	})
	starts := startedAt(t, e, ids)
	t0 := starts[0]
	for k, at := range starts {
		// GCRA, 200 ms a token: by at, 2 + (at − t0)/200 starts at most
		if allowed := 2 + (at-t0)/200; int64(k+1) > allowed {
			t.Fatalf("start %d at t0+%d ms: over the limit of %d (starts %v)", k+1, at-t0, allowed, starts)
		}
	}
}

// A concurrency limit holds across workers (counted by the functions themselves), and
// every slot comes back: the run set is empty at the end.
func TestConcurrencyLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const limit = 3
	if err := e.c.SetLimit(e.ctx, "default", client.Limit{Function: "work", Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	var now, most atomic.Int64
	reg := runtime.NewRegistry()
	reg.Register("work", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		n := now.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond) // the work
		now.Add(-1)
		return nil, nil
	}, runtime.FuncOptions{})
	reg.Register("other", func(ctx context.Context, _ *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	var ids []string
	for i := range 60 {
		fn := "work"
		if i%3 == 0 {
			fn = "other"
		}
		ids = append(ids, e.enqueue(t, client.Task{Function: fn, ID: "t" + strconv.Itoa(i)}))
	}
	for range 4 {
		startWorker(t, e.rdb, e.config(t), reg, nil)
	}
	eventually(t, "every task succeeded", func() bool {
		for _, id := range ids {
			if e.task(t, id).Status != client.StatusSucceeded {
				return false
			}
		}
		return true
	})
	if m := most.Load(); m > limit {
		t.Fatalf("%d ran at once, over the limit of %d", m, limit)
	}
	if n := e.rdb.SCard(e.ctx, keys.New(e.prefix).Queue("default").LimitRun("work")).Val(); n != 0 {
		t.Fatalf("%d slots held at the end, want 0", n)
	}
}
