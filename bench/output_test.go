package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// keysOf returns the sorted keys of the JSON object encode makes of r.
func keysOf(t *testing.T, r result) []string {
	t.Helper()
	b, err := encode(r, "dtq", "m")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	var ks []string
	for k := range obj {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func names(fs []figure) []string {
	var ns []string
	for _, f := range fs {
		ns = append(ns, f.name)
	}
	return ns
}

// The keys of each mode's JSON object are what scripts reading --json rely on, and the
// table's rows are the figures people read: both are fixed.
func TestResultKeysAndRows(t *testing.T) {
	one := some(1)
	cases := []struct {
		name string
		r    result
		keys string // sorted, system and mode included
		rows string
	}{
		{"throughput", throughputResult{},
			"acked_per_s concurrency duplicates enqueue_per_s enqueue_s lost mode n process_per_s process_s redis_cmds_per_task succeeded system worker_cpu_us_per_task worker_gomaxprocs workers",
			"process_per_s enqueue_per_s exec_to_first_task_ms redis_cmds_per_task worker_cpu_us_per_task redis_cpu_us_per_task redis_busy link_rtt_ms worker_gomaxprocs lost duplicates"},
		{"throughput measured everywhere", throughputResult{ExecToFirstTaskMS: one, RedisCPUUsPerTask: one, RedisBusy: one, LinkRTTMS: one},
			"acked_per_s concurrency duplicates enqueue_per_s enqueue_s exec_to_first_task_ms link_rtt_ms lost mode n process_per_s process_s redis_busy redis_cmds_per_task redis_cpu_us_per_task succeeded system worker_cpu_us_per_task worker_gomaxprocs workers",
			"process_per_s enqueue_per_s exec_to_first_task_ms redis_cmds_per_task worker_cpu_us_per_task redis_cpu_us_per_task redis_busy link_rtt_ms worker_gomaxprocs lost duplicates"},
		{"latency", latencyResult{},
			"concurrency floor_p50_ms floor_p99_ms gap_ms handoff_share idle_redis_cmds_per_s idle_roundtrips_per_s idle_rss_mb max_ms mean_ms min_ms mode n p50_ms p90_ms p99_ms system",
			"p50_ms p90_ms p99_ms max_ms floor_p50_ms floor_p99_ms handoff_share idle_redis_cmds_per_s idle_roundtrips_per_s idle_rss_mb"},
		{"coldstart", coldstartResult{ExecToFirstMS: []float64{1}},
			"exec_to_finished_median_ms exec_to_finished_ms exec_to_first_median_ms exec_to_first_ms exec_to_ready_median_ms exec_to_ready_ms finish_seen_by mode reps system",
			"exec_to_first_median_ms exec_to_finished_median_ms exec_to_ready_median_ms"},
		{"drain", drainResult{},
			"busy_tasks_lost mode reps sigkill_recovery_median_ms sigkill_recovery_ms sigterm_busy_exit_median_ms sigterm_busy_exit_ms sigterm_idle_exit_median_ms sigterm_idle_exit_ms system visibility_timeout_s",
			"sigterm_idle_exit_median_ms sigterm_busy_exit_median_ms busy_tasks_lost sigkill_recovery_median_ms"},
		{"ceiling", ceilingResult{},
			"ceiling_per_s mode n redis_cmds_per_task system",
			"ceiling_per_s redis_cmds_per_task redis_cpu_us_per_task redis_busy"},
		{"ceiling on a local Redis", ceilingResult{RedisCPUUsPerTask: one, RedisBusy: one},
			"ceiling_per_s mode n redis_busy redis_cmds_per_task redis_cpu_us_per_task system",
			"ceiling_per_s redis_cmds_per_task redis_cpu_us_per_task redis_busy"},
		{"scaler", scalerResult{},
			"bands getmetrics_p50_ms getmetrics_p99_ms mode push_enqueue_p99_ms push_max_ms push_p50_ms push_p99_ms push_reps queues reps system",
			"getmetrics_p50_ms getmetrics_p99_ms push_p50_ms push_p99_ms push_max_ms push_enqueue_p99_ms"},
		{"scripts", scriptsResult{},
			"claim_redis_us complete_redis_us enqueue_redis_us lost mode n succeeded system",
			"enqueue_redis_us claim_redis_us complete_redis_us enqueue_redis_instr claim_redis_instr complete_redis_instr lost"},
		{"scripts under callgrind", scriptsResult{EnqueueRedisInstr: one, ClaimRedisInstr: one, CompleteRedisInstr: one},
			"claim_redis_instr claim_redis_us complete_redis_instr complete_redis_us enqueue_redis_instr enqueue_redis_us lost mode n succeeded system",
			"enqueue_redis_us claim_redis_us complete_redis_us enqueue_redis_instr claim_redis_instr complete_redis_instr lost"},
		{"chaos", chaosResult{},
			"duplicate_starts freezes kills lost mode quiesce_s reexecutions seed stops system tasks unexplained_reexecutions",
			"tasks kills stops freezes lost duplicate_starts reexecutions unexplained_reexecutions quiesce_s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys := keysOf(t, c.r)
			if got := strings.Join(keys, " "); got != c.keys {
				t.Errorf("JSON keys\n got %s\nwant %s", got, c.keys)
			}
			fs := c.r.figures()
			if got := strings.Join(names(fs), " "); got != c.rows {
				t.Errorf("table rows\n got %s\nwant %s", got, c.rows)
			}
			// A row the run measured is a key of its JSON object; one it did not is none.
			for _, f := range fs {
				if f.ok != slices.Contains(keys, f.name) {
					t.Errorf("figure %s: measured %v, but in the JSON object %v", f.name, f.ok, !f.ok)
				}
			}
		})
	}
}

// encode prints what the map of figures printed before the results were typed: the same
// keys in the same order and the same numbers.
func TestEncodeAsAMap(t *testing.T) {
	r := throughputResult{N: 2000, Workers: 1, Concurrency: 64, EnqueueS: 0.3113, EnqueuePerS: 6424,
		ProcessS: 0.5282, ProcessPerS: 3787, AckedPerS: 3787, ExecToFirstTaskMS: some(113.7),
		RedisCmdsPerTask: 6.42, WorkerCPUUsPerTask: 35, RedisCPUUsPerTask: some(30), WorkerGOMAXPROCS: 2, Succeeded: 2000}
	want := `{"acked_per_s":3787,"concurrency":64,"duplicates":0,"enqueue_per_s":6424,"enqueue_s":0.3113,"exec_to_first_task_ms":113.7,"lost":0,"mode":"throughput","n":2000,"process_per_s":3787,"process_s":0.5282,"redis_cmds_per_task":6.42,"redis_cpu_us_per_task":30,"succeeded":2000,"system":"dtq","worker_cpu_us_per_task":35,"worker_gomaxprocs":2,"workers":1}`
	b, err := encode(r, "dtq", "throughput")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Fatalf("encode\n got %s\nwant %s", b, want)
	}
	c := chaosResult{Seed: 1<<64 - 1}
	if b, _ := encode(c, "dtq", "chaos"); !strings.Contains(string(b), `"seed":18446744073709551615`) {
		t.Fatalf("seed not printed exactly: %s", b)
	}
}

// The peer's object is printed as it came, and the table reads its figures by the names
// of dtq's of the same mode.
func TestPeerResult(t *testing.T) {
	var fields map[string]any
	in := `{"system":"asynq","mode":"latency","p50_ms":1.5,"p99_ms":3,"version":"v0.26.0"}`
	if err := json.Unmarshal([]byte(in), &fields); err != nil {
		t.Fatal(err)
	}
	pr := peerResult{fields: fields, of: latencyResult{}}
	b, err := json.Marshal(pr)
	if err != nil || string(b) != `{"mode":"latency","p50_ms":1.5,"p99_ms":3,"system":"asynq","version":"v0.26.0"}` {
		t.Fatalf("peer result printed as %s, %v", b, err)
	}
	got := map[string]float64{}
	for _, f := range pr.figures() {
		if f.ok {
			got[f.name] = f.value
		}
	}
	if len(got) != 2 || got["p50_ms"] != 1.5 || got["p99_ms"] != 3 {
		t.Fatalf("peer figures %v, want p50_ms 1.5 and p99_ms 3 only", got)
	}
	if n := len(pr.figures()); n != len(latencyResult{}.figures()) {
		t.Fatalf("peer has %d rows, dtq's latency %d", n, len(latencyResult{}.figures()))
	}
}

// The table of dtq against the peer: a row per figure either measured, the ratio with
// the lower-is-better figures turned round.
func TestPrintTable(t *testing.T) {
	dtq := []result{latencyResult{P50MS: 1, P99MS: 2}, latencyResult{P50MS: 3, P99MS: 4}}
	peer := []result{
		peerResult{fields: map[string]any{"p50_ms": 4.0, "p99_ms": 9.0}, of: dtq[0]},
		peerResult{fields: map[string]any{"p50_ms": 4.0, "p99_ms": 9.0}, of: dtq[1]},
	}
	out := captureStdout(t, func() {
		printTable("latency", map[string][]result{"dtq": dtq, "asynq": peer}, []string{"dtq", "asynq"})
	})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if lines[1] != "latency (2 run(s))" {
		t.Fatalf("title %q", lines[1])
	}
	row := func(name string) string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return l
			}
		}
		return ""
	}
	if l := row("p50_ms"); !strings.Contains(l, "2 [1 – 3]") || !strings.Contains(l, "4 [4 – 4]") || !strings.HasSuffix(l, "×2.00") {
		t.Errorf("p50_ms row %q", l)
	}
	if l := row("p99_ms"); !strings.HasSuffix(l, "×3.00") {
		t.Errorf("p99_ms row %q", l)
	}
	// dtq measured every figure (zero where unset), the peer only two: the rows with a
	// dash for the peer still show, without a ratio.
	if l := row("handoff_share"); !strings.Contains(l, "—") || strings.Contains(l, "×") {
		t.Errorf("handoff_share row %q", l)
	}
	if got, want := len(lines), 3+len(latencyResult{}.figures()); got != want {
		t.Errorf("%d lines, want %d:\n%s", got, want, out)
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.String()
	}()
	f()
	os.Stdout = old
	_ = w.Close()
	return <-done
}

// The cold start compared run by run: a lost run shows even when the medians do not, a
// tie counts as not later, and a run the peer has no figure for is left out.
func TestRunByRun(t *testing.T) {
	peer := func(ms any) result {
		return peerResult{fields: map[string]any{"exec_to_first_median_ms": ms}, of: coldstartResult{}}
	}
	dtq := []result{coldstartResult{ExecToFirstMedianMS: 13}, coldstartResult{ExecToFirstMedianMS: 16.5},
		coldstartResult{ExecToFirstMedianMS: 14}, coldstartResult{ExecToFirstMedianMS: 12}}
	asynq := []result{peer(15.0), peer(15.5), peer(14.0), peer("none")}
	got := runByRun(dtq, asynq, "exec_to_first_median_ms")
	want := "exec_to_first_median_ms run by run (dtq / asynq): dtq no later in 2 of 3: 13.0 / 15.0, 16.5 / 15.5, 14.0 / 14.0"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
