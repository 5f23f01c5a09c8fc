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
//	go run ./bench observer   [--n 1000000] [--reps 1000] [--duration 30s]
//	go run ./bench peer       [--runs 5]     dtq and asynq alternating on the same Redis
//	go run ./bench chaos      [--duration 2m]
//	go run ./bench limit      [--rate 100/s] [--burst 1] [--workers 4] [--n 10000] [--duration 60s]
//
// Redis: DTQ_REDIS_URL, or a redis-server bench starts on a free port and stops after.
// Binaries: dtq, dtq-scaler and dtq-observer built static from this tree, or those in DTQ_BENCH_BIN.
// Every mode takes --runs N (repetitions; the table shows median [min – max]).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	rate        string
	burst       int
	linkDelay   time.Duration
	// workerProcs is the GOMAXPROCS the throughput mode's workers run with (0: Go's
	// default, the CPUs the process may use)
	workerProcs int
}

type mode struct {
	name string
	help string
	run  func(ctx context.Context, env *benchEnv, o options) (result, error)
}

// runner turns a mode's run function, which returns the mode's own result type, into
// the one the table of modes holds.
func runner[R result](f func(ctx context.Context, env *benchEnv, o options) (R, error)) func(context.Context, *benchEnv, options) (result, error) {
	return func(ctx context.Context, env *benchEnv, o options) (result, error) {
		r, err := f(ctx, env, o)
		return r, err
	}
}

func modes() []mode {
	return []mode{
		{"throughput", "N no-op tasks through W worker processes of concurrency C", runner(runThroughput)},
		{"latency", "idle worker; tasks enqueued one at a time; enqueue → start percentiles", runner(runLatency)},
		{"coldstart", "exec of a fresh worker → a waiting task's function called, and finished; exec → ready", runner(runColdstart)},
		{"drain", "SIGTERM → exit idle and busy; SIGKILL → task finished by a peer", runner(runDrain)},
		{"ceiling", "the design's Redis-bound ceiling: the same scripts per task, no worker", runner(runCeiling)},
		{"scaler", "GetMetrics over 10 queues × 10 bands; XADD → StreamIsActive push", runner(runScaler)},
		{"observer", "dtq-observer: /api/v1/queues over 100 queues × 10 bands, task pages of an N-task queue, RSS under ten dashboards", runner(runObserver)},
		{"wait", "client.Wait on delayed tasks, one at a time: the function's return → Wait returns", runner(runWait)},
		{"scripts", "Redis time (and with --callgrind instructions) per task in enqueue, claim and complete, no worker", runner(runScripts)},
		{"limit", "a rate limit on a backlog of N tasks, W worker processes: the achieved start rate against the limit", runner(runLimit)},
		{"chaos", "workers killed, stopped, frozen under load; the ledger counts lost and duplicates", runner(runChaos)},
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
	fs.StringVar(&o.rate, "rate", "100/s", "limit: the queue's rate limit (dtq limit set --rate)")
	fs.IntVar(&o.burst, "burst", 1, "limit: the rate limit's burst (1: no two starts at once)")
	fs.IntVar(&o.workerProcs, "worker-gomaxprocs", 0, "throughput: the workers' GOMAXPROCS (0: Go's default); the run reports what the worker's /metrics says")
	fs.DurationVar(&o.linkDelay, "link-delay", 0, "throughput: the workers reach Redis through a proxy that holds each chunk this long, both ways (a Redis across a network; 0: direct)")
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
			if o.json {
				if err := emit(r, "dtq", name); err != nil {
					fmt.Fprintf(os.Stderr, "bench %s: %v\n", name, err)
					return 1
				}
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
