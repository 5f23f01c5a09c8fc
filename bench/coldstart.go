package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// coldstartResult is one run of the coldstart mode: medians over its repetitions, and
// every repetition's figure.
type coldstartResult struct {
	Reps                   int       `json:"reps"`
	ExecToFirstMedianMS    float64   `json:"exec_to_first_median_ms"`
	ExecToFinishedMedianMS float64   `json:"exec_to_finished_median_ms"`
	ExecToReadyMedianMS    float64   `json:"exec_to_ready_median_ms"`
	ExecToFirstMS          []float64 `json:"exec_to_first_ms"`
	ExecToFinishedMS       []float64 `json:"exec_to_finished_ms"`
	ExecToReadyMS          []float64 `json:"exec_to_ready_ms"`
	// FinishSeenBy is "notification" or "polling": how the task's finish was seen.
	FinishSeenBy string `json:"finish_seen_by"`
}

func (r coldstartResult) figures() []figure {
	return []figure{
		fig("exec_to_first_median_ms", r.ExecToFirstMedianMS), fig("exec_to_finished_median_ms", r.ExecToFinishedMedianMS),
		fig("exec_to_ready_median_ms", r.ExecToReadyMedianMS),
	}
}

// coldstartWarmup is how many starts a run makes before those it counts. A run's first
// starts are slower than the rest by more than the run's spread (one bench process, 30
// starts: 10–11 ms, then 5–7 ms over the next five, then 3.5–4.5 ms; a second run in the
// same process starts at 3.5–4.5): what warms is the measuring process and the machine
// around it, not the worker, which is a fresh process each time. The peer's exec
// starts come after 20 starts of its server in its own process (its in-process phase),
// so its first exec is as fast as its others; these make the two alike.
const coldstartWarmup = 5

func runColdstart(ctx context.Context, e *benchEnv, o options) (coldstartResult, error) {
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
	for i := 0; i < coldstartWarmup+reps; i++ {
		prefix := e.prefix()
		c := e.client(prefix)
		// stamp returns the time it was called: exec → that is the peer's figure (exec to
		// its handler called); exec → the outcome recorded is the task finished.
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "stamp"})
		if err != nil {
			return coldstartResult{}, err
		}
		q := keys.New(prefix).Queue(benchQueue)
		watch, err := e.watchFinish(ctx, q, id, notify)
		if err != nil {
			return coldstartResult{}, err
		}
		w, err := e.startWorker(prefix, "DTQ_WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency))
		if err != nil {
			watch.stop()
			return coldstartResult{}, err
		}
		start := w.execAt
		// exec → the waiting task finished (its outcome recorded).
		end, err := watch.wait(30 * time.Second)
		if err != nil {
			w.kill()
			return coldstartResult{}, fmt.Errorf("cold start: %w", err)
		}
		finished = append(finished, float64(end.Sub(start).Microseconds())/1000)
		if err := w.ready(10 * time.Second); err != nil {
			w.kill()
			return coldstartResult{}, err
		}
		if err := w.stop(); err != nil {
			return coldstartResult{}, err
		}
		st, err := c.Get(ctx, benchQueue, id)
		if err != nil || st.Status != "succeeded" {
			return coldstartResult{}, fmt.Errorf("cold start task %s: %v %v", id, st, err)
		}
		called, err := strconv.ParseInt(st.Result, 10, 64)
		if err != nil {
			return coldstartResult{}, fmt.Errorf("cold start task %s: result %q", id, st.Result)
		}
		first = append(first, float64(called-start.UnixNano())/1e6)
		e.drop(prefix)

		// exec → /readyz, separately, with nothing waiting.
		prefix = e.prefix()
		w, err = e.startWorker(prefix)
		if err != nil {
			return coldstartResult{}, err
		}
		if err := w.ready(10 * time.Second); err != nil {
			w.kill()
			return coldstartResult{}, err
		}
		ready = append(ready, float64(time.Since(w.execAt).Microseconds())/1000)
		if err := w.stop(); err != nil {
			return coldstartResult{}, err
		}
		e.drop(prefix)
	}
	first, finished, ready = first[coldstartWarmup:], finished[coldstartWarmup:], ready[coldstartWarmup:]
	mf, _, _ := spread(first)
	md, _, _ := spread(finished)
	mr, _, _ := spread(ready)
	return coldstartResult{Reps: reps, ExecToFirstMedianMS: round(mf, 3), ExecToFinishedMedianMS: round(md, 2),
		ExecToReadyMedianMS: round(mr, 2),
		ExecToFirstMS:       first, ExecToFinishedMS: finished, ExecToReadyMS: ready, FinishSeenBy: seenBy}, nil
}
