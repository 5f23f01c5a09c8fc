package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// runPeer runs dtq and the asynq peer benchmark on the same Redis, alternating run by
// run, for throughput, latency and coldstart, and prints both with the ratio. The peer
// is a separate Go module built here; dtq's module never imports asynq. The peer
// FLUSHes the database it runs on: point DTQ_REDIS_URL at a Redis nothing else uses.
func runPeer(ctx context.Context, e *benchEnv, o options) int {
	dir, err := filepath.Abs(o.peerDir)
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "go.mod"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench peer: no peer module at %s (--peer DIR): %v\n", o.peerDir, err)
		return 1
	}
	bin := filepath.Join(e.tmp, "peerbench-asynq")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Stderr, build.Env = dir, os.Stderr, append(os.Environ(), staticBuild)
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench peer: building %s: %v\n", dir, err)
		return 1
	}
	type pair struct {
		mode string
		dtq  func() (result, error)
		args []string
	}
	n := o.n
	pairs := []pair{
		{"throughput", func() (result, error) { oo := o; oo.n = def(n, 20000); return runThroughput(ctx, e, oo) },
			[]string{"-mode", "throughput", "-n", strconv.Itoa(def(n, 20000)), "-concurrency", strconv.Itoa(o.concurrency)}},
		{"latency", func() (result, error) { oo := o; oo.n = 300; return runLatency(ctx, e, oo) },
			[]string{"-mode", "latency", "-n", "300", "-concurrency", strconv.Itoa(o.concurrency)}},
		{"coldstart", func() (result, error) { oo := o; oo.reps = def(o.reps, 20); return runColdstart(ctx, e, oo) },
			[]string{"-mode", "coldstart", "-reps", strconv.Itoa(def(o.reps, 20)), "-concurrency", strconv.Itoa(o.concurrency)}},
	}
	for _, p := range pairs {
		by := map[string][]result{}
		for i := 0; i < o.runs; i++ {
			r, err := p.dtq()
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench peer %s (dtq): %v\n", p.mode, err)
				return 1
			}
			by["dtq"] = append(by["dtq"], r)
			if o.json {
				if err := emit(r, "dtq", p.mode); err != nil {
					fmt.Fprintf(os.Stderr, "bench peer %s (dtq): %v\n", p.mode, err)
					return 1
				}
			}
			args := append([]string{"-redis", e.addr}, p.args...)
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench peer %s (asynq): %v\n", p.mode, err)
				return 1
			}
			var pr map[string]any
			if err := json.Unmarshal([]byte(lastLine(string(out))), &pr); err != nil {
				fmt.Fprintf(os.Stderr, "bench peer %s: asynq printed %q\n", p.mode, out)
				return 1
			}
			if p.mode == "coldstart" {
				if xs, ok := pr["exec_to_first_ms"].([]any); ok {
					var fs []float64
					for _, x := range xs {
						if f, ok := x.(float64); ok {
							fs = append(fs, f)
						}
					}
					if len(fs) > 0 {
						m, _, _ := spread(fs)
						pr["exec_to_first_median_ms"] = m
					}
				}
			}
			by["asynq"] = append(by["asynq"], peerResult{fields: pr, of: r})
			if o.json {
				b, _ := json.Marshal(pr)
				fmt.Println(string(b))
			}
		}
		if !o.json {
			printTable(p.mode, by, []string{"dtq", "asynq"})
			if p.mode == "coldstart" {
				fmt.Println("  " + runByRun(by["dtq"], by["asynq"], "exec_to_first_median_ms"))
			}
		}
	}
	return 0
}

// peerResult is one run of the asynq peer benchmark: the JSON object it printed, whose
// figures are read under the names of dtq's figures of the same mode.
type peerResult struct {
	fields map[string]any
	of     result // dtq's result of the same run, for the figures' names
}

func (r peerResult) MarshalJSON() ([]byte, error) { return json.Marshal(r.fields) }

func (r peerResult) figures() []figure {
	var fs []figure
	for _, f := range r.of.figures() {
		v, ok := r.fields[f.name].(float64)
		fs = append(fs, figure{name: f.name, value: v, ok: ok})
	}
	return fs
}

func def(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runByRun compares a lower-is-better figure of the two systems run by run (the i-th
// run of each were made one after the other): in how many dtq's was the lower, and each
// pair. A median over runs can hide a run lost.
func runByRun(dtq, peer []result, name string) string {
	ahead, n := 0, 0
	var pairs []string
	for i := 0; i < len(dtq) && i < len(peer); i++ {
		d, ok1 := valueOf(dtq[i], name)
		a, ok2 := valueOf(peer[i], name)
		if !ok1 || !ok2 {
			continue
		}
		n++
		if d <= a {
			ahead++
		}
		pairs = append(pairs, num(d)+" / "+num(a))
	}
	return fmt.Sprintf("%s run by run (dtq / asynq): dtq no later in %d of %d: %s", name, ahead, n, strings.Join(pairs, ", "))
}
