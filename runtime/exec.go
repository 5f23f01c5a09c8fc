package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// execution is one started attempt, from claim to recorded outcome.
type execution struct {
	// queue is its queue's name: not task.Queue, which the function may change, and not
	// the queue's keys, a copy of which cost every task 176 bytes
	queue   string
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

	trace    *traceRead // the producer's trace context, read when tracing is on (trace.go)
	traceIdx int        // this execution's place in trace

	// cancelReq is set when the heartbeat learns the task's cancel was requested;
	// tctx is the running function's context, which it then cancels (cancelRequested).
	cancelReq atomic.Bool
	tctx      atomic.Pointer[taskCtx]
	// lostReq: a heartbeat found the task no longer this execution's (lost)
	lostReq atomic.Bool
	// confirmed is when the execution was last known to be this worker's (unix ns): its
	// claim, then each touch that held it (sent at that time)
	confirmed atomic.Int64
}

// ErrCancelled is the cause (context.Cause) of a function's context ended by a cancel
// request (client.CancelTask, dtq cancel) while it ran. A function that returns an error
// after it is recorded as cancelled, never retried; one that returns success keeps it.
var ErrCancelled = errors.New("task cancelled")

// cancelRequested stops e's function, once: its context ends with ErrCancelled. Called
// from the heartbeat; the executor checks the flag after publishing its context, so a
// request that comes before the function starts stops it too.
func (e *execution) cancelRequested() bool { return e.stop(&e.cancelReq, ErrCancelled) }

// ErrLost is the cause (context.Cause) of a function's context ended because its task
// is no longer this execution's: a peer took it over after this worker looked silent
// past the visibility timeout (a freeze, Redis out of reach), and runs it as the next
// attempt. The execution's outcome would be fenced off anyway; stopping it at the next
// heartbeat keeps it from running beside the attempt that replaced it (which a
// concurrency limit counts as the task's one slot) and frees its executor.
var ErrLost = errors.New("task taken over by a peer: this execution is fenced off")

// lost stops e's function, once: its context ends with ErrLost. Called from the
// heartbeat; the executor checks the flag after publishing its context.
func (e *execution) lost() bool { return e.stop(&e.lostReq, ErrLost) }

// stop sets flag, once, and ends the running function's context with cause; false when
// flag was set already. The executor reads the flags after publishing the context
// (execute), so a stop that comes before the function starts ends it too.
func (e *execution) stop(flag *atomic.Bool, cause error) bool {
	if !flag.CompareAndSwap(false, true) {
		return false
	}
	if c := e.tctx.Load(); c != nil {
		c.cancelTask(cause)
	}
	return true
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

func (e *execution) key() heldKey { return heldKey{e.queue, e.s.Band, e.s.Entry} }

// start registers the claimed tasks as held and hands them to the executors.
func (w *Worker) start(q keys.Queue, started []lua.Started) {
	now := w.now()
	h := w.hold
	h.begun.Add(int64(len(started)))
	h.active.Store(now.UnixNano())
	tc := w.tracer.load(w, q, started)
	for i, s := range started {
		fn := w.reg.lookup(s.Function)
		label := s.Function
		if fn == nil {
			label = "(unknown)"
		}
		e := &execution{queue: q.Name, s: s, fn: fn, fnLabel: label, claimed: now}
		e.confirmed.Store(now.UnixNano())
		e.task = Task{
			ID: s.ID, Queue: q.Name, Function: s.Function, Attempt: s.Attempt,
			Payload: []byte(s.Payload), Priority: s.Band, Failures: s.Failures,
			MaxRetries: w.maxRetries(s, fn), Reclaimed: s.Reclaimed,
			CreatedAt: time.UnixMilli(s.CreatedMS),
		}
		e.trace, e.traceIdx = tc, i
		h.inflight.Add(1)
		h.add(e)
		if s.HandedOff {
			w.metrics.handoffs.Inc()
		}
		if s.Reclaimed {
			w.publish(Event{Type: EventTaskReclaimed, Queue: q.Name, TaskID: s.ID, Attempt: s.Attempt})
		}
		w.pool.submit(e)
	}
	w.metrics.inflight.Set(float64(h.inflight.Load()))
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

// pool is the fixed set of (at most DTQ_WORKER_CONCURRENCY) executor goroutines that
// run functions: the design's semaphore, without a goroutine per task. Executors start
// on demand; the drain closes the pool and waits for them.
type pool struct {
	w    *Worker
	size int64
	jobs chan *execution
	// runCtx ends at the drain deadline (or a hard stop): running functions are
	// cancelled.
	runCtx    context.Context
	cancelRun context.CancelFunc
	running   atomic.Int64  // functions executing now
	execDone  chan struct{} // signalled when an execution returns
	sendWG    sync.WaitGroup
	wg        sync.WaitGroup // executors
	executors atomic.Int64   // executor goroutines started
	idle      atomic.Int64   // executors waiting for a job
}

func newPool(w *Worker, size, queued int) *pool {
	p := &pool{w: w, size: int64(size), jobs: make(chan *execution, queued), execDone: make(chan struct{}, 1)}
	p.runCtx, p.cancelRun = context.WithCancel(context.Background())
	return p
}

// submit hands e to an executor.
func (p *pool) submit(e *execution) {
	p.ensureExecutor()
	select {
	case p.jobs <- e:
	default:
		// The pool's queue is full (a reaper pass took more than the pool holds):
		// wait for room without stalling the caller's loop. A drain that gives up
		// hands e back instead.
		p.sendWG.Add(1)
		go func() {
			defer p.sendWG.Done()
			select {
			case p.jobs <- e:
			case <-p.runCtx.Done():
				p.w.doneRunning() // handed back by the drain, never to run
			}
		}()
	}
}

// ensureExecutor makes sure an executor takes the job about to be sent: it reserves an
// idle one, or starts one while fewer than DTQ_WORKER_CONCURRENCY run (beyond that, the
// job waits for the first executor to finish). The reservation is the sender's, made
// before the send: an idle count the executors kept themselves around their receive
// lagged behind it, so a job sent just as an idle executor took another found none,
// and waited for a running function to return while the pool had room. Only the
// fetching loops call it, and never after the drain closed jobs.
func (p *pool) ensureExecutor() {
	for {
		if n := p.idle.Load(); n > 0 {
			if p.idle.CompareAndSwap(n, n-1) {
				return // that executor is waiting for this job, or finishing one
			}
			continue
		}
		n := p.executors.Load()
		if n >= p.size {
			return
		}
		if p.executors.CompareAndSwap(n, n+1) {
			p.wg.Add(1)
			go p.executor()
			return
		}
	}
}

// executor is one of the (at most Concurrency) goroutines that run functions. It is
// started for a job and counts itself idle, for the next reservation, after each one.
func (p *pool) executor() {
	defer p.wg.Done()
	w := p.w
	for {
		e, ok := <-p.jobs
		if !ok {
			return
		}
		// Count first, check second: a drain that gives up cancels runCtx and then waits
		// for running to reach 0, so an execution either is counted or sees the cancel.
		p.running.Add(1)
		if p.runCtx.Err() == nil && !e.recorded.Load() {
			w.execute(e)
		}
		p.running.Add(-1)
		p.idle.Add(1) // before the slot is freed: the next job finds this executor
		w.doneRunning()
		select {
		case p.execDone <- struct{}{}:
		default:
		}
	}
}

// close ends the pool once nothing more is sent: executors return after their job.
func (p *pool) close() {
	p.sendWG.Wait()
	close(p.jobs)
}

// doneRunning frees the slot of an execution that returned (or will never run): the
// poll loop may fetch again while its outcome is still being recorded. The record's own
// backlog is bounded by the completions channel, whose sends wait for room.
func (w *Worker) doneRunning() {
	n := w.hold.inflight.Add(-1)
	w.metrics.inflight.Set(float64(n))
	w.hold.active.Store(time.Now().UnixNano())
	w.hold.freed()
}

func (w *Worker) execute(e *execution) {
	t := &e.task
	base := w.pool.runCtx
	if w.tracer != nil {
		var end func()
		base, end = w.tracer.begin(base, e)
		defer end()
	}
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
	// (confirmed is 0 for an execution no claim made: RunInline's, which has no Redis)
	if c := e.confirmed.Load(); c != 0 && w.now().Sub(time.Unix(0, c)) >= w.cfg.VisibilityTimeout/2 && !w.confirm(e) {
		w.release(e) // not started: the entry is a peer's, or a reaper's after the timeout
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
	tctx := newTaskCtx(base, timeout)
	e.tctx.Store(tctx)
	if e.cancelReq.Load() {
		tctx.cancelTask(ErrCancelled) // requested while the task waited for an executor
	}
	if e.lostReq.Load() {
		// a heartbeat found the task a peer's while it waited for an executor: its
		// function is not called (its outcome would be fenced off), the entry is left to
		// its new owner
		tctx.release()
		w.log.Warn("task: taken over by a peer before it started; not started", "queue", e.queue, "task", t.ID, "attempt", t.Attempt)
		w.release(e)
		return
	}
	began := time.Now()
	res, err := call(tctx, e.fn.fn, t)
	tctx.release()
	fm := w.metrics.fn(e.fnLabel)
	fm.duration.Observe(time.Since(began).Seconds())
	if err != nil && w.pool.runCtx.Err() != nil {
		return // cancelled by the drain deadline: never recorded, never ACKed; handed back
	}
	switch {
	case err == nil:
		e.finish(lua.Succeeded, string(res), 0, "")
	case e.cancelReq.Load():
		e.finish(lua.Cancelled, "cancelled while running: "+err.Error(), 0, "cancelled")
	case timeout > 0 && errors.Is(err, context.DeadlineExceeded) && tctx.Err() != nil:
		w.fail(e, fmt.Errorf("timed out after %s: %w", timeout, err))
	default:
		w.fail(e, err)
	}
	w.record(e)
}

// confirm asks Redis whether an execution not known to be this worker's for half the
// visibility timeout or more is still its own, before its function starts: the worker
// may have been frozen or starved between the claim and now, and a peer's reaper may
// have taken the task over meanwhile and started its next attempt. One touch of its
// entry (as the heartbeat's), which also renews it. False when the task is no longer
// this execution's: the function is not called, and the entry is left to its new owner.
// When Redis does not answer, true: nothing shows the task was taken over, and the
// completion's fence settles it as before (dropping the execution would hand the task
// to a reaper after the visibility timeout, a failure counted, for a short outage).
//
// It holds the touch pass, as a heartbeat's does, so its touch never lands after the
// drain's hand-back of the same execution; one handed back already is not started.
func (w *Worker) confirm(e *execution) bool {
	w.hold.beginTouch(0)
	defer w.hold.endTouch()
	if !w.hold.holds(e.queue, e.s.Band, e.s.Entry) {
		return false // handed back by the drain
	}
	ok, err := w.touchOwn(w.pool.runCtx, e.queue, []*execution{e})
	if err != nil {
		w.log.Warn("task: claimed long ago and its claim cannot be confirmed; started all the same",
			"queue", e.queue, "task", e.s.ID, "attempt", e.s.Attempt, "claimed", e.claimed, "err", err)
		return true
	}
	if !ok[0].Held() {
		w.log.Warn("task: claimed long ago and taken over by a peer meanwhile; not started",
			"queue", e.queue, "task", e.s.ID, "attempt", e.s.Attempt, "claimed", e.claimed)
		return false
	}
	if ok[0] == lua.StopRequested {
		e.cancelRequested()
	}
	return true
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
	w.completer.record(e)
}

// release forgets an execution whose fate is settled (recorded or handed back): the
// heartbeat stops touching its entry.
func (w *Worker) release(e *execution) {
	w.hold.remove(e)
	w.hold.active.Store(time.Now().UnixNano())
}
