package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/lua"
)

// envFloorReader set to a key prefix makes this binary run the latency floor's reader
// (maybeFloorReader) instead of its usual work.
const envFloorReader = "DTQ_BENCH_FLOOR_READER"

// latencyFloor measures, on the same Redis and with the same gaps, what the design's
// idle pickup costs with no worker logic: in another idle process, as a worker is, a
// claim that finds nothing registers for a hand-off, then a blocking XREADGROUP over
// the queue's bands and its inbox waits; the client's enqueue script starts the task
// for it and the read returns it. The time is taken when the read's reply is in (or,
// when the enqueue found no registration, when the claim of the delivered entry
// answers). A dtq worker makes exactly these round trips before a task starts; the gap
// between this floor and the worker's figure is the worker's own part.
func latencyFloor(ctx context.Context, e *benchEnv, o options, n int) (p50, p99 float64, err error) {
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	q := keys.New(prefix).Queue(benchQueue)
	for b := 0; b <= keys.MaxPriority; b++ {
		if err := e.rdb.XGroupCreateMkStream(ctx, q.Stream(b), keys.Group, "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return 0, 0, err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envFloorReader+"="+prefix, "DTQ_REDIS_URL="+e.url)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	started := make(chan int64, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			v, err := strconv.ParseInt(sc.Text(), 10, 64)
			if err != nil {
				break
			}
			started <- v
		}
		close(started)
	}()
	next := func(i int) (int64, error) {
		select {
		case at, ok := <-started:
			if !ok {
				return 0, errors.New("latency floor: the reader process ended")
			}
			return at, nil
		case <-time.After(10 * time.Second):
			return 0, fmt.Errorf("latency floor: task %d not claimed in 10 s", i)
		}
	}
	// A warm-up task: the reader is connected and blocked once it has claimed it.
	if _, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "noop"}); err != nil {
		return 0, 0, err
	}
	if _, err := next(-1); err != nil {
		return 0, 0, err
	}
	time.Sleep(o.gap)
	lat := make([]float64, 0, n)
	tick := time.Now()
	for i := 0; i < n; i++ {
		sent := time.Now().UnixNano()
		if _, _, err := c.Enqueue(ctx, client.Task{Queue: benchQueue, Function: "noop"}); err != nil {
			return 0, 0, err
		}
		at, err := next(i)
		if err != nil {
			return 0, 0, err
		}
		lat = append(lat, float64(at-sent)/1e6)
		tick = tick.Add(o.gap)
		time.Sleep(time.Until(tick))
	}
	sort.Float64s(lat)
	return round(pct(lat, 0.5), 3), round(pct(lat, 0.99), 3), nil
}

// maybeFloorReader runs the latency floor's reader and exits when this process was
// started as one: block on the queue's bands, claim what arrives, print the Unix time
// in nanoseconds at which the claim's reply came in, complete it; until killed.
func maybeFloorReader() {
	prefix := os.Getenv(envFloorReader)
	if prefix == "" {
		return
	}
	if err := floorReader(context.Background(), prefix, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "latency floor reader: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func floorReader(ctx context.Context, prefix string, w io.Writer) error {
	rdb, err := redisconn.Open(os.Getenv("DTQ_REDIS_URL"), redisconn.Options{CAFile: os.Getenv("DTQ_REDIS_CA_FILE"), PoolSize: 2})
	if err != nil {
		return err
	}
	defer rdb.Close()
	q := keys.New(prefix).Queue(benchQueue)
	streams := make([]string, 0, 2*(keys.MaxPriority+1))
	for b := keys.MaxPriority; b >= 0; b-- {
		streams = append(streams, q.Stream(b))
	}
	streams = append(streams, q.Inbox("floor"))
	for range keys.MaxPriority + 2 {
		streams = append(streams, ">")
	}
	// Its own connection for the blocking read, as a worker has (on a single node).
	read := rdb.XReadGroup
	if single, ok := rdb.(*redis.Client); ok {
		conn := single.Conn()
		defer conn.Close()
		read = conn.XReadGroup
	}
	var recv []lua.Received
	for {
		r, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "floor", NowMS: time.Now().UnixMilli(), Want: 1,
			MaxPayload: 1 << 20, RegisterUntilMS: time.Now().Add(11 * time.Second).UnixMilli(), Received: recv})
		if err != nil {
			return err
		}
		recv = nil
		started := r.Started
		if len(started) == 0 {
			res, err := read(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "floor",
				Streams: streams, Count: 1, Block: 10 * time.Second}).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return err
			}
			var d []lua.Delivered
			for _, s := range res {
				if s.Stream == q.Inbox("floor") {
					handed, hd, rs, err := lua.SplitInbox(s.Messages)
					if err != nil {
						return err
					}
					started, d, recv = append(started, handed...), append(d, hd...), append(recv, rs...)
					continue
				}
				for _, m := range s.Messages {
					d = append(d, lua.Delivered{Band: q.BandOf(s.Stream), Entry: m.ID})
				}
			}
			if len(d) > 0 {
				r, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "floor", NowMS: time.Now().UnixMilli(), Want: 1,
					MaxPayload: 1 << 20, Delivered: d, Received: recv})
				if err != nil {
					return err
				}
				recv = nil
				started = append(started, r.Started...)
			}
		}
		at := time.Now().UnixNano()
		if len(started) == 0 {
			continue
		}
		if _, err := fmt.Fprintln(w, at); err != nil {
			return err
		}
		if _, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: time.Now().UnixMilli(), KeepMS: 86400000, Items: succeeded(started), Consumer: "floor"}); err != nil {
			return err
		}
	}
}
