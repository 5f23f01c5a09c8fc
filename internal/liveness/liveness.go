// Package liveness reads worker heartbeats and computes liveness the way every observer
// must: from the heartbeat's age alone. A worker is stale when its last heartbeat is
// older than 3× its heartbeat interval; it never says so itself.
package liveness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// Heartbeat hash fields, written by the worker (the design's, plus heartbeat_interval_ms
// so observers need no configuration to judge staleness, and queues).
const (
	FieldWorkerID      = "worker_id"
	FieldHostname      = "hostname"
	FieldStartedAt     = "started_at"
	FieldLastHeartbeat = "last_heartbeat"
	FieldActiveTasks   = "active_tasks"
	FieldConcurrency   = "concurrency"
	FieldProcessed     = "tasks_processed"
	FieldFailed        = "tasks_failed"
	FieldRetried       = "tasks_retried"
	FieldStatus        = "status"
	FieldIntervalMS    = "heartbeat_interval_ms"
	FieldQueues        = "queues"
	StaleFactor        = 3
	DefaultIntervalMS  = 5000
	maxIntervalMS      = 366 * 24 * 3600 * 1000
)

// Status is what a worker says of itself in its heartbeat's status field. Redis clients
// take plain strings only (go-redis refuses a named string type): write string(s).
type Status string

// Self-reported statuses.
const (
	Starting Status = "starting"
	Ready    Status = "ready" // running, nothing in flight
	Busy     Status = "busy"  // running, something in flight
	Draining Status = "draining"
	Stopped  Status = "stopped"
)

// Liveness is what an observer judges of a worker from its heartbeat (Judge); a
// worker never writes it.
type Liveness string

// Liveness as an observer computes it.
const (
	Live  Liveness = "live"
	Stale Liveness = "stale"
	// Gone: the worker reported stopped (a clean exit); its record lingers until expiry.
	Gone Liveness = "stopped"
)

// Worker is a heartbeat record with its computed liveness.
type Worker struct {
	ID            string    `json:"worker_id"`
	Hostname      string    `json:"hostname"`
	Status        Status    `json:"status"`
	Liveness      Liveness  `json:"liveness"`
	StartedAt     time.Time `json:"started_at"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Age           float64   `json:"heartbeat_age_s"`
	ActiveTasks   int64     `json:"active_tasks"`
	Concurrency   int64     `json:"concurrency"`
	Processed     int64     `json:"tasks_processed"`
	Failed        int64     `json:"tasks_failed"`
	Retried       int64     `json:"tasks_retried"`
	IntervalMS    int64     `json:"heartbeat_interval_ms"`
	Queues        string    `json:"queues"`
}

// Decode turns a heartbeat hash into a Worker judged at now.
func Decode(id string, h map[string]string, now time.Time) Worker {
	w := Worker{ID: id, Hostname: h[FieldHostname], Status: Status(h[FieldStatus]), Queues: h[FieldQueues]}
	if v := h[FieldWorkerID]; v != "" {
		w.ID = v
	}
	w.StartedAt = msTime(h[FieldStartedAt])
	w.LastHeartbeat = msTime(h[FieldLastHeartbeat])
	w.ActiveTasks = atoi(h[FieldActiveTasks])
	w.Concurrency = atoi(h[FieldConcurrency])
	w.Processed = atoi(h[FieldProcessed])
	w.Failed = atoi(h[FieldFailed])
	w.Retried = atoi(h[FieldRetried])
	w.IntervalMS = atoi(h[FieldIntervalMS])
	w.Liveness = Judge(w.Status, w.LastHeartbeat, w.IntervalMS, now)
	if !w.LastHeartbeat.IsZero() {
		w.Age = now.Sub(w.LastHeartbeat).Seconds()
	}
	return w
}

// Judge computes liveness from the heartbeat age alone (and a clean stop).
func Judge(status Status, last time.Time, intervalMS int64, now time.Time) Liveness {
	if intervalMS <= 0 {
		intervalMS = DefaultIntervalMS
	}
	// A heartbeat hash is anyone's to write: cap the interval (a year) so that 3× it in
	// nanoseconds cannot overflow and wrap to a small or negative duration.
	intervalMS = min(intervalMS, maxIntervalMS)
	if last.IsZero() || now.Sub(last) > time.Duration(StaleFactor*intervalMS)*time.Millisecond {
		return Stale
	}
	if status == Stopped {
		return Gone
	}
	return Live
}

// List reads every worker in the workers set, in one pipelined round trip after the
// set is read. Ids whose hash has expired are reported stale with no fields.
func List(ctx context.Context, c redis.UniversalClient, ks keys.Space, now time.Time) ([]Worker, error) {
	ids, err := c.SMembers(ctx, ks.Workers()).Result()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, ks.Worker(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read workers: %w", err)
	}
	out := make([]Worker, 0, len(ids))
	for i, id := range ids {
		out = append(out, Decode(id, cmds[i].Val(), now))
	}
	return out, nil
}

func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0 // out of range too: ParseInt would return the closest bound
	}
	return n
}

func msTime(s string) time.Time {
	n := atoi(s)
	if n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Prune removes from the workers set the ids whose heartbeat hash has expired (workers
// gone for more than 3× their interval) and returns how many it removed. The scheduler
// leader runs it now and then, so the set does not grow with every pod ever started.
func Prune(ctx context.Context, c redis.UniversalClient, ks keys.Space) (int, error) {
	ids, err := c.SMembers(ctx, ks.Workers()).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	cmds := make([]*redis.IntCmd, len(ids))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Exists(ctx, ks.Worker(id))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var gone []any
	for i, id := range ids {
		if cmds[i].Val() == 0 {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	return len(gone), c.SRem(ctx, ks.Workers(), gone...).Err()
}
