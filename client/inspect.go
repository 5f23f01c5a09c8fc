package client

import (
	"context"
	"fmt"
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
	// DeadTrimmed counts the dead tasks the scheduler leader deleted beyond the retention
	// bounds (DTQ_DEAD_MAX, DTQ_DEAD_TTL_S), ever (PREFIX:{Q}:stats, field dead_trimmed).
	DeadTrimmed int64 `json:"dead_trimmed"`
	// Cron counts the periodic entries of this queue that are not paused (dtq cron list).
	Cron int64 `json:"cron"`
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
	var scheduled *redis.IntCmd
	var paused *redis.IntCmd
	var trimmed *redis.StringCmd
	var cron *redis.IntCmd
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		scheduled = p.ZCard(ctx, q.Schedule())
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
	info := &QueueInfo{Queue: name, Paused: paused.Val() == 1, Scheduled: scheduled.Val(), DueNow: st[0].DueNow, Dead: st[0].Dead,
		DeadTrimmed: nTrimmed, Cron: cron.Val()}
	for p := keys.MaxPriority; p >= 0; p-- {
		b := st[0].Band[p]
		info.Priorities = append(info.Priorities, BandInfo{Priority: p, Lag: b.Lag, Pending: b.Pending})
		info.Lag = queuestat.Add(info.Lag, b.Lag)
		info.Pending = queuestat.Add(info.Pending, b.Pending)
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
