package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
)

// BandInfo is one priority stream of a queue.
type BandInfo struct {
	Priority int   `json:"priority"`
	Lag      int64 `json:"lag"`     // entries not yet delivered to a worker
	Pending  int64 `json:"pending"` // entries delivered and not finished (the PEL)
}

// QueueInfo is a queue's backlog.
type QueueInfo struct {
	Queue      string     `json:"queue"`
	Paused     bool       `json:"paused"`
	Priorities []BandInfo `json:"priorities"` // p9 first
	Lag        int64      `json:"lag"`
	Pending    int64      `json:"pending"`
	Scheduled  int64      `json:"scheduled"` // delayed tasks and retries waiting for their time
	DueNow     int64      `json:"due"`       // of those and of the periodic ticks, due now (a leader moves them shortly)
	Dead       int64      `json:"dead"`
	// Retrying: of Scheduled, the retries (PREFIX:{Q}:retrying).
	Retrying int64 `json:"retrying"`
	// DeadTrimmed counts the dead tasks the scheduler leader deleted beyond the retention
	// bounds (DTQ_DEAD_MAX, DTQ_DEAD_TTL_S), ever (PREFIX:{Q}:stats, field dead_trimmed).
	DeadTrimmed int64 `json:"dead_trimmed"`
	// Throughput: completions per minute over the last hour.
	Throughput *Throughput `json:"throughput,omitempty"`
	// Cron counts the periodic entries of this queue that are not paused (dtq cron list).
	Cron int64 `json:"cron"`
	// Limits: the queue's rate and concurrency limits with their current use (dtq limit).
	Limits []LimitInfo `json:"limits,omitempty"`
}

// ThroughputMinutes is how many minutes a Throughput covers.
const ThroughputMinutes = 60

// Throughput is a queue's completions per minute over the last ThroughputMinutes, as
// complete.lua counts them (PREFIX:{Q}:tp:HOUR): Processed[i] executions ended (succeeded,
// failed for a retry, or dead) in the minute starting at StartMS + i·StepS seconds, and
// Failed[i] of those that failed. The last minute is the current one, still counting.
type Throughput struct {
	StartMS   int64   `json:"start_ms"`
	StepS     int     `json:"step_s"`
	Processed []int64 `json:"processed"`
	Failed    []int64 `json:"failed"`
}

// ReadThroughput adds to p the reads of queue q's Throughput for the hour ending with
// now's minute (one or two HGETALLs) and returns what decodes them once p has run.
func ReadThroughput(ctx context.Context, p redis.Pipeliner, q keys.Queue, now time.Time) func() (*Throughput, error) {
	last := now.UnixMilli() / 60000
	first := last - ThroughputMinutes + 1
	hours := map[int64]*redis.MapStringStringCmd{}
	for _, m := range []int64{first, last} {
		h := m / 60
		if hours[h] == nil {
			hours[h] = p.HGetAll(ctx, q.Throughput(h))
		}
	}
	return func() (*Throughput, error) {
		t := &Throughput{StartMS: first * 60000, StepS: 60,
			Processed: make([]int64, ThroughputMinutes), Failed: make([]int64, ThroughputMinutes)}
		for i := range ThroughputMinutes {
			ms := (first + int64(i)) * 60000
			h, pf, ff := keys.ThroughputFields(ms)
			v, err := hours[h].Result()
			if err != nil {
				return nil, fmt.Errorf("throughput of %s: %w", q.Name, err)
			}
			// a count that does not parse (someone else's write) reads as 0
			t.Processed[i], _ = strconv.ParseInt(v[pf], 10, 64)
			t.Failed[i], _ = strconv.ParseInt(v[ff], 10, 64)
		}
		return t, nil
	}
}

// Queue reads a queue's backlog: lag and pending per priority, scheduled, due, dead, and
// the dead tasks trimmed.
func (c *Client) Queue(ctx context.Context, name string) (*QueueInfo, error) {
	if err := keys.ValidQueue(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	st, err := queuestat.Read(ctx, c.rdb, c.ks, []queuestat.Spec{{Queue: name, Bands: queuestat.AllBands}}, c.now())
	if err != nil {
		return nil, err
	}
	if st[0].Err != nil {
		return nil, st[0].Err
	}
	q := c.ks.Queue(name)
	var scheduled, retrying *redis.IntCmd
	var paused *redis.IntCmd
	var trimmed *redis.StringCmd
	var throughput func() (*Throughput, error)
	var cron *redis.IntCmd
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		scheduled = p.ZCard(ctx, q.Schedule())
		retrying = p.ZCard(ctx, q.Retrying())
		throughput = ReadThroughput(ctx, p, q, c.now())
		paused = p.Exists(ctx, q.Paused())
		trimmed = p.HGet(ctx, q.Stats(), keys.StatDeadTrimmed)
		cron = p.ZCard(ctx, q.Cron())
		return nil
	}); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("inspect %s: %w", name, err)
	}
	var nTrimmed int64
	if err := trimmed.Err(); err != redis.Nil {
		if nTrimmed, err = trimmed.Int64(); err != nil {
			return nil, fmt.Errorf("inspect %s: %s: %w", name, keys.StatDeadTrimmed, err)
		}
	}
	tp, err := throughput()
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", name, err)
	}
	if err := retrying.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: retrying: %w", name, err)
	}
	info := &QueueInfo{Queue: name, Paused: paused.Val() == 1, Scheduled: scheduled.Val(), DueNow: st[0].DueNow, Dead: st[0].Dead,
		Retrying: retrying.Val(), DeadTrimmed: nTrimmed, Throughput: tp, Cron: cron.Val()}
	for p := keys.MaxPriority; p >= 0; p-- {
		b := st[0].Band[p]
		info.Priorities = append(info.Priorities, BandInfo{Priority: p, Lag: b.Lag, Pending: b.Pending})
		info.Lag = queuestat.Add(info.Lag, b.Lag)
		info.Pending = queuestat.Add(info.Pending, b.Pending)
	}
	if info.Limits, err = c.Limits(ctx, name); err != nil {
		return nil, err
	}
	return info, nil
}

// Queues lists the queues ever enqueued to.
func (c *Client) Queues(ctx context.Context) ([]string, error) {
	return c.rdb.SMembers(ctx, c.ks.Queues()).Result()
}

// WaitFor polls a task until it reaches one of the statuses (or ctx ends) and returns it.
func (c *Client) WaitFor(ctx context.Context, queue, id string, every time.Duration, statuses ...Status) (*TaskInfo, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ti, err := c.Get(ctx, queue, id)
		if err == nil {
			for _, s := range statuses {
				if ti.Status == s {
					return ti, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, err
			}
			return ti, ctx.Err()
		case <-t.C:
		}
	}
}
