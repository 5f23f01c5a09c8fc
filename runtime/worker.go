package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/lua"
)

// Options are the worker's collaborators; only Config, Redis and Registry are required.
type Options struct {
	Config   Config
	Redis    redis.UniversalClient
	Registry *Registry
	Logger   *slog.Logger
	// Observe, when set, is called synchronously with every event the worker publishes,
	// including ones not sent to Redis. Tests wait on it instead of sleeping.
	Observe func(Event)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Pprof serves /debug/pprof/ on the worker's Handler when DTQ_PPROF is set (nil:
	// not served). The runtime imports no profiler: a program that wants one passes
	// it, e.g. http.DefaultServeMux after importing net/http/pprof.
	Pprof http.Handler
}

// Worker runs functions on tasks from the priority streams of its queues.
type Worker struct {
	cfg    Config
	pprof  http.Handler
	rdb    redis.UniversalClient
	reg    *Registry
	log    *slog.Logger
	now    func() time.Time
	ks     keys.Space
	id     string
	queues []keys.Queue
	byName map[string]keys.Queue
	// queueNames are the served queues' names, as the heartbeat adds them to the queue set
	queueNames []any

	vtMS       int64
	keepMS     int64
	defTimeout time.Duration
	defBackoff Backoff

	metrics *metrics
	events  *events
	redis   *redisHealth // readiness follows it; a refusal for good ends Run

	state     atomic.Int32
	inflight  atomic.Int64
	processed atomic.Int64
	failed    atomic.Int64
	retried   atomic.Int64
	startedAt time.Time

	heldMu sync.Mutex
	held   map[heldKey]*execution // every execution started and not yet recorded

	jobs        chan *execution
	completions chan *execution
	slotFree    chan struct{}

	// fetchCtx ends when the worker starts draining: poll, reaper and scheduler stop.
	fetchCtx    context.Context
	stopFetch   context.CancelFunc
	runCtx      context.Context // ends at the drain deadline: running functions are cancelled
	cancelRun   context.CancelFunc
	running     atomic.Int64   // functions executing now
	execDone    chan struct{}  // signalled when an execution returns
	sendWG      sync.WaitGroup // hand-offs waiting for room in jobs
	poolWG      sync.WaitGroup
	completerWG sync.WaitGroup
	compMu      sync.RWMutex // guards compClosed against a late record
	compClosed  bool

	blocker  *blocker
	leader   atomic.Bool
	lockedAt atomic.Int64 // unix ms of the pass that last took or renewed the scheduler lock
	lastBeat atomic.Int64 // unix ns of the last heartbeat written
	// unreachableAt is the unix ns of the last command that found Redis unreachable
	unreachableAt atomic.Int64
	passes        atomic.Int64 // scheduler passes led
	begun         atomic.Int64 // tasks started since Run began (DTQ_WORKER_MAX_TASKS)
	active        atomic.Int64 // unix ns of the last start or finish (DTQ_WORKER_IDLE_EXIT_S)
	quit          chan struct{}
	quitOnce      sync.Once

	firstFetch     chan struct{} // closed when the poll loop's first fetch returned
	firstFetchOnce sync.Once
	executors      atomic.Int64 // executor goroutines started
	idleExecutors  atomic.Int64 // executors waiting for a job
	callSeq        atomic.Int64 // numbers claim calls (their receipts)
	// callTag tells this process's claim calls from those of an earlier process with
	// the same worker id (a restart under a fixed DTQ_WORKER_ID): their receipts live
	// 60 s, and a call of the same name would get the other's reply.
	callTag string
	// The claim calls of the poll and reaper loops, kept across their restarts.
	pollCalls, reapCalls *calls
	// What each fetching loop skips while Redis refuses its keys (kept across restarts).
	pollFaults, reapFaults, schedFaults *faults

	knownMu sync.Mutex
	known   []string // every queue ever enqueued to, as of the scheduler's last pass

	retention *retention // the scheduler leader's dead-task trimming (retention.go)
}

// Worker states, as reported in the heartbeat.
const (
	stateStarting int32 = iota
	stateRunning
	stateDraining
	stateStopped
)

// New builds a worker. It does not touch Redis: Run does.
func New(o Options) (*Worker, error) {
	if o.Redis == nil || o.Registry == nil {
		return nil, errors.New("runtime: New needs Redis and a Registry")
	}
	cfg := o.Config.withWorkerID()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	w := &Worker{
		cfg: cfg, pprof: o.Pprof, rdb: o.Redis, reg: o.Registry, now: now,
		ks: keys.New(cfg.KeyPrefix), id: cfg.WorkerID,
		byName:      map[string]keys.Queue{},
		vtMS:        cfg.VisibilityTimeout.Milliseconds(),
		keepMS:      cfg.ResultTTL.Milliseconds(),
		defTimeout:  cfg.DefaultTimeout,
		defBackoff:  ExpBackoff(cfg.RetryBase, cfg.RetryMax),
		held:        map[heldKey]*execution{},
		jobs:        make(chan *execution, 4*cfg.Concurrency+keys.Bands*len(cfg.Queues)+64),
		completions: make(chan *execution, 4*cfg.Concurrency+64),
		slotFree:    make(chan struct{}, 1),
		execDone:    make(chan struct{}, 1),
		quit:        make(chan struct{}),
		firstFetch:  make(chan struct{}),
	}
	w.log = log.With("worker_id", w.id)
	w.callTag = strconv.FormatUint(uint64(rand.Uint32()), 36)
	w.pollCalls, w.reapCalls = w.newCalls(), w.newCalls()
	w.pollFaults, w.reapFaults, w.schedFaults = w.newFaults("poll"), w.newFaults("reaper"), w.newFaults("scheduler")
	for _, q := range cfg.Queues {
		kq := w.ks.Queue(q)
		w.queues = append(w.queues, kq)
		w.byName[q] = kq
		w.queueNames = append(w.queueNames, q)
	}
	w.metrics = newMetrics(w.id)
	w.redis = newRedisHealth(w)
	w.rdb.AddHook(roundTrips{w.metrics.roundTrips, w.redis, &w.unreachableAt})
	w.metrics.concurrency.Set(float64(cfg.Concurrency))
	w.events = newEvents(w.rdb, w.ks.Events(), cfg.EventsMaxLen, w.log, o.Observe, w.metrics.eventsDropped.Inc)
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.runCtx, w.cancelRun = context.WithCancel(context.Background())
	return w, nil
}

// Fetched is closed once the worker's first fetch of work returned: what can wait
// (the HTTP endpoints, the runtime metrics) starts after it.
func (w *Worker) Fetched() <-chan struct{} { return w.firstFetch }

// ID is the worker id: consumer name, lock token, metrics label.
func (w *Worker) ID() string { return w.id }

// Ready reports whether the worker takes work: false while starting, once draining,
// and while Redis does not answer it.
func (w *Worker) Ready() bool { return w.state.Load() == stateRunning && w.redis.Up() }

// Draining reports whether the worker has begun to drain.
func (w *Worker) Draining() bool { return w.state.Load() >= stateDraining }

// Inflight is the number of executions started and not yet recorded.
func (w *Worker) Inflight() int64 { return w.inflight.Load() }

func (w *Worker) publish(ev Event) {
	ev.Worker = w.id
	w.events.publish(ev)
}

// Run serves until ctx ends, then drains: it stops fetching, waits up to the drain
// timeout for running functions, cancels the rest and hands their entries back, and
// returns once the final heartbeat is written. Call Run once. It returns nil, or an
// error wrapping ErrRedisRefused when Redis refused the worker for good (it then
// drains as on SIGTERM).
func (w *Worker) Run(ctx context.Context) error {
	w.startedAt = w.now()
	w.active.Store(w.startedAt.UnixNano())
	w.state.Store(stateStarting)
	// Start-up waits for nothing and puts the first fetch first: groups are created by
	// the claim script on first use, scripts load on the first EVALSHA miss, executors
	// start on demand, and the rest — the "starting" heartbeat, the reaper and scheduler
	// loops, the runtime metrics — begins as soon as the first fetch returned. On a cold
	// start every first run of a code path costs page faults, and those would otherwise
	// stand between the worker and its first task.
	w.events.start()
	w.blocker = newBlocker(w.rdb)
	w.completerWG.Add(1)
	go w.completer()

	var loops sync.WaitGroup
	start := func(name string, fn func(context.Context) error) {
		loops.Add(1)
		go func() {
			defer loops.Done()
			w.supervise(w.fetchCtx, name, fn)
		}()
	}
	start("poll", w.pollLoop)
	<-w.firstFetch // the poll loop closes it after its first fetch (the drain too)
	// "Started" means Redis answered: if that fetch failed, wait for its first reply.
	answered := w.awaitRedis(ctx)
	w.state.Store(stateRunning)
	started := make(chan struct{})
	go func() { defer close(started); w.heartbeatOnce(context.Background()) }()
	go w.metrics.addRuntimeCollectors()
	start("reaper", w.reaperLoop)
	start("scheduler", w.schedulerLoop)
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		<-started
		w.lastBeat.Store(0) // the first loop pass says "ready" at once
		w.supervise(hbCtx, "heartbeat", w.heartbeatLoop)
	}()
	if answered {
		w.publish(Event{Type: EventWorkerStarted})
		w.log.Info("worker: started", "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)
	}

	select {
	case <-ctx.Done():
	case <-w.quit:
	case <-w.redis.Refused():
	}
	w.drain(&loops)
	stopHB()
	<-hbDone
	w.finalHeartbeat()
	w.publish(Event{Type: EventWorkerStopped, Detail: fmt.Sprintf("processed=%d failed=%d", w.processed.Load(), w.failed.Load())})
	w.events.close()
	w.blocker.close()
	w.log.Info("worker: stopped")
	return w.refusal()
}

// stopSelf begins the drain from inside (a task limit or the idle time reached), as a
// SIGTERM would; Run then returns nil and the process exits 0.
func (w *Worker) stopSelf(why string) {
	w.quitOnce.Do(func() {
		w.log.Info("worker: stopping by itself", "reason", why)
		close(w.quit)
	})
}

// drain implements SIGTERM: stop fetching, wait, cancel, hand back.
func (w *Worker) drain(loops *sync.WaitGroup) {
	w.stopFetch()
	w.firstFetchOnce.Do(func() { close(w.firstFetch) }) // a stop before the first fetch
	// No more hand-offs: leave at once, and again once the loops are done, in case a
	// claim in flight registered again.
	w.leave()
	w.state.Store(stateDraining)
	w.metrics.draining.Set(1)
	w.log.Info("worker: draining", "inflight", w.inflight.Load(), "timeout_s", w.cfg.DrainTimeout.Seconds())
	w.blocker.unblockUntil(loops)
	loops.Wait()
	w.leave()
	w.heartbeatOnce(context.Background()) // status draining

	if w.leader.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := lua.LockRelease(ctx, w.rdb, w.ks.SchedulerLock(), w.id); err != nil {
			w.log.Warn("scheduler: lock release failed", "err", err)
		}
		cancel()
		w.leader.Store(false)
		w.metrics.leader.Set(0)
	}

	deadline := time.NewTimer(w.cfg.DrainTimeout)
	defer deadline.Stop()
	gaveUp := false
	for !gaveUp && w.inflight.Load() > 0 {
		select {
		case <-w.slotFree:
		case <-deadline.C:
			w.giveUp()
			gaveUp = true
		}
	}
	w.sendWG.Wait()
	close(w.jobs)
	if gaveUp {
		waitTimeout(&w.poolWG, time.Second) // a function ignoring cancellation is left behind
	} else {
		w.poolWG.Wait()
	}
	w.compMu.Lock()
	w.compClosed = true
	close(w.completions)
	w.compMu.Unlock()
	w.completerWG.Wait()
}

// waitTimeout waits for wg at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// giveUp cancels running functions at the drain deadline and hands their entries back
// (idle = the visibility timeout, so a peer's next reaper pass takes them at once),
// without ACK. Functions that ignore cancellation are detached: their results are
// discarded.
func (w *Worker) giveUp() {
	w.log.Warn("worker: drain timeout, cancelling running functions", "inflight", w.inflight.Load())
	w.cancelRun()
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	for w.running.Load() > 0 {
		select {
		case <-w.execDone:
			continue
		case <-grace.C:
			w.log.Warn("worker: functions ignore cancellation; detaching them", "running", w.running.Load())
		}
		break
	}
	// Everything still held now has no outcome to record: cancelled or detached,
	// or queued behind the pool and never started.
	w.heldMu.Lock()
	var back []*execution
	for _, e := range w.held {
		if e.recorded.CompareAndSwap(false, true) {
			back = append(back, e)
		}
	}
	w.heldMu.Unlock()
	w.handBack(back)
}

// touchBack hands back held entries, by queue: idle = the visibility timeout (a peer's
// next reaper pass takes them) and the attempt marked as handed back, still not ACKed.
func (w *Worker) touchBack(byQueue map[string][]lua.Held) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for name, hs := range byQueue {
		ok, err := lua.Touch(ctx, w.rdb, w.byName[name], w.id, w.vtMS, true, hs)
		if err != nil {
			w.log.Warn("drain: hand back failed; peers reclaim after the visibility timeout", "queue", name, "err", err)
			continue
		}
		for i, h := range hs {
			if ok[i] {
				w.publish(Event{Type: EventHandedBack, Queue: name, TaskID: h.ID, Attempt: h.Attempt})
			}
		}
	}
}

func (w *Worker) handBack(list []*execution) {
	byQueue := map[string][]lua.Held{}
	for _, e := range list {
		byQueue[e.q.Name] = append(byQueue[e.q.Name], e.heldRef())
	}
	w.touchBack(byQueue)
	for _, e := range list {
		w.metrics.count(e.fnLabel, OutcomeHandedBack)
		w.release(e)
	}
}

// supervise runs fn until ctx ends; an error or a panic is logged and fn restarts
// after 0.5–1.5 s. The worker never dies of a loop.
func (w *Worker) supervise(ctx context.Context, name string, fn func(context.Context) error) {
	for {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			return fn(ctx)
		}()
		if ctx.Err() != nil {
			return
		}
		w.metrics.loopRestarts.WithLabelValues(name).Inc()
		w.log.Error(name+": loop failed; restarting", "err", err)
		if !sleepCtx(ctx, jitter(time.Second, 0.5)) {
			return
		}
	}
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter returns d ± frac·d, uniformly.
func jitter(d time.Duration, frac float64) time.Duration {
	f := 1 + frac*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// jitterUp returns d lengthened by a random fraction of it up to frac.
func jitterUp(d time.Duration, frac float64) time.Duration {
	return time.Duration(float64(d) * (1 + frac*rand.Float64()))
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

func (w *Worker) status() string {
	switch w.state.Load() {
	case stateStarting:
		return liveness.Starting
	case stateRunning:
		if w.inflight.Load() > 0 {
			return liveness.Busy
		}
		return liveness.Ready
	case stateDraining:
		return liveness.Draining
	default:
		return liveness.Stopped
	}
}
