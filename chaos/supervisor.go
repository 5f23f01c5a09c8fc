package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one worker process.
type proc struct {
	slot, gen int
	id        string
	cmd       *exec.Cmd
	log       string
	exited    chan struct{}
	exitErr   error

	mu       sync.Mutex
	expected bool // the harness killed or terminated it
	frozen   bool
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) expect() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
}

// supervisor starts, signals and restarts the worker processes.
type supervisor struct {
	argv []string
	env  []string // common environment (the worker id is added per process)
	dir  string
	id   string // run id, part of every worker id

	mu      sync.Mutex
	procs   map[int]*proc // by slot: the current process
	all     []*proc
	crashes []string
}

func (s *supervisor) start(slot int, extra ...string) (*proc, error) {
	s.mu.Lock()
	gen := 0
	if old := s.procs[slot]; old != nil {
		gen = old.gen + 1
	}
	s.mu.Unlock()
	id := fmt.Sprintf("%s-w%d-%d", s.id, slot, gen)
	logName := filepath.Join(s.dir, "worker-"+id+".log")
	lf, err := os.Create(logName)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	env := append(os.Environ(), s.env...)
	env = append(env, extra...)
	cmd.Env = append(env, "DTQ_WORKER_ID="+id, EnvWorker+"=1")
	cmd.Stdout, cmd.Stderr = lf, lf
	// The workers die with the harness, even when the harness is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("chaos: start worker: %w", err)
	}
	p := &proc{slot: slot, gen: gen, id: id, cmd: cmd, log: logName, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		_ = lf.Close()
		p.mu.Lock()
		expected := p.expected
		p.mu.Unlock()
		if !expected {
			s.mu.Lock()
			s.crashes = append(s.crashes, fmt.Sprintf("worker %s (pid %d) exited on its own: %v; log: %s", id, cmd.Process.Pid, p.exitErr, tailFile(logName, 5)))
			s.mu.Unlock()
		}
		close(p.exited)
	}()
	s.mu.Lock()
	s.procs[slot] = p
	s.all = append(s.all, p)
	s.mu.Unlock()
	return p, nil
}

// current returns the live processes, by slot.
func (s *supervisor) current() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].slot < out[j].slot })
	return out
}

func (s *supervisor) byID(id string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// unfrozen is the current processes but a frozen one, so that a kill or a SIGTERM does
// not take the process a freeze fault is holding (its resumed, fenced completion is
// what that fault is for); all of them when every one is frozen.
func (s *supervisor) unfrozen() []*proc {
	all := s.current()
	out := make([]*proc, 0, len(all))
	for _, p := range all {
		if s.running(p.id) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// running reports whether the worker id is a current process that has neither exited
// nor is frozen.
func (s *supervisor) running(id string) bool {
	p := s.byID(id)
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.frozen
}

// kill SIGKILLs p and waits until it is gone.
func (s *supervisor) kill(p *proc) {
	p.expect()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// term SIGTERMs p and waits up to limit for it to drain and exit; it reports the exit
// error (nil: exit code 0).
func (s *supervisor) term(p *proc, limit time.Duration) error {
	p.expect()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.exitErr
	case <-t.C:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("worker %s did not exit within %s of SIGTERM", p.id, limit)
	}
}

func (s *supervisor) freeze(p *proc) {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
}

func (s *supervisor) thaw(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
}

// stopAll drains every live process; failures to exit cleanly are crashes.
func (s *supervisor) stopAll(limit time.Duration) {
	var wg sync.WaitGroup
	for _, p := range s.current() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.term(p, limit); err != nil {
				s.mu.Lock()
				s.crashes = append(s.crashes, fmt.Sprintf("worker %s at the end: %v; log: %s", p.id, err, tailFile(p.log, 5)))
				s.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// killAll is the emergency stop.
func (s *supervisor) killAll() {
	s.mu.Lock()
	list := append([]*proc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range list {
		select {
		case <-p.exited:
		default:
			p.expect()
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	}
}

// scanLogs counts data races and panics reported by any worker process.
func (s *supervisor) scanLogs() (races int, problems []string) {
	s.mu.Lock()
	list := append([]*proc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range list {
		b, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		text := string(b)
		if n := strings.Count(text, "WARNING: DATA RACE"); n > 0 {
			races += n
			problems = append(problems, fmt.Sprintf("worker %s: %d data race reports (%s)", p.id, n, p.log))
		}
		for _, bad := range []string{"panic: ", "fatal error: "} {
			if i := strings.Index(text, bad); i >= 0 {
				problems = append(problems, fmt.Sprintf("worker %s: %s", p.id, firstLine(text[i:])))
			}
		}
	}
	return races, problems
}

func (s *supervisor) crashList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.crashes...)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func tailFile(name string, n int) string {
	b, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	return lastLines(string(b), n)
}
