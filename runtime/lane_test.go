package runtime_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/runtime"
)

// enqueueBacklog enqueues n tasks of function fn on the default queue, in batches.
func enqueueBacklog(t *testing.T, c *client.Client, fn string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for len(ids) < n {
		batch := make([]client.Task, min(100, n-len(ids)))
		for i := range batch {
			batch[i] = client.Task{Queue: "default", Function: fn}
		}
		res, err := c.EnqueueMany(t.Context(), batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// On a backlog, the lane claims beside the poll loop (its receipt is there) and every
// task runs once: started once, on its first attempt, and succeeded. DTQ_POLL_LANES=1
// turns the lane off: the loop alone runs them all.
func TestLaneClaimsBesideTheLoopOnABacklog(t *testing.T) {
	t.Parallel()
	for _, lanes := range []string{"2", "1"} {
		t.Run("lanes="+lanes, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			const n = 2000
			ids := enqueueBacklog(t, e.c, "noop", n)
			rec := newRecorder()
			// room for both claim loops beside the tasks running: the lane is not outrun
			r := startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", "128", "DTQ_POLL_LANES", lanes), nil, rec)
			for _, id := range ids {
				rec.wait(t, "task "+id+" to succeed", is(runtime.EventTaskSucceeded, id))
			}
			r.stop()
			starts := map[string]int{}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, ev := range rec.events {
				if ev.Type == runtime.EventTaskStarted {
					starts[ev.TaskID]++
					if ev.Attempt != 1 {
						t.Errorf("task %s started on attempt %d", ev.TaskID, ev.Attempt)
					}
				}
			}
			if len(starts) != n {
				t.Errorf("%d tasks started, want %d", len(starts), n)
			}
			for id, k := range starts {
				if k != 1 {
					t.Errorf("task %s started %d times", id, k)
				}
			}
			switch got := runtime.LaneStarted(r.w); {
			case lanes == "2" && got == 0:
				t.Fatal("the lane started nothing on a backlog of 2000 tasks")
			case lanes == "1" && got != 0:
				t.Fatalf("DTQ_POLL_LANES=1: the lane started %d tasks", got)
			}
		})
	}
}

// With the lane claiming beside the loop, the tasks in flight (claimed, started and not
// returned) never exceed the concurrency: each claim holds the slots it asks for until
// its reply is in. The functions are released in waves, all at once, so that every
// wave leaves the whole concurrency free to both loops (80: a claim of 32 each, and 16
// more for whichever asks first).
func TestLaneKeepsWithinConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const conc, n = 80, 800
	var (
		mu       sync.Mutex // guards most and gate
		most     int64
		gate     = make(chan struct{})
		blocked  atomic.Int64
		finished atomic.Int64
		worker   *runtime.Worker
		ready    = make(chan struct{})
	)
	reg := runtime.NewRegistry()
	reg.Register("hold", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		<-ready
		mu.Lock()
		most = max(most, worker.Inflight())
		g := gate
		mu.Unlock()
		blocked.Add(1)
		select {
		case <-g:
		case <-ctx.Done():
		}
		blocked.Add(-1)
		finished.Add(1)
		return nil, nil
	}, runtime.FuncOptions{})
	ids := enqueueBacklog(t, e.c, "hold", n)
	rec := newRecorder()
	r := startWorker(t, e.rdb, e.config(t, "DTQ_WORKER_CONCURRENCY", strconv.Itoa(conc)), reg, rec)
	worker = r.w
	close(ready)
	for finished.Load() < n {
		// a wave: every slot taken (or every task left), then all released at once
		eventually(t, "the slots to fill", func() bool {
			return blocked.Load() >= min(conc, n-finished.Load())
		})
		mu.Lock()
		close(gate)
		gate = make(chan struct{})
		mu.Unlock()
	}
	for _, id := range ids {
		rec.wait(t, "task "+id+" to succeed", is(runtime.EventTaskSucceeded, id))
	}
	mu.Lock()
	defer mu.Unlock()
	if most > conc {
		t.Fatalf("%d tasks in flight at once, over the concurrency of %d", most, conc)
	}
	if runtime.LaneStarted(r.w) == 0 {
		t.Fatal("the lane started nothing: the test tested nothing")
	}
}

// A lane claim whose reply is lost (its connection drops as the reply comes; go-redis
// does not resend) is sent again under its name: the tasks it claimed start on their
// first attempt, never reclaimed, long before the visibility timeout (60 s here, past
// the test's deadline).
func TestLostLaneClaimIsSentAgain(t *testing.T) {
	t.Parallel()
	x := newProxied(t, &redis.Options{MaxRetries: -1})
	cfg := testConfig(t, "redis://"+x.proxy.Addr(), x.prefix, map[string]string{"DTQ_WORKER_CONCURRENCY": "64",
		"DTQ_VISIBILITY_TIMEOUT_S": "60", "DTQ_HEARTBEAT_INTERVAL_S": "5", "DTQ_POLL_BLOCK_MS": "60000"})
	ids := enqueueBacklog(t, x.c, "noop", 1000)
	x.proxy.CutOnReply(chaos.Contains("EVALSHA", ":r:", "._"), 1)
	startWorker(t, x.rdb, cfg, nil, x.rec)
	for _, id := range ids {
		x.rec.wait(t, "task "+id+" to succeed", is(runtime.EventTaskSucceeded, id))
	}
	if x.proxy.Armed() != 0 {
		t.Fatal("no lane claim's reply was cut: the test tested nothing")
	}
	for _, id := range ids {
		ti, err := x.c.Get(t.Context(), "default", id)
		if err != nil || ti.Attempt != 1 || ti.Reclaims != 0 {
			t.Fatalf("task %+v %v: want succeeded on attempt 1, never reclaimed", ti, err)
		}
	}
}
