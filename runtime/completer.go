package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// completer records outcomes in batches: whatever has finished by the time the previous
// call returned goes in the next call, one script call per queue. Its goroutine drains
// the completions channel until Stop closes it: Stop returns once every outcome sent
// before it was recorded (or given up, see completeWithRetry). An outcome sent after
// Stop — only a function that ignored cancellation and outlived the drain gets there —
// is discarded, and its entry stays pending for a peer.
type completer struct {
	service.Base
	w    *Worker
	size int

	mu     sync.RWMutex // guards closed against a late record
	closed bool
	ch     chan *execution
	// giveUpAt (unix ns) is set at the first failed completion while the worker
	// drains, and cleared by the next one Redis takes: completions give up past it.
	giveUpAt atomic.Int64
}

func newCompleter(w *Worker, size int) *completer {
	return &completer{w: w, size: size, closed: true}
}

// Start opens the completions channel and starts recording.
func (c *completer) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.ch, c.closed = make(chan *execution, c.size), false
	}
	ch := c.ch
	c.mu.Unlock()
	c.Go(ctx, func(context.Context) { c.loop(ch) })
	return nil
}

// Stop closes the completions channel and waits until what was sent is recorded.
func (c *completer) Stop() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.ch)
	}
	c.mu.Unlock()
	c.Base.Stop()
}

func (c *completer) record(e *execution) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return
	}
	c.ch <- e
}

// completeBatchMax is the most outcomes one pass of the completer takes.
const completeBatchMax = 256

func (c *completer) loop(ch chan *execution) { inBatches(ch, completeBatchMax, c.w.completeBatch) }

func (w *Worker) completeBatch(batch []*execution) {
	byQueue := map[string][]*execution{}
	for _, e := range batch {
		byQueue[e.queue] = append(byQueue[e.queue], e)
	}
	for name, list := range byQueue {
		items := make([]lua.Completion, len(list))
		for i, e := range list {
			items[i] = lua.Completion{ID: e.s.ID, Entry: e.s.Entry, Band: e.s.Band, Attempt: e.s.Attempt,
				Unique: e.s.HasUnique, Outcome: e.outcome, Text: e.text, RetryMS: e.retryAt, Slots: e.s.Slots, Epoch: e.s.Epoch}
		}
		q := w.byName[name]
		codes := w.completeWithRetry(q, items)
		var refused error // the keys' diagnosis, looked up once a batch
		for i, e := range list {
			if codes != nil && codes[i] == lua.CompleteRefused {
				if refused == nil {
					refused = &lua.QueueError{Queue: name, Op: "complete", Err: errRefusedOutcome,
						Wrong: lua.WrongTypes(context.Background(), w.rdb, q, "")}
				}
				w.log.Error("complete: outcome refused; the task is retried after the visibility timeout",
					"queue", name, "task", e.task.ID, "attempt", e.task.Attempt, "err", refused)
			}
			w.settle(e, codes != nil && codes[i] == lua.CompleteApplied, codes == nil || codes[i] == lua.CompleteRefused)
		}
	}
}

// completeWithRetry retries a failed completion call with backoff: the outcome must
// reach Redis or the task runs again after the visibility timeout. It gives up (nil)
// only when the worker is draining and Redis has not taken a completion for
// completeGiveUp: that deadline is the completer's, not the call's, so a drain with
// many queues' batches to record still gives up within it.
func (w *Worker) completeWithRetry(q keys.Queue, items []lua.Completion) []lua.CompleteCode {
	c := w.completer
	delay := 50 * time.Millisecond
	for {
		timeout := completeCallTimeout
		if at := c.giveUpAt.Load(); at != 0 {
			if timeout = min(timeout, time.Until(time.Unix(0, at))); timeout <= 0 {
				w.log.Error("complete: giving up at exit; the tasks run again after the visibility timeout", "queue", q.Name, "tasks", len(items))
				return nil
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		codes, err := lua.Complete.Run(ctx, w.rdb, lua.CompleteArgs{Queue: q, NowMS: w.now().UnixMilli(), KeepMS: w.keepMS, Items: items, Consumer: w.id})
		cancel()
		w.sawRedis(err)
		if err == nil {
			c.giveUpAt.Store(0) // Redis takes completions again
			return codes
		}
		w.metrics.redisErrors.WithLabelValues("complete").Inc()
		if lua.IsKeyError(err) {
			// Retrying cannot mend a key of the wrong type, and would hold up every other
			// queue's completions behind this one: the entries stay pending, and their
			// tasks run again after the visibility timeout.
			w.log.Error("complete: Redis refuses this queue's keys; the tasks run again after the visibility timeout",
				"queue", q.Name, "tasks", len(items), "err", lua.Diagnose(context.Background(), w.rdb, q, "", "complete", err))
			return nil
		}
		w.log.Warn("complete: record failed; retrying", "queue", q.Name, "tasks", len(items), "err", err)
		sleep := service.Jitter(delay, 0.5)
		if w.Draining() {
			c.giveUpAt.CompareAndSwap(0, time.Now().Add(completeGiveUp).UnixNano())
			sleep = min(sleep, max(0, time.Until(time.Unix(0, c.giveUpAt.Load()))))
		}
		service.Sleep(context.Background(), sleep)
		if delay < completeMaxDelay {
			delay *= 2
		}
	}
}

// errRefusedOutcome is the cause complete.lua gives for an outcome it refused.
var errRefusedOutcome = errors.New("the schedule or the dead set is not a sorted set")

// settle counts and reports an execution whose completion call returned.
func (w *Worker) settle(e *execution, applied, lost bool) {
	t := &e.task
	switch {
	case lost:
		w.metrics.count(e.fnLabel, OutcomeHandedBack)
	case !applied:
		w.metrics.count(e.fnLabel, OutcomeFenced)
		w.log.Warn("complete: fenced off; the task was reclaimed by a peer", "queue", t.Queue, "task", t.ID, "attempt", t.Attempt)
		w.publish(Event{Type: EventFenced, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt})
	case e.outcome == lua.Succeeded:
		w.processed.Add(1)
		w.metrics.count(e.fnLabel, OutcomeSucceeded)
		if w.cfg.EventsVerbose {
			w.publish(Event{Type: EventTaskSucceeded, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt})
		}
	case e.outcome == lua.Retry:
		w.processed.Add(1)
		w.failed.Add(1)
		w.retried.Add(1)
		w.metrics.count(e.fnLabel, OutcomeRetried)
		w.publish(Event{Type: EventTaskRetrying, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Detail: e.text})
	case e.outcome == lua.Cancelled:
		w.processed.Add(1)
		w.metrics.count(e.fnLabel, OutcomeCancelled)
		w.log.Info("task: cancelled while running", "queue", t.Queue, "task", t.ID, "attempt", t.Attempt)
		w.publish(Event{Type: EventTaskCancelled, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Detail: e.text})
	default:
		w.processed.Add(1)
		w.failed.Add(1)
		w.metrics.count(e.fnLabel, OutcomeDead)
		w.log.Warn("task: dead", "queue", t.Queue, "task", t.ID, "attempt", t.Attempt, "err", e.text)
		w.publish(Event{Type: EventTaskDead, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Detail: e.text})
	}
	w.release(e)
}

// Bounds of the completion calls: one call, and how long a draining worker keeps
// retrying completions that Redis does not take before it gives them up.
const (
	completeCallTimeout = 5 * time.Second
	completeGiveUp      = 5 * time.Second
	completeMaxDelay    = 2 * time.Second // the retries' backoff (±50 %) stops doubling here
)
