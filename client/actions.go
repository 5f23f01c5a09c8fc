package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// RunNow puts a scheduled or retrying task on its stream now, ahead of its time
// (run_now.lua): ErrNotFound when there is no such task, ErrWrongStatus when it is in
// another state. A scheduler pass racing it does not queue it a second time.
func (c *Client) RunNow(ctx context.Context, queue, id string) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := ValidID(id); err != nil {
		return err
	}
	_, err := lua.RunNow.Run(ctx, c.rdb, lua.RunNowArgs{Queue: c.ks.Queue(queue), ID: id, NowMS: c.now().UnixMilli()})
	return err
}

// DeadResult is what a bulk action on dead tasks did.
type DeadResult struct {
	Queue    string `json:"queue"`
	Requeued int64  `json:"requeued,omitempty"` // RequeueDead, RequeueAllDead
	Deleted  int64  `json:"deleted,omitempty"`  // DeleteDead, DeleteAllDead
	// NotFound: no such task, or no such dead task (delete). WrongState (requeue): not
	// dead, or a dead record with nothing to run (an invalid-entry record).
	NotFound   []string `json:"not_found"`
	WrongState []string `json:"wrong_state,omitempty"`
}

// MaxDeadIDs bounds the ids one RequeueDead or DeleteDead takes; they are sent
// lua.DeadBatch a call.
const MaxDeadIDs = 10000

// RequeueDead requeues the dead tasks ids of queue with a fresh retry budget, each as
// Requeue does. A task that is not dead (a worker runs it) is left alone and reported
// in WrongState, so nothing runs twice.
func (c *Client) RequeueDead(ctx context.Context, queue string, ids []string) (*DeadResult, error) {
	return c.deadIDs(ctx, queue, ids, true)
}

// DeleteDead deletes the dead tasks ids of queue: each one's record, dead-set member and
// the unique key that names it. An id that is no dead task is reported in NotFound.
func (c *Client) DeleteDead(ctx context.Context, queue string, ids []string) (*DeadResult, error) {
	return c.deadIDs(ctx, queue, ids, false)
}

// RequeueAllDead requeues every task of queue that was dead when it was called, in calls
// of lua.DeadBatch tasks (Redis is never held long). Records with nothing to run stay
// dead and are reported in WrongState.
func (c *Client) RequeueAllDead(ctx context.Context, queue string) (*DeadResult, error) {
	return c.deadAll(ctx, queue, true)
}

// DeleteAllDead deletes every task of queue that was dead when it was called, in calls of
// lua.DeadBatch tasks.
func (c *Client) DeleteAllDead(ctx context.Context, queue string) (*DeadResult, error) {
	return c.deadAll(ctx, queue, false)
}

func (c *Client) deadIDs(ctx context.Context, queue string, ids []string, requeue bool) (*DeadResult, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(ids) == 0 || len(ids) > MaxDeadIDs {
		return nil, fmt.Errorf("%w: %d ids: give 1..%d", ErrInvalid, len(ids), MaxDeadIDs)
	}
	for _, id := range ids {
		if err := ValidID(id); err != nil {
			return nil, err
		}
	}
	out := &DeadResult{Queue: queue, NotFound: []string{}}
	a := lua.DeadArgs{Queue: c.ks.Queue(queue), NowMS: c.now().UnixMilli()}
	// each id once, in the order given
	seen := make(map[string]bool, len(ids))
	uniq := slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	for chunk := range slices.Chunk(uniq, lua.DeadBatch) {
		a.IDs = chunk
		if _, err := c.deadCall(ctx, a, requeue, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (c *Client) deadAll(ctx context.Context, queue string, requeue bool) (*DeadResult, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	out := &DeadResult{Queue: queue, NotFound: []string{}}
	now := c.now().UnixMilli()
	a := lua.DeadArgs{Queue: c.ks.Queue(queue), NowMS: now, All: true, BeforeMS: now, Limit: lua.DeadBatch}
	for {
		r, err := c.deadCall(ctx, a, requeue, out)
		if err != nil {
			return out, err
		}
		if r.Examined < int64(a.Limit) {
			return out, nil
		}
		a.Offset += r.Kept
	}
}

// deadCall makes one script call and adds what it did to out.
func (c *Client) deadCall(ctx context.Context, a lua.DeadArgs, requeue bool, out *DeadResult) (lua.DeadResult, error) {
	s := lua.DeadDelete
	if requeue {
		s = lua.DeadRequeue
	}
	r, err := s.Run(ctx, c.rdb, a)
	if requeue {
		out.Requeued += r.Done
		out.WrongState = append(out.WrongState, r.WrongState...)
	} else {
		out.Deleted += r.Done
	}
	if !a.All {
		out.NotFound = append(out.NotFound, r.NotFound...)
	}
	return r, err
}
