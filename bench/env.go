package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redisconn"
)

// benchEnv is what every mode runs against: one Redis, the dtq binary.
type benchEnv struct {
	url      string
	addr     string // host:port, for the peer
	db       int    // database number of the URL
	rdb      redis.UniversalClient
	redisPID int
	dtq      string // path of the dtq binary built for this run
	tmp      string
	own      *exec.Cmd // the redis-server bench started, if any
	verbose  bool
	seq      int
}

func setupEnv(ctx context.Context, o options) (*benchEnv, error) {
	tmp, err := os.MkdirTemp("", "dtq-bench-")
	if err != nil {
		return nil, err
	}
	e := &benchEnv{tmp: tmp, verbose: o.verbose}
	e.url = os.Getenv("DTQ_REDIS_URL")
	if e.url == "" {
		if err := e.startRedis(); err != nil {
			e.close()
			return nil, err
		}
	}
	e.rdb, err = redisconn.Open(e.url, redisconn.Options{CAFile: os.Getenv("DTQ_REDIS_CA_FILE"), PoolSize: 64})
	if err != nil {
		e.close()
		return nil, err
	}
	if opt, err := redis.ParseURL(e.url); err == nil {
		e.addr, e.db = opt.Addr, opt.DB
	}
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		e.close()
		return nil, fmt.Errorf("redis at %s: %w", redisconn.Redact(e.url), err)
	}
	if isLocal(e.addr) { // CPU time is read from /proc: only for a Redis on this machine
		e.redisPID, _ = strconv.Atoi(infoField(info, "process_id"))
	}
	if dir := os.Getenv("DTQ_BENCH_BIN"); dir != "" {
		// binaries built beforehand (to compare two builds of dtq)
		e.dtq = filepath.Join(dir, "dtq")
		if _, err := os.Stat(e.dtq); err != nil {
			e.close()
			return nil, fmt.Errorf("DTQ_BENCH_BIN: %w", err)
		}
		return e, nil
	}
	e.dtq = filepath.Join(tmp, "dtq")
	e.logf("building ./cmd/dtq, ./cmd/dtq-scaler and ./cmd/dtq-observer")
	// Static and stripped, as the image builds them: how the binary is linked and its
	// size show in its start time.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp+"/",
		"github.com/dtq/dtq/cmd/dtq", "github.com/dtq/dtq/cmd/dtq-scaler", "github.com/dtq/dtq/cmd/dtq-observer")
	build.Env = append(os.Environ(), staticBuild)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		e.close()
		return nil, fmt.Errorf("go build ./cmd/dtq ./cmd/dtq-scaler ./cmd/dtq-observer: %w", err)
	}
	return e, nil
}

// staticBuild is how dtq and the peer are built for the benchmarks: without cgo, a
// static binary (a dynamically linked one spends a millisecond or two in the loader
// before main).
const staticBuild = "CGO_ENABLED=0"

func isLocal(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	return err == nil && (h == "127.0.0.1" || h == "localhost" || h == "::1")
}

func (e *benchEnv) logf(f string, a ...any) {
	if e.verbose {
		fmt.Fprintf(os.Stderr, "bench: "+f+"\n", a...)
	}
}

func (e *benchEnv) startRedis() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("DTQ_REDIS_URL is not set and redis-server is not on PATH (apt-get install -y redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	e.addr = fmt.Sprintf("127.0.0.1:%d", port)
	e.url = "redis://" + e.addr
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", e.tmp, "--logfile", filepath.Join(e.tmp, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.own = cmd
	for i := 0; i < 500; i++ {
		if c, err := net.DialTimeout("tcp", e.addr, 50*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("redis-server did not start")
}

func (e *benchEnv) close() {
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	if e.own != nil {
		_ = e.own.Process.Kill()
		_ = e.own.Wait()
	}
	_ = os.RemoveAll(e.tmp)
}

// prefix returns a fresh key prefix for one run; drop deletes its keys.
func (e *benchEnv) prefix() string {
	e.seq++
	return fmt.Sprintf("bench%d-%d", os.Getpid(), e.seq)
}

func (e *benchEnv) drop(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := e.rdb.Scan(ctx, 0, prefix+":*", 5000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) >= 1000 {
			e.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		e.rdb.Unlink(ctx, batch...)
	}
}

func (e *benchEnv) client(prefix string) *client.Client {
	return client.New(e.rdb, client.Options{Prefix: prefix})
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (e *benchEnv) commands(ctx context.Context) int64 {
	info, err := e.rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(infoField(info, "total_commands_processed"), 10, 64)
	return n
}

// backlog is the number of entries in every band of queue (undelivered + pending).
func (e *benchEnv) backlog(ctx context.Context, prefix, queue string) (int64, error) {
	q := keys.New(prefix).Queue(queue)
	p := e.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, keys.Bands)
	for i := range cmds {
		cmds[i] = p.XLen(ctx, q.Stream(i))
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
