package main

import (
	"context"
	"os"
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
	if r["succeeded"] != 2000 || r["lost"] != 0 || r["process_per_s"].(float64) <= 0 || r["enqueue_per_s"].(float64) <= 0 {
		t.Fatalf("throughput figures not sane: %v", r)
	}

	o.n, o.workers = 3000, 3
	r, err = runThroughput(ctx, e, o)
	if err != nil || r["succeeded"] != 3000 {
		t.Fatalf("throughput with 3 workers: %v %v", r, err)
	}
	o.workers = 1

	t.Log("latency")
	o.n = 30
	r, err = runLatency(ctx, e, o)
	if err != nil {
		t.Fatalf("latency: %v", err)
	}
	if p50, p99 := r["p50_ms"].(float64), r["p99_ms"].(float64); p50 <= 0 || p99 < p50 || r["max_ms"].(float64) < p99 {
		t.Fatalf("latency percentiles not ordered: %v", r)
	}
	if f50, f99 := r["floor_p50_ms"].(float64), r["floor_p99_ms"].(float64); f50 <= 0 || f99 < f50 {
		t.Fatalf("latency floor percentiles not ordered: %v", r)
	}
	if s := r["handoff_share"].(float64); s <= 0 || s > 1 {
		t.Fatalf("handoff share %v: the idle worker took no task from the enqueue, or counted more than were sent", s)
	}
	if r["idle_roundtrips_per_s"].(float64) <= 0 {
		t.Fatalf("idle round trips not measured: %v", r)
	}

	t.Log("coldstart")
	o.reps = 2
	r, err = runColdstart(ctx, e, o)
	if err != nil || len(r["exec_to_first_ms"].([]float64)) != 2 {
		t.Fatalf("coldstart: %v %v", r, err)
	}
	// the function is called before its outcome is recorded, both after the exec
	for i, called := range r["exec_to_first_ms"].([]float64) {
		if fin := r["exec_to_finished_ms"].([]float64)[i]; called <= 0 || fin < called {
			t.Fatalf("coldstart rep %d: function called at %v ms, finished at %v ms", i, called, fin)
		}
	}
	if r["finish_seen_by"] != "notification" {
		t.Fatalf("coldstart did not watch the task through a keyspace notification: %v", r)
	}
	if v := e.rdb.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]; v != "" {
		t.Fatalf("coldstart left notify-keyspace-events at %q", v)
	}

	t.Log("drain")
	o.reps = 1
	r, err = runDrain(ctx, e, o)
	if err != nil || r["busy_tasks_lost"] != 0 {
		t.Fatalf("drain: %v %v", r, err)
	}

	t.Log("ceiling")
	o.n = 3000
	r, err = runCeiling(ctx, e, o)
	if err != nil || r["ceiling_per_s"].(float64) <= 0 {
		t.Fatalf("ceiling: %v %v", r, err)
	}

	t.Log("scripts")
	o.n = 500
	r, err = runScripts(ctx, e, o)
	if err != nil || r["lost"] != 0 {
		t.Fatalf("scripts: %v %v", r, err)
	}
	for _, f := range []string{"enqueue_redis_us", "claim_redis_us", "complete_redis_us"} {
		if v, ok := r[f].(float64); !ok || v <= 0 {
			t.Fatalf("scripts: %s = %v, want Redis time measured", f, r[f])
		}
	}
	if _, ok := r["claim_redis_instr"]; ok {
		t.Fatalf("scripts counted instructions without --callgrind: %v", r)
	}

	t.Log("scaler")
	o.reps = 40
	r, err = runScaler(ctx, e, o)
	if err != nil || r["getmetrics_p50_ms"].(float64) <= 0 || r["push_p50_ms"].(float64) <= 0 ||
		r["push_enqueue_p99_ms"].(float64) <= 0 || r["push_enqueue_p99_ms"].(float64) > r["push_max_ms"].(float64) {
		t.Fatalf("scaler: %v %v", r, err)
	}
}
