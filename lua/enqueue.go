package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed enqueue.lua
var enqueueSrc string

// Enqueue creates the tasks of one call (enqueue.lua), in order, each atomically, at the
// clock NowMS. One call per batch costs Redis about a third less per task than one call
// per task; keep batches small enough that one script does not hold Redis for long (the
// client sends at most EnqueueBatch tasks or EnqueueBatchBytes of payload a call). Its
// reply is one EnqueueResult per task; an error reply fails the whole call: the tasks
// before the one that failed may have been created.
var Enqueue = newScript("enqueue.lua", withPrelude(enqueueSrc), enqueueKV, decodeEnqueue)

// Limits of one enqueue call that the client keeps to: tasks, and payload bytes (a
// larger payload goes alone).
const (
	EnqueueBatch      = 100
	EnqueueBatchBytes = 1 << 20
)

// EnqueueArgs is one enqueue call: the tasks to create in queue Queue at NowMS.
type EnqueueArgs struct {
	Queue keys.Queue
	NowMS int64
	Tasks []NewTask
	// Traceparent and Tracestate: the producer's W3C trace context, written into every
	// task of the call ("" Traceparent: no trace fields, and no extra arguments).
	Traceparent, Tracestate string
}

// NewTask are the fields of a new task.
type NewTask struct {
	ID         string
	Function   string
	Payload    []byte
	Priority   int
	MaxRetries int
	TimeoutMS  int64
	RunAtMS    int64  // <= the call's NowMS: run now
	Unique     string // "" for none
	// ReuseUnique: a unique key held by a dead or cancelled task passes to this one.
	ReuseUnique bool
}

// EnqueueResult is the outcome of one task of an enqueue call.
type EnqueueResult struct {
	ID      string
	Created bool // false: a task with its unique key exists (ID is that task's)
	// HolderStatus is, when Created is false, the status of the task holding the unique
	// key (a dead or cancelled holder's key passes on with ReuseUnique).
	HolderStatus keys.Status
	Err          error // ErrTaskExists: a task with its id exists already
}

func enqueueKV(a EnqueueArgs) ([]string, []any, error) {
	q := a.Queue
	args := make([]any, 0, 3+9*len(a.Tasks))
	args = append(args, q.Name, keys.Group, a.NowMS)
	for i := range a.Tasks {
		t := &a.Tasks[i]
		if t.Priority < 0 || t.Priority >= keys.Bands {
			return nil, nil, fmt.Errorf("enqueue: priority %d is not 0..%d", t.Priority, keys.Bands-1)
		}
		reuse := "0"
		if t.ReuseUnique {
			reuse = "1"
		}
		args = append(args, t.ID, t.Function, t.Payload, t.Priority, t.MaxRetries, t.TimeoutMS, t.RunAtMS, t.Unique, reuse)
	}
	if a.Traceparent != "" {
		args = append(args, a.Traceparent, a.Tracestate)
	}
	return []string{q.TaskPrefix(), q.StreamPrefix(), q.Schedule(), q.UniquePrefix(), q.Waiting(), q.Paused(),
		q.InboxPrefix(), q.Handed(), q.Limits()}, args, nil
}

func decodeEnqueue(a EnqueueArgs, cmd *redis.Cmd) ([]EnqueueResult, error) {
	n := len(a.Tasks)
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	if len(v) != 3*n {
		return nil, fmt.Errorf("enqueue: unexpected reply of %d values for %d tasks", len(v), n)
	}
	out := make([]EnqueueResult, n)
	for i := range out {
		id, _ := v[3*i].(string)
		code, _ := v[3*i+1].(int64)
		out[i].ID = id
		switch code {
		case 1:
			out[i].Created = true
		case 0:
			hs, _ := v[3*i+2].(string)
			out[i].HolderStatus = keys.Status(hs)
		default:
			out[i].Err = fmt.Errorf("enqueue %s: %w", id, ErrTaskExists)
		}
	}
	return out, nil
}
