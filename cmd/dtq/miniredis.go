package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// miniredisBinary is the demo's embedded Redis (cmd/dtq-miniredis), next to dtq or on
// PATH. It is a binary of its own so that dtq, started on every scale-up of the
// workers, does not link miniredis and its Lua interpreter, whose package initialisers
// ran at every start.
const miniredisBinary = "dtq-miniredis"

// embeddedRedis is a running dtq-miniredis.
type embeddedRedis struct {
	cmd    *exec.Cmd
	addr   string
	tmp    string // a directory dtq-miniredis was built into for this run, or ""
	exited chan struct{}
}

// startEmbedded starts dtq-miniredis and waits for its address. Without the binary
// next to dtq or on PATH, in the dtq source tree (go run ./cmd/dtq demo) it builds it
// there first.
func startEmbedded() (*embeddedRedis, error) {
	r := &embeddedRedis{exited: make(chan struct{})}
	bin, err := sibling(miniredisBinary)
	if err != nil {
		if bin, r.tmp, err = buildMiniredis(); err != nil {
			return nil, fmt.Errorf("no redis-server on PATH, and %w", err)
		}
	}
	r.cmd = exec.Command(bin)
	r.cmd.Stderr = os.Stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		r.cleanup()
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		r.cleanup()
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	select {
	case a := <-addr:
		if a != "" {
			r.addr = a
			return r, nil
		}
		r.stop()
		return nil, fmt.Errorf("%s exited without serving", bin)
	case <-time.After(10 * time.Second):
		r.stop()
		return nil, fmt.Errorf("%s printed no address within 10s", bin)
	}
}

// Addr is where it listens (host:port).
func (r *embeddedRedis) Addr() string { return r.addr }

// stop ends it (SIGTERM, then SIGKILL after 5 s) and removes what was built for it.
func (r *embeddedRedis) stop() {
	terminate(r.cmd, r.exited, 5*time.Second)
	r.cleanup()
}

func (r *embeddedRedis) cleanup() {
	if r.tmp != "" {
		_ = os.RemoveAll(r.tmp)
	}
}

// buildMiniredis builds dtq-miniredis from the dtq source tree that holds the working
// directory into a temporary directory, and returns the binary and the directory.
func buildMiniredis() (bin, dir string, err error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return "", "", fmt.Errorf("%s is neither next to dtq nor on PATH (go build -o DIR ./cmd/%s), and %v", miniredisBinary, miniredisBinary, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("%s is neither next to dtq nor on PATH, and the Go toolchain is not on PATH to build it", miniredisBinary)
	}
	dir, err = os.MkdirTemp("", "dtq-demo-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, miniredisBinary)
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/"+miniredisBinary)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", errors.New("building " + miniredisBinary + ": " + strings.TrimSpace(string(out)))
	}
	return bin, dir, nil
}
