package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// taskCtx is the context a function runs under: its parent's, with a deadline whose
// timer is armed only when something asks for Done. Most short functions never do, and
// a timer per task is a measurable cost at tens of thousands of tasks a second. Err
// reports the deadline from the clock when the timer was never armed. A timeout of 0
// sets no deadline. cancelTask ends it early with a cause (a cancel request).
type taskCtx struct {
	parent   context.Context
	deadline time.Time // zero: none

	once   sync.Once
	armed  atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	stop   context.CancelCauseFunc // nil until armed
}

func newTaskCtx(parent context.Context, timeout time.Duration) *taskCtx {
	c := &taskCtx{parent: parent}
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
	}
	return c
}

func (c *taskCtx) arm() {
	c.once.Do(func() {
		var cctx context.Context
		cctx, c.stop = context.WithCancelCause(c.parent)
		if c.deadline.IsZero() {
			c.ctx, c.cancel = cctx, func() { c.stop(nil) }
		} else {
			c.ctx, c.cancel = context.WithDeadline(cctx, c.deadline)
		}
		c.armed.Store(true)
	})
}

// cancelTask ends the context with cause (context.Cause reports it), unless the function
// has already returned.
func (c *taskCtx) cancelTask(cause error) {
	c.arm()
	if c.stop != nil {
		c.stop(cause)
	}
}

func (c *taskCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *taskCtx) Done() <-chan struct{} {
	c.arm()
	return c.ctx.Done()
}

func (c *taskCtx) Err() error {
	if c.armed.Load() {
		return c.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers from the armed context once there is one (not the shared released one),
// so context.Cause finds the cause cancelTask gave.
func (c *taskCtx) Value(key any) any {
	if c.armed.Load() && c.stop != nil {
		return c.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// release ends the context when the function returns (as a cancel of WithTimeout
// would): a goroutine the function left behind sees Done closed and Err non-nil.
func (c *taskCtx) release() {
	c.once.Do(func() {
		c.ctx = released // never armed: no timer to make, one to stop
		c.armed.Store(true)
	})
	if c.cancel != nil {
		c.cancel()
	}
}

// released is the context of every task released without its timer armed.
var released = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
