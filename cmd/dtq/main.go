// Command dtq is the worker, the producer and inspection CLI, the demo, and the way in
// to the scaler (dtq-scaler), the observer (dtq-observer) and the benchmarks (go run ./bench).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	// first among dtq's imports: its initialiser maps the pages the start is about to
	// touch (DTQ_PREFAULT)
	_ "github.com/dtq/dtq/internal/prefault"
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
		{"observer", "run the observer: a JSON API over queues, tasks and workers", runObserver},
		{"enqueue", "enqueue a task and print its id", runEnqueue},
		{"inspect", "print a task or a queue as JSON", runInspect},
		{"cancel", "cancel a waiting task, or ask a running one to stop", runCancel},
		{"pause", "pause a queue (workers stop reading it)", runPause},
		{"resume", "resume a paused queue", runResume},
		{"dead", "list, requeue or delete dead tasks", runDead},
		{"run-now", "run a scheduled or retrying task now", runRunNow},
		{"cron", "add, list, remove, pause or resume periodic (cron) entries", runCron},
		{"limit", "set, list or remove rate and concurrency limits of queues and functions", runLimit},
		{"workers", "list workers with their computed liveness", runWorkers},
		{"demo", "run workers and a burst of tasks end to end, kill a worker mid-task", runDemo},
		{"bench", "load runs against Redis, beside asynq (go run ./bench in the source tree)", runBench},
		{"version", "print the version, VCS revision and Go version of this binary", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dtq <command> [flags]   (dtq <command> --help for its flags and environment)")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

// ownLogs are the commands that set up their logging themselves (from their
// configuration) or replace this process.
var ownLogs = map[string]bool{"worker": true, "scaler": true, "observer": true, "bench": true}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(exitUsage)
	}
	switch os.Args[1] {
	case "-h", "--help", "-help", "help":
		// asked for: the usage goes to stdout
		usage(os.Stdout)
		return
	case "--version", "-version":
		os.Exit(runVersion(nil))
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			if !ownLogs[c.name] && !cliLogs(c.name) {
				os.Exit(exitUsage)
			}
			os.Exit(c.run(os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "dtq: unknown command %q\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(exitUsage)
}

// runVersion prints what the binary was built from: the module version ("(devel)"
// for a build in a source tree), the VCS revision and time when the build recorded
// them (a "+modified" revision had uncommitted changes), and the Go version.
func runVersion(args []string) int {
	fs := newFlags("version", "version", nil)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("version", fs) {
		return exitUsage
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Print(versionText(bi))
	return exitOK
}

// versionText formats bi (nil: a binary without build information).
func versionText(bi *debug.BuildInfo) string {
	version, goVersion, rev, at, modified := "unknown", "unknown", "", "", false
	if bi != nil {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	out := "dtq " + version + "\n"
	if rev != "" {
		if modified {
			rev += "+modified"
		}
		out += "revision " + rev
		if at != "" {
			out += " (" + at + ")"
		}
		out += "\n"
	}
	return out + "go " + goVersion + "\n"
}
