package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	e.logf("building ./cmd/dtq and ./cmd/dtq-scaler")
	// Static and stripped, as the image builds them: how the binary is linked and its
	// size show in its start time.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp+"/",
		"github.com/dtq/dtq/cmd/dtq", "github.com/dtq/dtq/cmd/dtq-scaler")
	build.Env = append(os.Environ(), staticBuild)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		e.close()
		return nil, fmt.Errorf("go build ./cmd/dtq ./cmd/dtq-scaler: %w", err)
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

// cpuTime is user+system CPU time of a process so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// rss is the resident set of a process in MB.
func rss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
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

// progress draws a bar on stderr when stderr is a terminal.
type progress struct {
	label string
	total int64
	on    bool
	last  time.Time
}

func newProgress(label string, total int64) *progress {
	st, err := os.Stderr.Stat()
	return &progress{label: label, total: total, on: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) set(done int64) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond && done < p.total {
		return
	}
	p.last = time.Now()
	const width = 30
	k := int(done * width / max(p.total, 1))
	fmt.Fprintf(os.Stderr, "\r%-12s [%s%s] %d/%d", p.label, strings.Repeat("#", k), strings.Repeat(".", width-k), done, p.total)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

// keyspaceNotifications turns on keyspace notifications of hash commands for the
// benchmark's Redis, and returns how to put the setting back and whether it could. Only
// on a single Redis: on a cluster a notification comes from the node holding the key.
func (e *benchEnv) keyspaceNotifications(ctx context.Context) (restore func(), ok bool) {
	if _, single := e.rdb.(*redis.Client); !single {
		return func() {}, false
	}
	was, err := e.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return func() {}, false
	}
	old := was["notify-keyspace-events"]
	// h: the claim's and the completion's HSET; g: the completion's PEXPIRE of a task
	// that succeeded, the last write of that script.
	if err := e.rdb.ConfigSet(ctx, "notify-keyspace-events", "Khg").Err(); err != nil {
		return func() {}, false
	}
	return func() { _ = e.rdb.ConfigSet(context.Background(), "notify-keyspace-events", old).Err() }, true
}

// finishWatch waits for one task's outcome to be recorded.
type finishWatch struct {
	ctx    context.Context
	q      keys.Queue
	id     string
	rdb    redis.UniversalClient
	sub    *redis.PubSub // nil: poll the band's stream instead
	cancel context.CancelFunc
}

// watchFinish starts watching task id of q; call it before the worker is started.
func (e *benchEnv) watchFinish(ctx context.Context, q keys.Queue, id string, notify bool) (*finishWatch, error) {
	f := &finishWatch{q: q, id: id, rdb: e.rdb}
	f.ctx, f.cancel = context.WithCancel(ctx)
	if notify {
		f.sub = e.rdb.Subscribe(f.ctx, fmt.Sprintf("__keyspace@%d__:%s", e.db, q.Task(id)))
		if _, err := f.sub.Receive(f.ctx); err != nil { // the subscription is confirmed
			f.stop()
			return nil, err
		}
	}
	return f, nil
}

func (f *finishWatch) stop() {
	if f.sub != nil {
		_ = f.sub.Close()
	}
	f.cancel()
}

// wait returns when the task's status turned final: the time the notification of the
// write that made it so arrived, or, polling, the time a poll saw its entry gone.
func (f *finishWatch) wait(limit time.Duration) (time.Time, error) {
	defer f.stop()
	if f.sub == nil {
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
			n, err := f.rdb.XLen(f.ctx, f.q.Stream(0)).Result()
			if err != nil {
				return time.Time{}, err
			}
			if n == 0 {
				return time.Now(), nil
			}
			time.Sleep(100 * time.Microsecond)
		}
		return time.Time{}, errors.New("task not finished in time")
	}
	// A notification is timed when it is read; the status read that follows may already
	// see a later write (the claim's HSET is read, the task has succeeded meanwhile), so
	// a success is timed by the completion's own last write, its PEXPIRE ("expire"),
	// when one comes (a worker keeping results forever sends none).
	ch := f.sub.Channel()
	t := time.NewTimer(limit)
	defer t.Stop()
	var succeeded time.Time
	var grace <-chan time.Time
	for {
		select {
		case m := <-ch:
			at := time.Now()
			if m.Payload == "expire" {
				return at, nil
			}
			if !succeeded.IsZero() {
				continue
			}
			st, err := f.rdb.HGet(f.ctx, f.q.Task(f.id), "status").Result()
			if err != nil {
				return time.Time{}, err
			}
			switch st {
			case "succeeded":
				succeeded, grace = at, time.After(time.Second)
			case "dead", "retrying":
				return at, nil
			}
		case <-grace:
			return succeeded, nil
		case <-t.C:
			return time.Time{}, errors.New("task not finished in time")
		}
	}
}
