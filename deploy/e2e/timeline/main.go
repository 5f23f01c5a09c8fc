// Command timeline draws the replica timeline of an end-to-end autoscaling run
// as a standalone SVG picture: tasks waiting and running in a top panel; the
// replicas asked for, the workers running and the workers draining below; the
// scenario's markers as dashed vertical lines across both.
//
//	go run ./e2e/timeline -dir RUNDIR -out timeline.svg [-title TEXT] [-from MS] [-to MS]
//
// RUNDIR holds text files of lines that begin with a Unix millisecond stamp:
//
//	replicas.log  MS N                   spec.replicas became N
//	runner.log    MS start SEQ           worker SEQ started
//	              MS stop SEQ            worker SEQ sent SIGTERM
//	              MS exit SEQ CODE       worker SEQ exited with CODE
//	backlog.log   MS WAITING RUNNING     a sample of the queue
//	marks.log     MS free text label     a scenario marker
//
// Only replicas.log is required. Blank lines are ignored; any other line that
// does not fit is an error naming its file and line.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// step is a change point of a step series: the value v holds from at (Unix
// ms) until the next step, or the end of the picture.
type step struct {
	at int64
	v  int
}

// mark is a scenario marker from marks.log.
type mark struct {
	at    int64
	label string
}

// runnerEvent is one line of runner.log; the exit code is checked, not kept.
type runnerEvent struct {
	at   int64
	kind string // start, stop or exit
	seq  int64
}

// timeline is everything read from a run directory.
type timeline struct {
	replicas          []step // spec.replicas asked for
	workers, draining []step // derived from runner.log; nil without it
	waiting, running  []step // tasks, from backlog.log
	marks             []mark
	first, last       int64 // earliest and latest stamp over all files
}

func main() {
	dir := flag.String("dir", "", "run directory: replicas.log, and optionally runner.log, backlog.log, marks.log")
	out := flag.String("out", "timeline.svg", "SVG file to write")
	title := flag.String("title", "", "title of the picture (default: replica timeline: DIR's name)")
	from := flag.Int64("from", 0, "start of the time axis, Unix ms (default: the first stamp)")
	to := flag.Int64("to", 0, "end of the time axis, Unix ms (default: the last stamp)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: timeline -dir RUNDIR -out timeline.svg [-title TEXT] [-from MS] [-to MS]")
		os.Exit(2)
	}
	t, err := load(*dir)
	if err == nil {
		start, end := cmp.Or(*from, t.first), cmp.Or(*to, t.last)
		*title = cmp.Or(*title, "replica timeline: "+filepath.Base(filepath.Clean(*dir)))
		if end < start {
			err = fmt.Errorf("the time axis ends at %d, before its start %d", end, start)
		} else {
			err = os.WriteFile(*out, render(t, *title, start, end), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
}

// load reads a run directory and derives the worker series from runner.log.
func load(dir string) (*timeline, error) {
	t := &timeline{first: math.MaxInt64, last: math.MinInt64}
	var evs []runnerEvent
	files := []struct {
		name     string
		required bool
		parse    func(at int64, fields []string, rest string) error
	}{
		{"replicas.log", true, func(at int64, f []string, _ string) error {
			n, err := ints(f, 1)
			t.replicas = appendStep(t.replicas, at, int(n[0]))
			return err
		}},
		{"runner.log", false, func(at int64, f []string, _ string) error {
			e, err := parseRunner(at, f)
			evs = append(evs, e)
			return err
		}},
		{"backlog.log", false, func(at int64, f []string, _ string) error {
			n, err := ints(f, 2)
			t.waiting = appendStep(t.waiting, at, int(n[0]))
			t.running = appendStep(t.running, at, int(n[1]))
			return err
		}},
		{"marks.log", false, func(at int64, _ []string, rest string) error {
			t.marks = append(t.marks, mark{at, rest})
			if rest == "" {
				return errors.New("want MS LABEL")
			}
			return nil
		}},
	}
	for _, file := range files {
		err := readLines(filepath.Join(dir, file.name), file.required, func(at int64, f []string, rest string) error {
			t.first, t.last = min(t.first, at), max(t.last, at)
			return file.parse(at, f, rest)
		})
		if err != nil {
			return nil, err
		}
	}
	if t.replicas == nil {
		return nil, fmt.Errorf("%s: no lines", filepath.Join(dir, "replicas.log"))
	}
	if evs != nil {
		t.workers, t.draining = workerCounts(evs, t.first)
	}
	return t, nil
}

// readLines calls fn with the stamp, the fields after it and the rest of the
// line after it, for each non-blank line of the file at path, and stops at
// the first error, prefixed with the file and line. Stamps must not go back.
// A missing file that is not required reads as empty.
func readLines(path string, required bool, fn func(at int64, fields []string, rest string) error) error {
	data, err := os.ReadFile(path)
	if !required && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	prev := int64(-1)
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		at, err := strconv.ParseInt(f[0], 10, 64)
		switch {
		case err != nil || at < 0:
			err = errors.New("want a Unix millisecond stamp first")
		case at < prev:
			err = fmt.Errorf("stamp before the previous line's %d", prev)
		default:
			err = fn(at, f[1:], strings.TrimSpace(line[len(f[0]):]))
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %v: %q", path, i+1, err, line)
		}
		prev = at
	}
	return nil
}

// ints parses exactly want fields as non-negative integers. It always returns
// want numbers, so a caller may use them before looking at the error.
func ints(f []string, want int) ([]int64, error) {
	n := make([]int64, want)
	if len(f) != want {
		return n, fmt.Errorf("want %d fields after the stamp, got %d", want, len(f))
	}
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return n, fmt.Errorf("field %d: want a non-negative integer", i+2)
		}
		n[i] = v
	}
	return n, nil
}

// parseRunner parses the fields after the stamp of one runner.log line.
func parseRunner(at int64, f []string) (runnerEvent, error) {
	fields := map[string]int{"start": 2, "stop": 2, "exit": 3} // looked up, never iterated
	bad := errors.New("want MS start SEQ, MS stop SEQ or MS exit SEQ CODE")
	if len(f) == 0 || fields[f[0]] != len(f) {
		return runnerEvent{}, bad
	}
	seq, err := ints(f[1:2], 1)
	if err == nil && len(f) == 3 {
		_, err = strconv.Atoi(f[2])
	}
	if err != nil {
		return runnerEvent{}, bad
	}
	return runnerEvent{at, f[0], seq[0]}, nil
}

// workerCounts derives two step series, both starting at 0 at since, from
// the runner's events in file order: workers running (started, not yet
// exited) and draining (sent SIGTERM, not yet exited). An exit without a stop
// (a crash or a kill) ends a worker all the same. An event that does not fit
// the worker's state (a second start, a stop after the exit) changes nothing.
func workerCounts(evs []runnerEvent, since int64) (workers, draining []step) {
	const (
		none = iota
		started
		stopped
		exited
	)
	state := map[int64]int{} // by SEQ, never iterated
	run, drain := 0, 0
	workers = appendStep(nil, since, 0)
	draining = appendStep(nil, since, 0)
	for _, e := range evs {
		switch s := state[e.seq]; {
		case e.kind == "start" && s == none:
			state[e.seq] = started
			run++
		case e.kind == "stop" && s == started:
			state[e.seq] = stopped
			drain++
		case e.kind == "exit" && (s == started || s == stopped):
			state[e.seq] = exited
			run--
			if s == stopped {
				drain--
			}
		}
		workers = appendStep(workers, e.at, run)
		draining = appendStep(draining, e.at, drain)
	}
	return workers, draining
}

// appendStep adds the value v from at on. Steps at the same stamp collapse
// into the last one, and a step that changes nothing is dropped.
func appendStep(s []step, at int64, v int) []step {
	if n := len(s); n > 0 && s[n-1].at == at {
		s = s[:n-1]
	}
	if n := len(s); n > 0 && s[n-1].v == v {
		return s
	}
	return append(s, step{at, v})
}

// window returns the part of s inside [from, to]: the value holding at from,
// if s has begun by then, and the steps after it up to to.
func window(s []step, from, to int64) []step {
	var out []step
	for i, p := range s {
		if p.at > to {
			break
		}
		if p.at <= from {
			if i+1 == len(s) || s[i+1].at > from {
				out = append(out, step{from, p.v})
			}
			continue
		}
		out = append(out, p)
	}
	return out
}
