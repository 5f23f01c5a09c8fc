// Package redistest starts real redis-server processes for tests: one shared server
// per test binary (tests isolate themselves by key prefix) and dedicated servers for
// tests that kill, restart or reconfigure Redis.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Server is one redis-server process.
type Server struct {
	Port int
	Dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Options change how a dedicated server starts.
type Options struct {
	AOF  bool     // appendonly yes, appendfsync always: survives kill -9
	Args []string // extra redis-server arguments, e.g. "--requirepass", "x"
}

// Start starts a dedicated redis-server on a free port and stops it when t ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := start(t.TempDir(), o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(dir string, o Options) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not on PATH (apt-get install -y redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}
	if o.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, o.Args...)
	s := &Server{Port: port, Dir: dir, args: args}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) launch() error {
	cmd := exec.Command("redis-server", s.args...)
	// The server dies with the test binary, even when the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 64)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			_ = c.Close()
			// +PONG, or -NOAUTH when a password is set: either way it answers.
			if n > 0 && (strings.HasPrefix(string(buf[:n]), "+PONG") || strings.HasPrefix(string(buf[:n]), "-NOAUTH")) {
				return nil
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server exited at start: %s", tail(string(log)))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return errors.New("redis-server did not answer within 10s")
		}
	}
}

func tail(s string) string {
	if len(s) > 600 {
		return s[len(s)-600:]
	}
	return s
}

// Kill sends SIGKILL to the server and waits until its port is closed.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	for i := 0; i < 500; i++ {
		c, err := net.DialTimeout("tcp", s.Addr(), 50*time.Millisecond)
		if err != nil {
			return
		}
		_ = c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port and directory (AOF is replayed).
func (s *Server) Restart() error { return s.launch() }

// Stop kills the server; safe to call twice.
func (s *Server) Stop() { s.Kill() }

// Client returns a client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	sharedDir  string
)

// Shared returns the server shared by all tests of this test binary, started on first
// use and stopped by Main. Tests isolate themselves with Prefix. DTQ_TEST_REDIS_ADDR
// (host:port) points the shared server at one already running instead (for profiling
// Redis itself, e.g. under valgrind); it is never stopped.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		if addr := os.Getenv("DTQ_TEST_REDIS_ADDR"); addr != "" {
			_, p, err := net.SplitHostPort(addr)
			port, _ := strconv.Atoi(p)
			shared, sharedErr = &Server{Port: port}, err
			return
		}
		sharedDir, sharedErr = os.MkdirTemp("", "redistest-")
		if sharedErr == nil {
			shared, sharedErr = start(sharedDir, Options{})
		}
	})
	if sharedErr != nil {
		t.Fatalf("redistest: %v", sharedErr)
	}
	return shared
}

// Main runs the tests, stops the shared server and fails on leaked goroutines.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil && shared.cmd != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// redialEnds bounds how long a closed client's background redial may outlive its
// Close: go-redis probes a pool whose dials all failed once a second
// (pool.(*ConnPool).tryDial), and the probe sees the Close only after its sleep. A
// test that killed its server and closed its client leaves that goroutine for up to a
// second; goleak's own retries wait well under that.
const redialEnds = 3 * time.Second

// findLeaks is goleak.Find, asked again until redialEnds has passed: a goroutine
// still there after that is a leak.
func findLeaks() error {
	deadline := time.Now().Add(redialEnds)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Prefix returns a key prefix no other test uses.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_", "{", "", "}", "", ":", "").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "t-" + name + "-" + hex.EncodeToString(b[:])
}

// Ping waits until c answers or ctx ends.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
