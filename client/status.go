package client

import (
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
)

// Status is a task's status: the status field of its record, as dtq's scripts write it.
// docs/data-model.md has the transitions and the script that makes each.
type Status = keys.Status

// Task statuses.
const (
	StatusScheduled = keys.StatusScheduled // delayed: in the schedule until its time
	StatusQueued    = keys.StatusQueued    // on its band's stream, waiting for a worker
	StatusRunning   = keys.StatusRunning   // started by a worker
	StatusRetrying  = keys.StatusRetrying  // failed with retries left: in the schedule until the retry
	StatusSucceeded = keys.StatusSucceeded // final
	StatusDead      = keys.StatusDead      // failed for good (or refused at claim); Requeue starts it again
	StatusCancelled = keys.StatusCancelled // final
)

// Statuses lists every task status, in the order a task goes through them.
var Statuses = []Status{StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
	StatusSucceeded, StatusDead, StatusCancelled}

// WorkerStatus is what a worker says of itself in its heartbeat.
type WorkerStatus string

// Worker statuses.
const (
	WorkerStarting = WorkerStatus(liveness.Starting)
	WorkerReady    = WorkerStatus(liveness.Ready) // nothing running
	WorkerBusy     = WorkerStatus(liveness.Busy)  // running tasks
	WorkerDraining = WorkerStatus(liveness.Draining)
	WorkerStopped  = WorkerStatus(liveness.Stopped)
)

// Liveness is a worker's liveness, computed by the reader from the heartbeat's age
// alone (and a clean stop); a worker never reports it.
type Liveness string

// Liveness values.
const (
	// LivenessLive: a heartbeat no older than 3× the worker's heartbeat interval.
	LivenessLive = Liveness(liveness.Live)
	// LivenessStale: no heartbeat, or an older one.
	LivenessStale = Liveness(liveness.Stale)
	// LivenessStopped: a recent heartbeat that says the worker stopped (a clean exit);
	// its record lingers until it expires.
	LivenessStopped = Liveness(liveness.Gone)
)

// Worker is one worker's heartbeat record, with its liveness computed from the
// heartbeat's age alone (live, stale or stopped).
type Worker struct {
	ID            string       `json:"worker_id"`
	Hostname      string       `json:"hostname"`
	Status        WorkerStatus `json:"status"`
	Liveness      Liveness     `json:"liveness"`
	StartedAt     time.Time    `json:"started_at"`
	LastHeartbeat time.Time    `json:"last_heartbeat"`
	Age           float64      `json:"heartbeat_age_s"` // seconds since the last heartbeat
	ActiveTasks   int64        `json:"active_tasks"`
	Concurrency   int64        `json:"concurrency"`
	Processed     int64        `json:"tasks_processed"`
	Failed        int64        `json:"tasks_failed"`
	Retried       int64        `json:"tasks_retried"`
	IntervalMS    int64        `json:"heartbeat_interval_ms"`
	Queues        string       `json:"queues"` // comma-separated
}

func workerOf(w liveness.Worker) Worker {
	return Worker{
		ID: w.ID, Hostname: w.Hostname, Status: WorkerStatus(w.Status), Liveness: Liveness(w.Liveness),
		StartedAt: w.StartedAt, LastHeartbeat: w.LastHeartbeat, Age: w.Age,
		ActiveTasks: w.ActiveTasks, Concurrency: w.Concurrency, Processed: w.Processed,
		Failed: w.Failed, Retried: w.Retried, IntervalMS: w.IntervalMS, Queues: w.Queues,
	}
}
