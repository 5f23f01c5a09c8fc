package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// benchQueue is the queue every mode's tasks go to.
const benchQueue = "default"

// enqueueNoops enqueues n no-op tasks in pipelined batches from a few goroutines and
// returns their ids and the time it took.
func enqueueNoops(ctx context.Context, c *client.Client, n int, fn string, payload func(i int) []byte) ([]string, time.Duration, error) {
	const batch, senders = 500, 4
	ids := make([]string, n)
	var next int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	pr := newProgress("enqueue", int64(n))
	start := time.Now()
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				lo := int(next)
				next += batch
				mu.Unlock()
				if lo >= n || firstErr != nil {
					return
				}
				hi := min(lo+batch, n)
				ts := make([]client.Task, hi-lo)
				for i := range ts {
					ts[i] = client.Task{Queue: benchQueue, Function: fn}
					if payload != nil {
						ts[i].Payload = payload(lo + i)
					}
				}
				res, err := c.EnqueueMany(ctx, ts)
				if err == nil {
					for i, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
						ids[lo+i] = r.ID
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				pr.set(int64(hi))
			}
		}()
	}
	wg.Wait()
	pr.done()
	return ids, time.Since(start), firstErr
}

// statuses reads the status of every task in pipelined batches.
func statuses(ctx context.Context, rdb redis.UniversalClient, prefix string, ids []string) (map[string]int, error) {
	recs, err := recordFields(ctx, rdb, prefix, ids, "status")
	if err != nil {
		return nil, err
	}
	return tally(recs, 0), nil
}

// tally counts the values of column col of recs (recordFields's rows).
func tally(recs [][]string, col int) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[r[col]]++
	}
	return out
}

// recordFields reads the fields of the record of each task of ids, one row a task with
// a value a field ("" where the record has none), in pipelines of 2 000 HMGETs.
func recordFields(ctx context.Context, rdb redis.UniversalClient, prefix string, ids []string, fields ...string) ([][]string, error) {
	q := keys.New(prefix).Queue(benchQueue)
	out := make([][]string, 0, len(ids))
	for lo := 0; lo < len(ids); lo += 2000 {
		hi := min(lo+2000, len(ids))
		p := rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, hi-lo)
		for i := lo; i < hi; i++ {
			cmds[i-lo] = p.HMGet(ctx, q.Task(ids[i]), fields...)
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for _, c := range cmds {
			row := make([]string, len(fields))
			for j, v := range c.Val() {
				row[j], _ = v.(string) // nil: no such field
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// waitDrained polls the queue's backlog until it is empty, every drainPoll: it says
// when the run is over, not when it ended (lastFinished reads that from the records).
func waitDrained(ctx context.Context, e *benchEnv, prefix string, total int64, limit time.Duration) (time.Time, error) {
	pr := newProgress("process", total)
	defer pr.done()
	deadline := time.Now().Add(limit)
	for {
		n, err := e.backlog(ctx, prefix, benchQueue)
		if err != nil {
			return time.Time{}, err
		}
		if n == 0 {
			return time.Now(), nil
		}
		pr.set(total - n)
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d tasks still queued after %s", n, limit)
		}
		time.Sleep(drainPoll)
	}
}

// drainPoll is how often waitDrained looks at the backlog. Looking every millisecond
// sent ten XLENs a millisecond to the Redis being measured (18 000 over a run of
// 100 000 tasks, 0.18 commands a task) and woke the bench a thousand times a second on
// the cores the worker and Redis share: load that neither the ceiling nor the peer's
// run (which counts its handler's calls in-process) puts beside what it measures.
const drainPoll = 20 * time.Millisecond

// lastFinished is the latest finished_at (unix ms, written by the completion that
// recorded the outcome) in column col of recs, the records of the tasks of ids: when the
// last outcome was recorded.
func lastFinished(ids []string, recs [][]string, col int) (time.Time, error) {
	var last int64
	for i, r := range recs {
		ms, err := strconv.ParseInt(r[col], 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("task %s: finished_at %q: not a time", ids[i], r[col])
		}
		last = max(last, ms)
	}
	return time.UnixMilli(last), nil
}

// waitStatus polls each task of ids until its status is status, for at most limit in all.
func waitStatus(ctx context.Context, c *client.Client, ids []string, status client.Status, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, id := range ids {
		for {
			t, err := c.Get(ctx, benchQueue, id)
			if err == nil && t.Status == status {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("task %s did not reach %s", id, status)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	return nil
}

// succeeded is the outcome of started no-op tasks that ran: each succeeded.
func succeeded(started []lua.Started) []lua.Completion {
	items := make([]lua.Completion, len(started))
	for i, s := range started {
		items[i] = lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Unique: s.HasUnique, Outcome: lua.Succeeded, Slots: s.Slots, Epoch: s.Epoch}
	}
	return items
}
