// Command dtq is the worker, the producer and inspection CLI, the demo, and the way in
// to the scaler (dtq-scaler) and the benchmarks (go run ./bench).
package main

import (
	"fmt"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string) int
}

func commands() []command {
	return []command{
		{"worker", "run a worker (config from DTQ_* environment variables)", runWorker},
		{"scaler", "run the KEDA external scaler (gRPC) and its metrics endpoint", runScaler},
		{"enqueue", "enqueue a task and print its id", runEnqueue},
		{"inspect", "print a task or a queue as JSON", runInspect},
		{"cancel", "cancel a queued or scheduled task", runCancel},
		{"pause", "pause a queue (workers stop reading it)", runPause},
		{"resume", "resume a paused queue", runResume},
		{"dead", "list or requeue dead tasks", runDead},
		{"workers", "list workers with their computed liveness", runWorkers},
		{"demo", "run workers and a burst of tasks end to end, kill a worker mid-task", runDemo},
		{"bench", "load runs against Redis, beside asynq (go run ./bench in the source tree)", runBench},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: dtq <command> [flags]   (dtq <command> --help for its flags and environment)")
	fmt.Fprintln(os.Stderr)
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			os.Exit(c.run(os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "dtq: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}
