package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redisconn"
)

// runDemo runs the main job end to end: three worker processes, a burst of tasks across
// priorities (no-ops, echoes, sleeps, planned failures, a delayed task), a SIGKILL of
// the worker running the longest task, that task finished by a peer, and a summary.
func runDemo(args []string) int {
	fs := newFlags("demo", "demo [flags]   (starts its own redis-server unless DTQ_REDIS_URL is set)", clientEnv())
	tasks := fs.Int("tasks", 300, "tasks in the burst")
	workers := fs.Int("workers", 3, "worker processes")
	prefix := fs.String("prefix", "dtqdemo", "key prefix (the demo deletes its keys when done)")
	serve := fs.Bool("serve", false, "after the run, keep Redis, the workers and the observer up, with a trickle of tasks, until Ctrl-C")
	obsPort := fs.Int("observer-port", 8080, "port of the observer (dashboard and /api/v1) on 127.0.0.1; taken or 0: any free port")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("demo", fs) {
		return exitUsage
	}
	if *obsPort < 0 || *obsPort > 65535 {
		fmt.Fprintln(os.Stderr, "dtq demo: --observer-port must be within 0..65535")
		return exitUsage
	}
	if *workers < 2 {
		fmt.Fprintln(os.Stderr, "dtq demo: --workers must be at least 2 (one is killed)")
		return exitUsage
	}
	say := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }

	url := os.Getenv("DTQ_REDIS_URL")
	if url == "" {
		if _, err := exec.LookPath("redis-server"); err == nil {
			srv, err := startRedis()
			if err != nil {
				return fail("demo", err)
			}
			defer srv.stop()
			url = srv.url
			say("redis     started redis-server on %s (stopped when the demo ends)", srv.addr)
		} else {
			// No Redis at all: the embedded one (dtq-miniredis), for this run only.
			m, err := startEmbedded()
			if err != nil {
				return fail("demo", err)
			}
			defer m.stop()
			url = "redis://" + m.Addr()
			say("redis     no redis-server on PATH: started an embedded Redis (miniredis) on %s for this run", m.Addr())
		}
	} else {
		say("redis     using DTQ_REDIS_URL %s", redisconn.Redact(url))
	}
	rdb, err := redisconn.Open(url, redisconn.Options{CAFile: os.Getenv("DTQ_REDIS_CA_FILE"),
		DialAttempts: cliDialAttempts, HandshakeTimeout: cliHandshakeTimeout})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq demo: %s: %v\n", redisconn.Variable(err), err)
		return exitUsage
	}
	defer rdb.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	defer cleanup(rdb, *prefix)
	c := client.New(rdb, client.Options{Prefix: *prefix})

	exe, err := os.Executable()
	if err != nil {
		return fail("demo", err)
	}
	procs := map[string]*exec.Cmd{}
	var order []string
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	for i := 1; i <= *workers; i++ {
		id := fmt.Sprintf("demo-worker-%d", i)
		cmd := exec.Command(exe, "worker")
		cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+url, "DTQ_KEY_PREFIX="+*prefix, "DTQ_WORKER_ID="+id,
			"DTQ_QUEUES=default,emails", "DTQ_WORKER_CONCURRENCY=8", "DTQ_VISIBILITY_TIMEOUT_S=2",
			"DTQ_HEARTBEAT_INTERVAL_S=0.5", "DTQ_DRAIN_TIMEOUT_S=5", "DTQ_RETRY_BASE_MS=100", "DTQ_RETRY_MAX_MS=400",
			"DTQ_LOG_LEVEL=error", "PORT=0")
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fail("demo", err)
		}
		procs[id] = cmd
		order = append(order, id)
	}
	say("workers   started %d worker processes: %s", *workers, strings.Join(order, ", "))
	if obs, err := startObserver(ctx, url, *prefix, *obsPort); err != nil {
		say("observer  not started: %v", err)
	} else {
		defer obs.stop()
		actions := "actions off: set DTQ_OBSERVER_TOKEN to turn them on"
		if os.Getenv("DTQ_OBSERVER_TOKEN") != "" {
			actions = "actions on with DTQ_OBSERVER_TOKEN"
		}
		say("observer  %s  the dashboard and /api/v1 (%s)", obs.url, actions)
	}

	// The burst: the long sleep goes first so a worker is surely running it.
	start := time.Now()
	long, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "sleep", Payload: []byte(`{"ms":1500}`), Priority: 9})
	if err != nil {
		return fail("demo", err)
	}
	var burst []client.Task
	for i := 0; i < *tasks; i++ {
		t := client.Task{Queue: "default", Function: "noop", Priority: i % 10}
		switch {
		case i%50 == 7:
			t.Function, t.Payload, t.MaxRetries = "fail", []byte(`{"times":2}`), client.Retries(3)
		case i%50 == 13:
			t.Function, t.Payload, t.MaxRetries = "fail", []byte(`{"times":9}`), client.Retries(1)
		case i%10 == 3:
			t.Queue, t.Function, t.Payload = "emails", "echo", []byte(fmt.Sprintf(`{"to":"user%d@example.com"}`, i))
		case i%25 == 5:
			t.Function, t.Payload = "sleep", []byte(`{"ms":200}`)
		}
		burst = append(burst, t)
	}
	burst = append(burst, client.Task{Queue: "default", Function: "echo", Payload: []byte(`"later"`), Delay: time.Second})
	res, err := c.EnqueueMany(ctx, burst)
	if err != nil {
		return fail("demo", err)
	}
	type ref struct{ queue, id string }
	all := []ref{{"default", long}}
	for i, r := range res {
		if r.Err != nil {
			return fail("demo", r.Err)
		}
		all = append(all, ref{burst[i].Queue, r.ID})
	}
	say("enqueue   %d tasks on queues default and emails, priorities 0-9, in %s (one delayed by 1s)", len(all), time.Since(start).Round(time.Millisecond))

	// Find who runs the long task and SIGKILL it.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ti, err := c.WaitFor(wctx, "default", long, 2*time.Millisecond, client.StatusRunning, client.StatusSucceeded)
	if err != nil || ti.Status != client.StatusRunning {
		return fail("demo", fmt.Errorf("the long task never ran: %v", err))
	}
	victim := ti.Worker
	if p := procs[victim]; p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
		delete(procs, victim)
	}
	killed := time.Now()
	say("kill -9   %s while it ran task %s (attempt %d); its entry waits for the visibility timeout (2s)", victim, long, ti.Attempt)

	// Wait for everything to end.
	deadline := time.Now().Add(60 * time.Second)
	var final []*client.TaskInfo
	for {
		final = final[:0]
		done := true
		for _, r := range all {
			ti, err := c.Get(ctx, r.queue, r.id)
			if err != nil {
				return fail("demo", err)
			}
			final = append(final, ti)
			if !ti.Status.Finished() {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return fail("demo", errors.New("tasks still unfinished after 60s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	counts := map[client.Status]int{}
	retried, byWorker := 0, map[string]int{}
	for _, t := range final {
		counts[t.Status]++
		if t.Failures > 0 {
			retried++
		}
		byWorker[t.Worker]++
	}
	lt := final[0]
	say("recovered task %s finished by %s at attempt %d, %s after the kill", long, lt.Worker, lt.Attempt,
		(time.UnixMilli(lt.FinishedAt).Sub(killed)).Round(time.Millisecond))
	say("")
	say("summary")
	say("  tasks       %d in %s", len(final), elapsed.Round(time.Millisecond))
	say("  succeeded   %d", counts[client.StatusSucceeded])
	say("  dead        %d   (fail with times > max retries, kept with their last error)", counts[client.StatusDead])
	say("  retried     %d   (tasks that failed at least once)", retried)
	say("  lost        %d", len(all)-counts[client.StatusSucceeded]-counts[client.StatusDead]-counts[client.StatusCancelled])
	for _, id := range order {
		note := ""
		if id == victim {
			note = "  (killed)"
		}
		say("  %-14s ran %d%s", id, byWorker[id], note)
	}
	if counts[client.StatusSucceeded]+counts[client.StatusDead] != len(all) || lt.Status != client.StatusSucceeded || lt.Worker == victim {
		return fail("demo", errors.New("the run did not end as expected"))
	}
	for _, q := range []string{"default", "emails"} {
		qi, err := c.Queue(ctx, q)
		if err == nil && (qi.Lag != 0 || qi.Pending != 0) {
			return fail("demo", fmt.Errorf("queue %s still holds lag %d pending %d", q, qi.Lag, qi.Pending))
		}
	}
	if *serve {
		say("")
		say("serving   a trickle of tasks until Ctrl-C")
		trickle(ctx, c)
		say("stopped   the workers, the observer and the demo's keys go")
	}
	return exitOK
}

// trickle enqueues a few tasks every 200 ms, a failing one now and then, until ctx ends.
func trickle(ctx context.Context, c *client.Client) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ts := []client.Task{
			{Queue: "default", Function: "noop", Priority: i % 10},
			{Queue: "emails", Function: "echo", Payload: []byte(fmt.Sprintf(`{"to":"user%d@example.com"}`, i)), Priority: 5},
			{Queue: "default", Function: "sleep", Payload: []byte(`{"ms":300}`), Priority: 2},
		}
		if i%25 == 0 {
			ts = append(ts, client.Task{Queue: "default", Function: "fail", Payload: []byte(`{"times":9}`), MaxRetries: client.Retries(1)})
		}
		if _, err := c.EnqueueMany(ctx, ts); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "dtq demo: enqueue: %v\n", err)
		}
	}
}

type observerProc struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
}

// startObserver runs dtq-observer (next to dtq or on PATH) on 127.0.0.1:port, or any
// free port when that one is taken, and waits until it answers /readyz.
func startObserver(ctx context.Context, redisURL, prefix string, port int) (*observerProc, error) {
	bin, err := sibling(observerBinary)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+redisURL, "DTQ_KEY_PREFIX="+prefix, "PORT="+strconv.Itoa(port),
		"DTQ_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	o := &observerProc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d/", port), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(o.exited) }()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if res, err := hc.Get(o.url + "readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return o, nil
			}
		}
		if time.Now().After(deadline) {
			o.stop()
			return nil, fmt.Errorf("%s did not answer /readyz within 10s", bin)
		}
		select {
		case <-o.exited:
			return nil, fmt.Errorf("%s exited before it served", bin)
		case <-ctx.Done():
			o.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the observer: SIGTERM, then SIGKILL after 12 s.
func (o *observerProc) stop() { terminate(o.cmd, o.exited, 12*time.Second) }

// terminate sends cmd's process SIGTERM and waits for exited (closed when it has been
// waited for), sending SIGKILL if it is still running after grace.
func terminate(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// cleanup deletes the demo's keys.
func cleanup(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

type localRedis struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	url  string
}

// startRedis starts a redis-server from PATH on a free port.
func startRedis() (*localRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no DTQ_REDIS_URL and no redis-server on PATH: install it (apt-get install -y redis-server) or point DTQ_REDIS_URL at a Redis")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "dtq-demo-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &localRedis{cmd: cmd, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	r.url = "redis://" + r.addr
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", r.addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return r, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.stop()
	return nil, errors.New("redis-server did not start")
}

func (r *localRedis) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	_ = os.RemoveAll(r.dir)
}
