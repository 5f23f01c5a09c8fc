package chaos

import (
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
	"time"
)

// redisServer is a redis-server the harness owns, so it can kill and restart it: AOF on,
// appendfsync always, so every write Redis acknowledged survives a SIGKILL.
type redisServer struct {
	port int
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("chaos: redis-server is not on PATH (apt-get install -y redis-server)")
	}
	// A free port can be taken by someone else between our probe and redis-server's
	// bind: try a few.
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		s := &redisServer{port: port, dir: dir, args: []string{bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis.log")}}
		err = s.launch()
		if err == nil {
			return s, nil
		}
		if try == 4 {
			return nil, err
		}
	}
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) launch() error {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pid, ok := serverPID(s.addr()); ok {
			if pid == cmd.Process.Pid {
				return nil
			}
			_ = cmd.Process.Kill() // another redis-server holds the port
			<-done
			return fmt.Errorf("chaos: port %d is taken by another redis-server (pid %d)", s.port, pid)
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("chaos: redis-server exited at start: %s", lastLines(string(log), 5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return errors.New("chaos: redis-server did not answer within 30s")
		}
	}
}

// serverPID returns the process id of the Redis answering on addr, once it serves
// (while it replays its AOF it answers -LOADING, which does not count).
func serverPID(addr string) (int, bool) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, false
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(b.String(), "process_id:") || !strings.Contains(b.String()[strings.Index(b.String(), "process_id:"):], "\r\n") {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil || strings.HasPrefix(b.String(), "-") {
			return 0, false
		}
	}
	text := b.String()
	i := strings.Index(text, "process_id:") + len("process_id:")
	pid, err := strconv.Atoi(strings.TrimSpace(text[i : i+strings.Index(text[i:], "\r\n")]))
	return pid, err == nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *redisServer) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

func (s *redisServer) stop() { s.kill() }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
