package main

import (
	"context"
	"syscall"
	"time"

	"github.com/dtq/dtq/client"
)

// drainResult is one run of the drain mode: medians over its repetitions, and every
// repetition's figure.
type drainResult struct {
	Reps                    int       `json:"reps"`
	SigtermIdleExitMedianMS float64   `json:"sigterm_idle_exit_median_ms"`
	SigtermBusyExitMedianMS float64   `json:"sigterm_busy_exit_median_ms"`
	BusyTasksLost           int       `json:"busy_tasks_lost"`
	SigkillRecoveryMedianMS float64   `json:"sigkill_recovery_median_ms"`
	VisibilityTimeoutS      int       `json:"visibility_timeout_s"`
	SigtermIdleExitMS       []float64 `json:"sigterm_idle_exit_ms"`
	SigtermBusyExitMS       []float64 `json:"sigterm_busy_exit_ms"`
	SigkillRecoveryMS       []float64 `json:"sigkill_recovery_ms"`
}

func (r drainResult) figures() []figure {
	return []figure{
		fig("sigterm_idle_exit_median_ms", r.SigtermIdleExitMedianMS), fig("sigterm_busy_exit_median_ms", r.SigtermBusyExitMedianMS),
		fig("busy_tasks_lost", float64(r.BusyTasksLost)), fig("sigkill_recovery_median_ms", r.SigkillRecoveryMedianMS),
	}
}

func runDrain(ctx context.Context, e *benchEnv, o options) (drainResult, error) {
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
			return drainResult{}, err
		}
		if err := w.ready(10 * time.Second); err != nil {
			return drainResult{}, err
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
			return drainResult{}, err
		}
		var ids []string
		for j := 0; j < 8; j++ {
			id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "sleep", Payload: []byte(`{"ms":300}`)})
			if err != nil {
				return drainResult{}, err
			}
			ids = append(ids, id)
		}
		if err := waitStatus(ctx, c, ids, client.StatusRunning, 10*time.Second); err != nil {
			return drainResult{}, err
		}
		t0 = time.Now()
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		<-w.exit
		busy = append(busy, float64(time.Since(t0).Microseconds())/1000)
		st, err := statuses(ctx, e.rdb, prefix, ids)
		if err != nil {
			return drainResult{}, err
		}
		lost += len(ids) - st["succeeded"]
		e.drop(prefix)

		// SIGKILL of the worker running a task: a peer finishes it (visibility 1 s).
		prefix = e.prefix()
		c = e.client(prefix)
		vt := []string{"DTQ_VISIBILITY_TIMEOUT_S=1", "DTQ_HEARTBEAT_INTERVAL_S=0.25"}
		victim, err := e.startWorker(prefix, vt...)
		if err != nil {
			return drainResult{}, err
		}
		id, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "sleep", Payload: []byte(`{"ms":100}`)})
		if err != nil {
			return drainResult{}, err
		}
		if err := waitStatus(ctx, c, []string{id}, client.StatusRunning, 10*time.Second); err != nil {
			return drainResult{}, err
		}
		peer, err := e.startWorker(prefix, vt...)
		if err != nil {
			return drainResult{}, err
		}
		if err := peer.ready(10 * time.Second); err != nil {
			return drainResult{}, err
		}
		t0 = time.Now()
		victim.kill()
		if err := waitStatus(ctx, c, []string{id}, client.StatusSucceeded, 30*time.Second); err != nil {
			return drainResult{}, err
		}
		recovery = append(recovery, float64(time.Since(t0).Microseconds())/1000)
		_ = peer.stop()
		e.drop(prefix)
	}
	mi, _, _ := spread(idle)
	mb, _, _ := spread(busy)
	mr, _, _ := spread(recovery)
	return drainResult{Reps: reps, SigtermIdleExitMedianMS: round(mi, 2), SigtermBusyExitMedianMS: round(mb, 2),
		BusyTasksLost: lost, SigkillRecoveryMedianMS: round(mr, 1), VisibilityTimeoutS: 1,
		SigtermIdleExitMS: idle, SigtermBusyExitMS: busy, SigkillRecoveryMS: recovery}, nil
}
