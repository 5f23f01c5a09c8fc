package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// execution is one started attempt, from claim to recorded outcome.
type execution struct {
	q       keys.Queue
	s       lua.Started
	fn      *registered
	fnLabel string
	task    Task
	claimed time.Time

	// recorded flips once, when the outcome goes to the completer or the entry is
	// handed back: whoever flips it owns the entry's fate.
	recorded atomic.Bool
	outcome  lua.Outcome
	text     string
	retryAt  int64
	reason   string // why the outcome (for logs and events)
}

func (e *execution) heldRef() lua.Held { return e.s.Held() }

// heldKey names an execution among the ones a worker holds: its queue, band and entry.
// An entry id alone is unique within one stream only: the entries that one enqueue.lua
// call adds to several bands in the same millisecond share an id (EnqueueMany makes that
// the common case), and so can entries of two queues. Keyed by the id alone, a later
// execution overwrote an earlier one, whose entry the heartbeat then stopped touching: a
// reaper reclaimed it while it ran, and the drain did not hand it back.
//
// Every other place that names an entry names its stream too: touch.lua, complete.lua
// and the receipts' replay take the band with the id (and the queue through the keys);
// inbox rows carry the band; the handed notes and the rescue name inbox rows, whose ids
// are unique in their own (queue, worker) inbox; the fence compares a task's own entry,
// and a task never changes band (its priority is fixed at enqueue), so a task's entry id
// is unique among that task's deliveries. Events and metrics name tasks, not entries.
type heldKey struct {
	queue string
	band  int
	entry string
}

func (e *execution) key() heldKey { return heldKey{e.q.Name, e.s.Band, e.s.Entry} }

// start registers the claimed tasks as held and hands them to the executors.
func (w *Worker) start(q keys.Queue, started []lua.Started) {
	now := w.now()
	w.begun.Add(int64(len(started)))
	w.active.Store(now.UnixNano())
	for _, s := range started {
		fn := w.reg.lookup(s.Function)
		label := s.Function
		if fn == nil {
			label = "(unknown)"
		}
		e := &execution{q: q, s: s, fn: fn, fnLabel: label, claimed: now}
		e.task = Task{
			ID: s.ID, Queue: q.Name, Function: s.Function, Attempt: s.Attempt,
			Payload: []byte(s.Payload), Priority: s.Band, Failures: s.Failures,
			MaxRetries: w.maxRetries(s, fn), Reclaimed: s.Reclaimed,
			CreatedAt: time.UnixMilli(s.CreatedMS),
		}
		w.inflight.Add(1)
		w.heldMu.Lock()
		w.held[e.key()] = e
		w.heldMu.Unlock()
		if s.HandedOff {
			w.metrics.handoffs.Inc()
		}
		if s.Reclaimed {
			w.publish(Event{Type: EventTaskReclaimed, Queue: q.Name, TaskID: s.ID, Attempt: s.Attempt})
		}
		w.ensureExecutor()
		select {
		case w.jobs <- e:
		default:
			// The pool's queue is full (a reaper pass took more than the pool holds):
			// wait for room without stalling the caller's loop. A drain that gives up
			// hands e back instead.
			w.sendWG.Add(1)
			go func() {
				defer w.sendWG.Done()
				select {
				case w.jobs <- e:
				case <-w.runCtx.Done():
					w.doneRunning() // handed back by the drain, never to run
				}
			}()
		}
	}
	w.metrics.inflight.Set(float64(w.inflight.Load()))
}

func (w *Worker) maxRetries(s lua.Started, fn *registered) int {
	if s.MaxRetries >= 0 {
		return s.MaxRetries
	}
	if fn != nil && fn.opts.MaxRetries >= 0 {
		return fn.opts.MaxRetries
	}
	return DefaultMaxRetries
}

// ensureExecutor makes sure an executor takes the job about to be sent: it reserves an
// idle one, or starts one while fewer than DTQ_WORKER_CONCURRENCY run (beyond that, the
// job waits for the first executor to finish). The reservation is the sender's, made
// before the send: an idle count the executors kept themselves around their receive
// lagged behind it, so a job sent just as an idle executor took another found none,
// and waited for a running function to return while the pool had room. Only the
// fetching loops call it, and never after the drain closed jobs.
func (w *Worker) ensureExecutor() {
	for {
		if n := w.idleExecutors.Load(); n > 0 {
			if w.idleExecutors.CompareAndSwap(n, n-1) {
				return // that executor is waiting for this job, or finishing one
			}
			continue
		}
		n := w.executors.Load()
		if n >= int64(w.cfg.Concurrency) {
			return
		}
		if w.executors.CompareAndSwap(n, n+1) {
			w.poolWG.Add(1)
			go w.executor()
			return
		}
	}
}

// executor is one of the (at most Concurrency) goroutines that run functions. It is
// started for a job and counts itself idle, for the next reservation, after each one.
func (w *Worker) executor() {
	defer w.poolWG.Done()
	for {
		e, ok := <-w.jobs
		if !ok {
			return
		}
		// Count first, check second: a drain that gives up cancels runCtx and then waits
		// for running to reach 0, so an execution either is counted or sees the cancel.
		w.running.Add(1)
		if w.runCtx.Err() == nil && !e.recorded.Load() {
			w.execute(e)
		}
		w.running.Add(-1)
		w.idleExecutors.Add(1) // before the slot is freed: the next job finds this executor
		w.doneRunning()
		select {
		case w.execDone <- struct{}{}:
		default:
		}
	}
}

// doneRunning frees the slot of an execution that returned (or will never run): the
// poll loop may fetch again while its outcome is still being recorded. The record's own
// backlog is bounded by the completions channel, whose sends wait for room.
func (w *Worker) doneRunning() {
	n := w.inflight.Add(-1)
	w.metrics.inflight.Set(float64(n))
	w.active.Store(time.Now().UnixNano())
	select {
	case w.slotFree <- struct{}{}:
	default:
	}
}

func (w *Worker) execute(e *execution) {
	t := &e.task
	if e.s.Reclaimed && t.Failures > t.MaxRetries {
		e.finish(lua.Dead, fmt.Sprintf("worker lost during attempt %d (no heartbeat within the visibility timeout); no retries left", t.Attempt-1), 0, "lost")
		w.record(e)
		return
	}
	if e.fn == nil {
		w.fail(e, fmt.Errorf("%w %q: no function of that name is registered on worker %s", ErrUnknownFunction, t.Function, w.id))
		w.record(e)
		return
	}
	if w.cfg.EventsVerbose {
		w.publish(Event{Type: EventTaskStarted, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt})
	}
	timeout := time.Duration(e.s.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = e.fn.opts.Timeout
	}
	if timeout <= 0 {
		timeout = w.defTimeout
	}
	var ctx context.Context = w.runCtx
	var tctx *taskCtx
	if timeout > 0 {
		tctx = newTaskCtx(w.runCtx, timeout)
		ctx = tctx
	}
	began := time.Now()
	res, err := call(ctx, e.fn.fn, t)
	if tctx != nil {
		tctx.release()
	}
	fm := w.metrics.fn(e.fnLabel)
	fm.duration.Observe(time.Since(began).Seconds())
	if err != nil && w.runCtx.Err() != nil {
		return // cancelled by the drain deadline: never recorded, never ACKed; handed back
	}
	switch {
	case err == nil:
		e.finish(lua.Succeeded, string(res), 0, "")
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		w.fail(e, fmt.Errorf("timed out after %s: %w", timeout, err))
	default:
		w.fail(e, err)
	}
	w.record(e)
}

// call runs fn, turning a panic into a *PanicError.
func call(ctx context.Context, fn Func, t *Task) (res []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, &PanicError{Value: r}
		}
	}()
	return fn(ctx, t)
}

// fail sets the outcome of a failed attempt: a retry while the budget lasts, else dead.
func (w *Worker) fail(e *execution, err error) {
	t := &e.task
	n := t.Failures + 1
	if isSkipRetry(err) || n > t.MaxRetries {
		e.finish(lua.Dead, err.Error(), 0, "failed")
		return
	}
	b := w.defBackoff
	if e.fn != nil && e.fn.opts.Backoff != nil {
		b = e.fn.opts.Backoff
	}
	e.finish(lua.Retry, err.Error(), w.now().Add(b(n)).UnixMilli(), "failed")
}

func (e *execution) finish(o lua.Outcome, text string, retryAt int64, reason string) {
	e.outcome, e.text, e.retryAt, e.reason = o, text, retryAt, reason
}

// record passes a finished execution to the completer, unless the drain already
// handed its entry back.
func (w *Worker) record(e *execution) {
	if !e.recorded.CompareAndSwap(false, true) {
		return
	}
	w.compMu.RLock()
	defer w.compMu.RUnlock()
	if w.compClosed {
		// Only a function that ignored cancellation and outlived the drain gets here:
		// its outcome is discarded and its entry stays pending for a peer.
		return
	}
	w.completions <- e
}

// release forgets an execution whose fate is settled (recorded or handed back): the
// heartbeat stops touching its entry.
func (w *Worker) release(e *execution) {
	w.heldMu.Lock()
	if k := e.key(); w.held[k] == e {
		delete(w.held, k)
	}
	w.heldMu.Unlock()
	w.active.Store(time.Now().UnixNano())
}

// completer records outcomes in batches: whatever has finished by the time the previous
// call returned goes in the next call, one script call per queue.
func (w *Worker) completer() {
	defer w.completerWG.Done()
	batch := make([]*execution, 0, 256)
	for e := range w.completions {
		batch = append(batch[:0], e)
	more:
		for len(batch) < cap(batch) {
			select {
			case e, ok := <-w.completions:
				if !ok {
					break more
				}
				batch = append(batch, e)
			default:
				break more
			}
		}
		w.completeBatch(batch)
	}
}

func (w *Worker) completeBatch(batch []*execution) {
	byQueue := map[string][]*execution{}
	for _, e := range batch {
		byQueue[e.q.Name] = append(byQueue[e.q.Name], e)
	}
	for name, list := range byQueue {
		items := make([]lua.Completion, len(list))
		for i, e := range list {
			items[i] = lua.Completion{ID: e.s.ID, Entry: e.s.Entry, Band: e.s.Band, Attempt: e.s.Attempt,
				Unique: e.s.Unique, Outcome: e.outcome, Text: e.text, RetryMS: e.retryAt}
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
// only when the worker is past its drain and Redis still does not answer.
func (w *Worker) completeWithRetry(q keys.Queue, items []lua.Completion) []lua.CompleteCode {
	delay := 50 * time.Millisecond
	giveUpAt := time.Time{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		codes, err := lua.Complete.Run(ctx, w.rdb, lua.CompleteArgs{Queue: q, NowMS: w.now().UnixMilli(), KeepMS: w.keepMS, Items: items})
		cancel()
		if err == nil {
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
		if w.Draining() {
			if giveUpAt.IsZero() {
				giveUpAt = time.Now().Add(5 * time.Second)
			} else if time.Now().After(giveUpAt) {
				w.log.Error("complete: giving up at exit; the tasks run again after the visibility timeout", "queue", q.Name, "tasks", len(items))
				return nil
			}
		}
		sleepCtx(context.Background(), jitter(delay, 0.5))
		if delay < 2*time.Second {
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
	default:
		w.processed.Add(1)
		w.failed.Add(1)
		w.metrics.count(e.fnLabel, OutcomeDead)
		w.log.Warn("task: dead", "queue", t.Queue, "task", t.ID, "attempt", t.Attempt, "err", e.text)
		w.publish(Event{Type: EventTaskDead, Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Detail: e.text})
	}
	w.release(e)
}
