package main

import (
	"context"
	"os"
	goruntime "runtime"
	"testing"
	"time"
)

// The modes run at small sizes against a redis-server of their own; their figures must
// be sane: every enqueued task counted once, none lost.
// TestMain lets this test binary serve as the latency floor's reader process.
func TestMain(m *testing.M) {
	maybeFloorReader()
	os.Exit(m.Run())
}

func TestModesAtSmallSize(t *testing.T) {
	os.Unsetenv("DTQ_REDIS_URL")
	ctx := context.Background()
	o := options{runs: 1, workers: 1, concurrency: 8, gap: 2 * time.Millisecond, idle: 1500 * time.Millisecond}
	e, err := setupEnv(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()

	t.Log("throughput")
	o.n = 2000
	r, err := runThroughput(ctx, e, o)
	if err != nil {
		t.Fatalf("throughput: %v", err)
	}
	if r.Succeeded != 2000 || r.Lost != 0 || r.ProcessPerS <= 0 || r.EnqueuePerS <= 0 {
		t.Fatalf("throughput figures not sane: %v", r)
	}
	// the bench's own Redis: its CPU is read (in ticks of 10 ms: a short run's share is
	// coarse, so only its presence and sign are checked)
	if r.RedisCPUUsPerTask == nil || r.RedisBusy == nil || *r.RedisBusy < 0 {
		t.Fatalf("throughput did not measure its local Redis: %+v", r)
	}
	if r.WorkerGOMAXPROCS != float64(goruntime.GOMAXPROCS(0)) {
		t.Fatalf("the worker runs with GOMAXPROCS %v, want this process's %d (the default, inherited)", r.WorkerGOMAXPROCS, goruntime.GOMAXPROCS(0))
	}

	o.n, o.workers, o.workerProcs = 3000, 3, 1
	r, err = runThroughput(ctx, e, o)
	if err != nil || r.Succeeded != 3000 {
		t.Fatalf("throughput with 3 workers: %v %v", r, err)
	}
	if r.WorkerGOMAXPROCS != 1 {
		t.Fatalf("--worker-gomaxprocs 1: the worker runs with GOMAXPROCS %v", r.WorkerGOMAXPROCS)
	}
	o.workers, o.workerProcs = 1, 0

	// through the delaying proxy: the round trip it adds is measured and reported
	o.n, o.linkDelay = 1000, time.Millisecond
	r, err = runThroughput(ctx, e, o)
	if err != nil || r.Succeeded != 1000 || r.Lost != 0 {
		t.Fatalf("throughput through a delayed link: %v %v", r, err)
	}
	if r.LinkRTTMS == nil || *r.LinkRTTMS < 2 {
		t.Fatalf("link round trip %v: want at least the 2 ms the proxy holds a PING and its reply", r.LinkRTTMS)
	}
	o.linkDelay = 0

	t.Log("latency")
	o.n = 30
	lr, err := runLatency(ctx, e, o)
	if err != nil {
		t.Fatalf("latency: %v", err)
	}
	if p50, p99 := lr.P50MS, lr.P99MS; p50 <= 0 || p99 < p50 || lr.MaxMS < p99 {
		t.Fatalf("latency percentiles not ordered: %+v", lr)
	}
	if f50, f99 := lr.FloorP50MS, lr.FloorP99MS; f50 <= 0 || f99 < f50 {
		t.Fatalf("latency floor percentiles not ordered: %+v", lr)
	}
	if s := lr.HandoffShare; s <= 0 || s > 1 {
		t.Fatalf("handoff share %v: the idle worker took no task from the enqueue, or counted more than were sent", s)
	}
	if lr.IdleRoundtripsPerS <= 0 {
		t.Fatalf("idle round trips not measured: %+v", lr)
	}

	t.Log("coldstart")
	o.reps = 2
	cr, err := runColdstart(ctx, e, o)
	if err != nil || len(cr.ExecToFirstMS) != 2 || len(cr.ExecToFinishedMS) != 2 {
		t.Fatalf("coldstart: %+v %v", cr, err)
	}
	// the function is called before its outcome is recorded, both after the exec
	for i, called := range cr.ExecToFirstMS {
		if fin := cr.ExecToFinishedMS[i]; called <= 0 || fin < called {
			t.Fatalf("coldstart rep %d: function called at %v ms, finished at %v ms", i, called, fin)
		}
	}
	if cr.FinishSeenBy != "notification" {
		t.Fatalf("coldstart did not watch the task through a keyspace notification: %+v", cr)
	}
	if v := e.rdb.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]; v != "" {
		t.Fatalf("coldstart left notify-keyspace-events at %q", v)
	}

	t.Log("drain")
	o.reps = 1
	dr, err := runDrain(ctx, e, o)
	if err != nil || dr.BusyTasksLost != 0 {
		t.Fatalf("drain: %+v %v", dr, err)
	}

	t.Log("ceiling")
	o.n = 3000
	ce, err := runCeiling(ctx, e, o)
	if err != nil || ce.CeilingPerS <= 0 || ce.RedisBusy == nil || *ce.RedisBusy < 0 {
		t.Fatalf("ceiling: %+v %v", ce, err)
	}

	t.Log("scripts")
	o.n = 500
	sr, err := runScripts(ctx, e, o)
	if err != nil || sr.Lost != 0 {
		t.Fatalf("scripts: %+v %v", sr, err)
	}
	for f, v := range map[string]float64{"enqueue_redis_us": sr.EnqueueRedisUs, "claim_redis_us": sr.ClaimRedisUs, "complete_redis_us": sr.CompleteRedisUs} {
		if v <= 0 {
			t.Fatalf("scripts: %s = %v, want Redis time measured", f, v)
		}
	}
	if sr.EnqueueRedisInstr != nil || sr.ClaimRedisInstr != nil || sr.CompleteRedisInstr != nil {
		t.Fatalf("scripts counted instructions without --callgrind: %+v", sr)
	}

	t.Log("scaler")
	o.reps = 40
	sc, err := runScaler(ctx, e, o)
	if err != nil || sc.GetmetricsP50MS <= 0 || sc.PushP50MS <= 0 ||
		sc.PushEnqueueP99MS <= 0 || sc.PushEnqueueP99MS > sc.PushMaxMS {
		t.Fatalf("scaler: %+v %v", sc, err)
	}
}
