package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed sched_enqueue.lua
var schedEnqueueSrc string

// SchedEnqueue puts claimed tasks on their streams (sched_enqueue.lua: XADD before ZREM;
// a task already queued is dropped from the claims without a second XADD). No ids: no
// call.
var SchedEnqueue = func() *Script[SchedEnqueueArgs, SchedEnqueueResult] {
	s := newScript("sched_enqueue.lua", plain(schedEnqueueSrc), schedEnqueueKV, decodeSchedEnqueue)
	s.skip = func(a SchedEnqueueArgs) bool { return len(a.IDs) == 0 }
	return s
}()

// SchedEnqueueArgs is one scheduler enqueue: the claimed tasks to queue.
type SchedEnqueueArgs struct {
	Queue keys.Queue
	NowMS int64
	IDs   []string
}

// SchedEnqueueResult is the reply of a scheduler enqueue.
type SchedEnqueueResult struct {
	Enqueued, Dropped []string
}

func schedEnqueueKV(a SchedEnqueueArgs) ([]string, []any, error) {
	q := a.Queue
	ks := make([]string, 0, 12+len(a.IDs))
	ks = append(ks, q.Claimed())
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, q.Retrying())
	args := make([]any, 0, 2+len(a.IDs))
	args = append(args, keys.Group, a.NowMS)
	for _, id := range a.IDs {
		ks = append(ks, q.Task(id))
		args = append(args, id)
	}
	return ks, args, nil
}

func decodeSchedEnqueue(a SchedEnqueueArgs, cmd *redis.Cmd) (SchedEnqueueResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return SchedEnqueueResult{}, fmt.Errorf("scheduler enqueue %s: %w", a.Queue.Name, err)
	}
	if len(v) != 2 {
		return SchedEnqueueResult{}, fmt.Errorf("scheduler enqueue %s: unexpected reply", a.Queue.Name)
	}
	return SchedEnqueueResult{Enqueued: strs(v[0]), Dropped: strs(v[1])}, nil
}
