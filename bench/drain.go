package main

import (
	"context"
	"syscall"
	"time"

	"github.com/dtq/dtq/client"
)

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
