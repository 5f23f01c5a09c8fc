package runtime

import (
	"strconv"

	"github.com/dtq/dtq/lua"
)

// calls names one loop's claim calls: a resent call (its reply was lost) gets the same
// reply from its receipt, and each call deletes the receipt of the loop's previous call
// on the queue, which got its reply. A call that got no reply at all (go-redis gave up
// resending, or the loop failed and restarted) is sent again, under the same name, as
// the loop's next call on that queue: if it ran in Redis, its receipt answers and the
// tasks it claimed start now instead of after the visibility timeout. calls outlive
// the loop's restarts for that reason.
type calls struct {
	w    *Worker           // the consumer name and the per-process tag
	last map[string]string // the queue's latest call
	prev map[string]string // the call before it, which got its reply
	open map[string]bool   // the latest call has had no reply yet
	// hand-offs read from the inbox, told to the next call on the queue
	recv map[string][]lua.Received
	lane bool // the calls of the poll loop's lane (lane.go): named apart
}

func (w *Worker) newCalls() *calls {
	return &calls{w: w, last: map[string]string{}, prev: map[string]string{}, open: map[string]bool{},
		recv: map[string][]lua.Received{}}
}

// next names the next call on queue and the previous answered one; call answered once
// the reply is in.
func (c *calls) next(queue string) (call, prev string) {
	if c.open[queue] {
		return c.last[queue], c.prev[queue]
	}
	c.prev[queue] = c.last[queue]
	seq := strconv.FormatInt(c.w.callSeq.Add(1), 36)
	if c.lane {
		seq = "_" + seq
	}
	call = c.w.id + "." + c.w.callTag + "." + seq
	c.last[queue], c.open[queue] = call, true
	return call, c.prev[queue]
}

// answered records that queue's latest call got its reply (and with it the hand-offs
// it told of).
func (c *calls) answered(queue string) {
	c.open[queue] = false
	delete(c.recv, queue)
}
