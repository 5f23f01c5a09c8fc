package lua

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed dead_requeue.lua
var deadRequeueSrc string

//go:embed dead_delete.lua
var deadDeleteSrc string

// DeadRequeue requeues dead tasks of a queue, named or the oldest, at most DeadBatch
// (dead_requeue.lua), each as Requeue does.
var DeadRequeue = newScript("dead_requeue.lua", plain(deadRequeueSrc), deadRequeueKV, decodeDeadRequeue)

// DeadDelete deletes dead tasks of a queue, named or the oldest, at most DeadBatch
// (dead_delete.lua): each one's record, dead-set member and unique key.
var DeadDelete = newScript("dead_delete.lua", plain(deadDeleteSrc), deadDeleteKV, decodeDeadDelete)

// DeadArgs is one call of DeadRequeue or DeadDelete: the tasks IDs (at most DeadBatch),
// or, with All, the oldest Limit (1..DeadBatch) of the dead tasks that died at or before
// BeforeMS, from rank Offset among those (DeadRequeue; DeadDelete starts at the oldest).
type DeadArgs struct {
	Queue    keys.Queue
	NowMS    int64
	IDs      []string
	All      bool
	BeforeMS int64
	Offset   int64
	Limit    int
}

// DeadResult is the reply of one call of DeadRequeue or DeadDelete.
type DeadResult struct {
	Done       int64    // tasks requeued or deleted
	NotFound   []string // no such task, or (DeadDelete) no such dead task
	WrongState []string // DeadRequeue: not dead, or dead with nothing to run
	Examined   int64    // ids or members looked at
	Kept       int64    // DeadRequeue with All: members examined that stay in the dead set
}

// ErrDeadBatch refuses a call of more than DeadBatch tasks.
var ErrDeadBatch = errors.New("too many tasks for one call")

func (a DeadArgs) check() error {
	if a.All {
		if a.Limit < 1 || a.Limit > DeadBatch || a.Offset < 0 || len(a.IDs) > 0 {
			return fmt.Errorf("dead tasks of %s: all: limit %d must be 1..%d, offset %d ≥ 0, no ids: %w", a.Queue.Name, a.Limit, DeadBatch, a.Offset, ErrDeadBatch)
		}
		return nil
	}
	if len(a.IDs) > DeadBatch {
		return fmt.Errorf("dead tasks of %s: %d ids, at most %d a call: %w", a.Queue.Name, len(a.IDs), DeadBatch, ErrDeadBatch)
	}
	return nil
}

func deadRequeueKV(a DeadArgs) ([]string, []any, error) {
	if err := a.check(); err != nil {
		return nil, nil, err
	}
	q := a.Queue
	ks := make([]string, 0, 12)
	ks = append(ks, q.Dead(), q.TaskPrefix())
	ks = append(ks, q.Streams[:]...)
	mode := "ids"
	if a.All {
		mode = "all"
	}
	args := make([]any, 0, 6+len(a.IDs))
	args = append(args, keys.Group, a.NowMS, mode, a.Offset, a.Limit, a.BeforeMS)
	for _, id := range a.IDs {
		args = append(args, id)
	}
	return ks, args, nil
}

func deadDeleteKV(a DeadArgs) ([]string, []any, error) {
	if err := a.check(); err != nil {
		return nil, nil, err
	}
	q := a.Queue
	mode := "ids"
	if a.All {
		mode = "all"
	}
	args := make([]any, 0, 3+len(a.IDs))
	args = append(args, mode, a.Limit, a.BeforeMS)
	for _, id := range a.IDs {
		args = append(args, id)
	}
	return []string{q.Dead(), q.TaskPrefix(), q.UniquePrefix()}, args, nil
}

func decodeDeadRequeue(a DeadArgs, cmd *redis.Cmd) (DeadResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return DeadResult{}, fmt.Errorf("requeue dead tasks of %s: %w", a.Queue.Name, err)
	}
	if len(v) != 6 {
		return DeadResult{}, fmt.Errorf("requeue dead tasks of %s: unexpected reply", a.Queue.Name)
	}
	r := DeadResult{Done: num(v[0]), NotFound: strs(v[1]), WrongState: strs(v[2]), Examined: num(v[3]), Kept: num(v[4])}
	if e := str(v[5]); e != "" {
		return r, fmt.Errorf("requeue dead tasks of %s: stopped after %d requeued: %w", a.Queue.Name, r.Done, replyError(e))
	}
	return r, nil
}

func decodeDeadDelete(a DeadArgs, cmd *redis.Cmd) (DeadResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return DeadResult{}, fmt.Errorf("delete dead tasks of %s: %w", a.Queue.Name, err)
	}
	if len(v) != 3 {
		return DeadResult{}, fmt.Errorf("delete dead tasks of %s: unexpected reply", a.Queue.Name)
	}
	return DeadResult{Done: num(v[0]), NotFound: strs(v[1]), Examined: num(v[2])}, nil
}

// replyError is an error reply Redis gave a command inside a script that the script
// reports rather than fails with: like any error reply, a redis.Error.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it a redis.Error.
func (replyError) RedisError() {}
