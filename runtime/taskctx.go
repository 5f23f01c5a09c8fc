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
// reports the deadline from the clock when the timer was never armed.
type taskCtx struct {
	parent   context.Context
	deadline time.Time

	once   sync.Once
	armed  atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
}

func newTaskCtx(parent context.Context, timeout time.Duration) *taskCtx {
	return &taskCtx{parent: parent, deadline: time.Now().Add(timeout)}
}

func (c *taskCtx) arm() {
	c.once.Do(func() {
		c.ctx, c.cancel = context.WithDeadline(c.parent, c.deadline)
		c.armed.Store(true)
	})
}

func (c *taskCtx) Deadline() (time.Time, bool) { return c.deadline, true }

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
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *taskCtx) Value(key any) any { return c.parent.Value(key) }

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
