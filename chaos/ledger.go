package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dtq/dtq/runtime"
)

// The ledger is the record of every execution, written by the functions themselves and
// read by the harness after the run: it lives outside the runtime under test and outside
// Redis, so a bug in either cannot hide in it.
//
// Each worker process appends to a file of its own, one line per event, one write(2)
// per line:
//
//	S <unix ns> <queue> <task> <attempt> <worker> <pid>
//	F <unix ns> <queue> <task> <attempt> <worker> <pid> <ok|err|cancel>
//
// The file is opened O_APPEND without O_SYNC: a write that returned is in the kernel's
// page cache and survives a SIGKILL of the writer (the fault injected here); O_SYNC would
// only guard against a crash of the kernel, which no test injects, and would make every
// execution wait for the disk.

// Outcomes of a finished execution in the ledger.
const (
	OutcomeOK     = "ok"
	OutcomeErr    = "err"
	OutcomeCancel = "cancel" // the function returned because its context ended
)

// Ledger appends execution records to one file.
type Ledger struct {
	worker string
	pid    int
	mu     sync.Mutex
	f      *os.File
}

// OpenLedger opens (creates) the ledger file of one worker in dir.
func OpenLedger(dir, worker string) (*Ledger, error) {
	pid := os.Getpid()
	name := filepath.Join(dir, fmt.Sprintf("ledger-%s-%d.log", worker, pid))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: open ledger: %w", err)
	}
	return &Ledger{worker: worker, pid: pid, f: f}, nil
}

// Close closes the file.
func (l *Ledger) Close() error { return l.f.Close() }

func (l *Ledger) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString(line); err != nil {
		// A ledger that cannot be written makes the run meaningless: say so loudly.
		fmt.Fprintf(os.Stderr, "chaos: ledger write failed: %v\n", err)
	}
}

// Wrap returns fn recording its start and finish. A successful execution's result is
// replaced by "<worker>/<attempt>", so the harness can tell which execution's outcome
// the task record holds.
func (l *Ledger) Wrap(fn runtime.Func) runtime.Func {
	return func(ctx context.Context, t *runtime.Task) ([]byte, error) {
		l.write(fmt.Sprintf("S %d %s %s %d %s %d\n", time.Now().UnixNano(), t.Queue, t.ID, t.Attempt, l.worker, l.pid))
		res, err := fn(ctx, t)
		out := OutcomeOK
		switch {
		case err != nil && ctx.Err() != nil:
			out = OutcomeCancel
		case err != nil:
			out = OutcomeErr
		default:
			res = []byte(fmt.Sprintf("%s/%d", l.worker, t.Attempt))
		}
		l.write(fmt.Sprintf("F %d %s %s %d %s %d %s\n", time.Now().UnixNano(), t.Queue, t.ID, t.Attempt, l.worker, l.pid, out))
		return res, err
	}
}

// Exec is one execution read back from the ledger: its start and, when the function
// returned before its process died, its finish.
type Exec struct {
	Queue, Task string
	Attempt     int64
	Worker      string
	PID         int
	Start       time.Time
	Finish      time.Time // zero: no finish recorded (the process died or was stopped)
	Outcome     string    // "" without a finish
}

// ReadLedgers reads every ledger file in dir. A torn last line (there should be none:
// each line is one write) is counted, not fatal.
func ReadLedgers(dir string) (execs []*Exec, torn int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "ledger-*.log"))
	if err != nil {
		return nil, 0, err
	}
	type key struct {
		q, t string
		a    int64
		pid  int
	}
	open := map[key][]*Exec{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if (len(fs) != 7 || fs[0] != "S") && (len(fs) != 8 || fs[0] != "F") {
				torn++
				continue
			}
			ns, err1 := strconv.ParseInt(fs[1], 10, 64)
			att, err2 := strconv.ParseInt(fs[4], 10, 64)
			pid, err3 := strconv.Atoi(fs[6])
			if err := errors.Join(err1, err2, err3); err != nil {
				torn++
				continue
			}
			k := key{fs[2], fs[3], att, pid}
			at := time.Unix(0, ns)
			if fs[0] == "S" {
				e := &Exec{Queue: fs[2], Task: fs[3], Attempt: att, Worker: fs[5], PID: pid, Start: at}
				execs = append(execs, e)
				open[k] = append(open[k], e)
				continue
			}
			list := open[k]
			if len(list) == 0 {
				torn++ // a finish without its start
				continue
			}
			e := list[0]
			open[k] = list[1:]
			e.Finish, e.Outcome = at, fs[7]
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, 0, fmt.Errorf("chaos: read %s: %w", name, err)
		}
	}
	sort.Slice(execs, func(i, j int) bool { return execs[i].Start.Before(execs[j].Start) })
	return execs, torn, nil
}
