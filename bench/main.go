// Command bench runs dtq load runs against a local Redis and prints what it measured:
// a table for people, and with --json one JSON object per result for scripts (the field
// names are the peer benchmark's, so one script can compare them).
//
//	go run ./bench throughput [--n 50000] [--workers 1] [--concurrency 64]
//	go run ./bench latency    [--n 300] [--gap 20ms]
//	go run ./bench coldstart  [--reps 20]
//	go run ./bench drain      [--reps 5]
//	go run ./bench ceiling    [--n 50000]
//	go run ./bench scaler     [--reps 2000]
//	go run ./bench scripts    [--n 3200] [--callgrind]
//	go run ./bench peer       [--runs 5]     dtq and asynq alternating on the same Redis
//	go run ./bench chaos      [--duration 2m]
//
// Redis: DTQ_REDIS_URL, or a redis-server bench starts on a free port and stops after.
// Binaries: dtq and dtq-scaler built static from this tree, or those in DTQ_BENCH_BIN.
// Every mode takes --runs N (repetitions; the table shows median [min – max]).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/dtq/dtq/chaos"
)

type options struct {
	runs        int
	n           int
	workers     int
	concurrency int
	gap         time.Duration
	reps        int
	json        bool
	peerDir     string
	duration    time.Duration
	idle        time.Duration
	verbose     bool
	callgrind   bool
}

// result is one measured figure set: the JSON object of one run.
type result map[string]any

type mode struct {
	name string
	help string
	run  func(ctx context.Context, env *benchEnv, o options) (result, error)
}

func modes() []mode {
	return []mode{
		{"throughput", "N no-op tasks through W worker processes of concurrency C", runThroughput},
		{"latency", "idle worker; tasks enqueued one at a time; enqueue → start percentiles", runLatency},
		{"coldstart", "exec of a fresh worker → a waiting task's function called, and finished; exec → ready", runColdstart},
		{"drain", "SIGTERM → exit idle and busy; SIGKILL → task finished by a peer", runDrain},
		{"ceiling", "the design's Redis-bound ceiling: the same scripts per task, no worker", runCeiling},
		{"scaler", "GetMetrics over 10 queues × 10 bands; XADD → StreamIsActive push", runScaler},
		{"scripts", "Redis time (and with --callgrind instructions) per task in enqueue, claim and complete, no worker", runScripts},
		{"chaos", "workers killed, stopped, frozen under load; the ledger counts lost and duplicates", runChaos},
	}
}

func main() {
	chaos.MaybeWorker() // chaos runs its worker processes as this binary again
	maybeFloorReader()  // so does the latency floor its reader
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		return
	}
	name := os.Args[1]
	fs := flag.NewFlagSet("bench "+name, flag.ExitOnError)
	var o options
	fs.IntVar(&o.runs, "runs", 1, "repetitions")
	fs.IntVar(&o.n, "n", 0, "tasks (mode default when 0)")
	fs.IntVar(&o.workers, "workers", 1, "worker processes (throughput)")
	fs.IntVar(&o.concurrency, "concurrency", 64, "worker concurrency")
	fs.DurationVar(&o.gap, "gap", 20*time.Millisecond, "gap between enqueues (latency)")
	fs.IntVar(&o.reps, "reps", 0, "repetitions inside one run (coldstart, drain, scaler)")
	fs.BoolVar(&o.json, "json", false, "one JSON object per result on stdout, no table")
	fs.StringVar(&o.peerDir, "peer", "../shared/peerbench/asynq", "the asynq peer benchmark module (peer mode)")
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long chaos injects faults")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "how long latency measures the idle worker's Redis traffic")
	fs.BoolVar(&o.verbose, "v", false, "log what the run does to stderr")
	fs.BoolVar(&o.callgrind, "callgrind", false, "scripts: Redis runs under valgrind --tool=callgrind; count its instructions per phase")
	_ = fs.Parse(os.Args[2:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx := context.Background()
	env, err := setupEnv(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	code := run(ctx, env, name, o)
	env.close()
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./bench <mode> [flags]   (go run ./bench <mode> --help for flags)")
	for _, m := range modes() {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", m.name, m.help)
	}
	fmt.Fprintf(os.Stderr, "  %-11s %s\n", "peer", "throughput, latency and coldstart of dtq and asynq, alternating run by run")
}

func run(ctx context.Context, env *benchEnv, name string, o options) int {
	if name == "peer" {
		return runPeer(ctx, env, o)
	}
	for _, m := range modes() {
		if m.name != name {
			continue
		}
		var rs []result
		for i := 0; i < o.runs; i++ {
			r, err := m.run(ctx, env, o)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench %s: %v\n", name, err)
				return 1
			}
			r["system"], r["mode"] = "dtq", name
			if o.json {
				emit(r)
			}
			rs = append(rs, r)
		}
		if !o.json {
			printTable(name, map[string][]result{"dtq": rs}, nil)
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "bench: unknown mode %q\n", name)
	usage()
	return 2
}

func emit(r result) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// figures lists, per mode, the figures the table shows, in order.
var figures = map[string][]string{
	"throughput": {"process_per_s", "enqueue_per_s", "exec_to_first_task_ms", "redis_cmds_per_task", "worker_cpu_us_per_task", "redis_cpu_us_per_task", "lost", "duplicates"},
	"latency":    {"p50_ms", "p90_ms", "p99_ms", "max_ms", "floor_p50_ms", "floor_p99_ms", "handoff_share", "idle_redis_cmds_per_s", "idle_roundtrips_per_s", "idle_rss_mb"},
	"coldstart":  {"exec_to_first_median_ms", "exec_to_finished_median_ms", "exec_to_ready_median_ms"},
	"drain":      {"sigterm_idle_exit_median_ms", "sigterm_busy_exit_median_ms", "busy_tasks_lost", "sigkill_recovery_median_ms"},
	"ceiling":    {"ceiling_per_s", "redis_cmds_per_task", "redis_cpu_us_per_task"},
	"scaler":     {"getmetrics_p50_ms", "getmetrics_p99_ms", "push_p50_ms", "push_p99_ms", "push_max_ms", "push_enqueue_p99_ms"},
	// per task; instr: instructions Redis executed (--callgrind)
	"scripts": {"enqueue_redis_us", "claim_redis_us", "complete_redis_us", "enqueue_redis_instr", "claim_redis_instr", "complete_redis_instr", "lost"},
	"chaos":   {"tasks", "kills", "stops", "freezes", "lost", "duplicate_starts", "reexecutions", "unexplained_reexecutions", "quiesce_s"},
}

// lowerIsBetter marks figures where the peer's value divided by ours is the speed-up.
func lowerIsBetter(f string) bool {
	return strings.HasSuffix(f, "_ms") || strings.Contains(f, "cpu") || strings.Contains(f, "idle") || strings.Contains(f, "cmds")
}

// printTable prints median [min – max] per figure for each system, and the ratio.
func printTable(mode string, bySystem map[string][]result, systems []string) {
	if systems == nil {
		for s := range bySystem {
			systems = append(systems, s)
		}
		sort.Strings(systems)
	}
	fmt.Printf("\n%s (%d run(s))\n", mode, len(bySystem[systems[0]]))
	fmt.Printf("  %-30s", "figure")
	for _, s := range systems {
		fmt.Printf(" %-30s", s+": median [min – max]")
	}
	if len(systems) == 2 {
		fmt.Printf(" %s", "dtq advantage")
	}
	fmt.Println()
	for _, f := range figures[mode] {
		meds := map[string]float64{}
		line := fmt.Sprintf("  %-30s", f)
		any := false
		for _, s := range systems {
			xs := values(bySystem[s], f)
			if len(xs) == 0 {
				line += fmt.Sprintf(" %-30s", "—")
				continue
			}
			any = true
			m, lo, hi := spread(xs)
			meds[s] = m
			line += fmt.Sprintf(" %-30s", fmt.Sprintf("%s [%s – %s]", num(m), num(lo), num(hi)))
		}
		if !any {
			continue
		}
		if len(systems) == 2 {
			a, b := meds["dtq"], meds[systems[1]]
			if systems[0] != "dtq" {
				a, b = meds["dtq"], meds[systems[0]]
			}
			if a > 0 && b > 0 {
				ratio := a / b
				if lowerIsBetter(f) {
					ratio = b / a
				}
				line += fmt.Sprintf(" ×%.2f", ratio)
			}
		}
		fmt.Println(line)
	}
}

func values(rs []result, f string) []float64 {
	var xs []float64
	for _, r := range rs {
		switch v := r[f].(type) {
		case float64:
			xs = append(xs, v)
		case int:
			xs = append(xs, float64(v))
		case int64:
			xs = append(xs, float64(v))
		}
	}
	return xs
}

func num(x float64) string {
	switch {
	case x >= 1000:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}
