package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// worker is one dtq worker process.
type worker struct {
	cmd    *exec.Cmd
	port   int
	exit   chan error
	execAt time.Time // just before the exec: what start-up figures count from
}

// startWorker execs `dtq worker` with the run's prefix and extra environment.
func (e *benchEnv) startWorker(prefix string, env ...string) (*worker, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.dtq, "worker")
	cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+e.url, "DTQ_KEY_PREFIX="+prefix, "PORT="+strconv.Itoa(port),
		"DTQ_LOG_LEVEL=error", "DTQ_LOG_FORMAT=text")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	execAt := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, port: port, exit: make(chan error, 1), execAt: execAt}
	go func() { w.exit <- cmd.Wait() }()
	return w, nil
}

// ready polls /readyz until it answers 200 or d passes.
func (w *worker) ready(d time.Duration) error {
	deadline := time.Now().Add(d)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", w.port)
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	return errors.New("worker not ready in time")
}

// metric reads one sample of the worker's /metrics (the first line starting with name).
func (w *worker) metric(name string) (float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", w.port))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// stop sends SIGTERM and waits for the exit.
func (w *worker) stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.exit:
		return err
	case <-time.After(2 * time.Minute):
		_ = w.cmd.Process.Kill()
		return errors.New("worker did not exit within 2 minutes of SIGTERM")
	}
}

func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exit
}
