package runtime

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/internal/heapfloor"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
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
	// InstrumentRedis adds the worker's hook to Redis: it counts every round trip
	// (dtq_worker_redis_roundtrips_total) and feeds the worker's Redis health from
	// every command of the client. Set it only when the worker owns the client (dtq
	// worker does). Without it the client is left as it is, round trips are not
	// counted, and the health follows the outcomes of the worker's own commands.
	InstrumentRedis bool
	// Tracer, when set, runs every attempt in a consumer span that continues the trace
	// its producer stored with the task (trace.go). Nil: no span, and no trace read.
	Tracer trace.TracerProvider
}

// Worker runs functions on tasks from the priority streams of its queues. It composes
// the services of its loops — poller, reaper, scheduler (with its leader), heartbeat,
// completer and events publisher, each a type and a file — around the executions it
// holds (holdings) and the executor pool that runs them.
type Worker struct {
	*core                  // what every service reads: set in New, not changed after
	*tally                 // what the worker counts as it runs
	services               // the loops, each a type and a file
	stop     stopper       // why and how Run drains: Stop, StopAndCancel, stopSelf
	ran      atomic.Bool   // Run was called (a second call is refused)
	done     chan struct{} // closed when Run returned
}

// core is the worker's identity and collaborators, shared read-only by its services.
type core struct {
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

	metrics      *metrics
	redis        *redisHealth  // readiness follows it; a refusal for good ends Run
	redisUp      chan struct{} // poked (cap 1) whenever redis turns up: awaitRedis waits on it
	instrumented bool          // Options.InstrumentRedis: the hook feeds redis
	// callTag tells this process's claim calls from those of an earlier process with
	// the same worker id (a restart under a fixed DTQ_WORKER_ID): their receipts live
	// 60 s, and a call of the same name would get the other's reply.
	callTag string
	tracer  *tracer // nil: tracing off (trace.go)
}

// tally is what the worker counts and reports in its heartbeat.
type tally struct {
	state     atomic.Int32
	processed atomic.Int64
	failed    atomic.Int64
	retried   atomic.Int64
	startedAt time.Time
	callSeq   atomic.Int64 // numbers claim calls (their receipts)
}

// services are the worker's loops and the state they share.
type services struct {
	hold      *holdings // what the worker runs now: shared by the services
	pool      *pool     // the executors (exec.go)
	poller    *poller
	reaper    *reaper
	scheduler *scheduler
	leader    *leader
	heartbeat *heartbeat
	completer *completer
	events    *events
}

// stopper holds the requests to stop: quit begins the drain, hard (StopAndCancel)
// cuts its wait for running functions short.
type stopper struct {
	quit     chan struct{}
	quitOnce sync.Once
	hard     chan struct{}
	hardOnce sync.Once
}

// Worker states, as reported in the heartbeat.
const (
	stateStarting int32 = iota
	stateRunning
	stateDraining
	stateStopped
)

// New builds a worker. It does not touch Redis (Run does), starts nothing, and adds no
// hook to the client unless Options.InstrumentRedis asks for it.
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
		core: &core{
			cfg: cfg, pprof: o.Pprof, rdb: o.Redis, reg: o.Registry, now: now,
			ks: keys.New(cfg.KeyPrefix), id: cfg.WorkerID,
			byName:       map[string]keys.Queue{},
			vtMS:         cfg.VisibilityTimeout.Milliseconds(),
			keepMS:       cfg.ResultTTL.Milliseconds(),
			defTimeout:   cfg.DefaultTimeout,
			defBackoff:   ExpBackoff(cfg.RetryBase, cfg.RetryMax),
			instrumented: o.InstrumentRedis, tracer: newTracer(o.Tracer),
		},
		tally:    &tally{},
		services: services{hold: newHoldings()},
		stop:     stopper{quit: make(chan struct{}), hard: make(chan struct{})},
		done:     make(chan struct{}),
	}
	w.log = log.With("worker_id", w.id)
	w.callTag = strconv.FormatUint(uint64(rand.Uint32()), 36)
	for _, q := range cfg.Queues {
		kq := w.ks.Queue(q)
		w.queues = append(w.queues, kq)
		w.byName[q] = kq
		w.queueNames = append(w.queueNames, q)
	}
	w.metrics = newMetrics(w.id)
	w.redisUp = make(chan struct{}, 1)
	w.redis = newRedisHealth(w)
	w.metrics.concurrency.Set(float64(cfg.Concurrency))
	w.events = newEvents(w.rdb, w.ks.Events(), cfg.EventsMaxLen, w.log, o.Observe, w.metrics.eventsDropped.Inc)
	w.pool = newPool(w, cfg.Concurrency, 4*cfg.Concurrency+keys.Bands*len(cfg.Queues)+64)
	w.completer = newCompleter(w, 4*cfg.Concurrency+64)
	w.poller = newPoller(w)
	w.reaper = newReaper(w)
	w.leader = &leader{rdb: w.rdb, lock: w.ks.SchedulerLock(), token: w.id, ttlMS: cfg.SchedulerLockTTL.Milliseconds(),
		log: w.log, gauge: w.metrics.leader, notify: w.publish, seen: w.sawRedis}
	w.scheduler = newScheduler(w, w.leader)
	w.heartbeat = &heartbeat{w: w}
	if o.InstrumentRedis {
		w.rdb.AddHook(roundTrips{w.metrics.roundTrips, w.redis, &w.reaper.unreachableAt})
	}
	return w, nil
}

// Fetched is closed once the worker's first fetch of work returned: what can wait
// (the HTTP endpoints, the runtime metrics) starts after it.
func (w *Worker) Fetched() <-chan struct{} { return w.poller.fetched }

// ID is the worker id: consumer name, lock token, metrics label.
func (w *Worker) ID() string { return w.id }

// Ready reports whether the worker takes work: false while starting, once draining,
// and while Redis does not answer it.
func (w *Worker) Ready() bool { return w.state.Load() == stateRunning && w.redis.Up() }

// Draining reports whether the worker has begun to drain.
func (w *Worker) Draining() bool { return w.state.Load() >= stateDraining }

// Inflight is the number of executions started and not yet recorded.
func (w *Worker) Inflight() int64 { return w.hold.inflight.Load() }

func (w *Worker) publish(ev Event) {
	ev.Worker = w.id
	w.events.publish(ev)
}

// restarted counts a supervised loop's restart (the series appears with the first).
func (w *Worker) restarted(loop string) func() {
	return func() { w.metrics.loopRestarts.WithLabelValues(loop).Inc() }
}

// errRunTwice is Run's error when the worker already ran.
var errRunTwice = errors.New("runtime: Run called twice")

// Run serves until ctx ends (or Stop, StopAndCancel, or the worker's own limits), then
// drains (drain.go): it stops fetching, waits up to the drain timeout for running
// functions, cancels the rest and hands their entries back, and returns once the final
// heartbeat is written. Call Run once. It returns nil after a drain, or an error
// wrapping ErrRedisRefused when Redis refused the worker for good (it then drains as
// on SIGTERM).
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return errRunTwice
	}
	defer close(w.done)
	w.startedAt = w.now()
	w.hold.active.Store(w.startedAt.UnixNano())
	w.state.Store(stateStarting)
	// The services run until the drain stops them, whatever ctx does: ctx only begins
	// the drain.
	bg := context.WithoutCancel(ctx)
	// Start-up waits for nothing and puts the first fetch first: groups are created by
	// the claim script on first use, scripts load on the first EVALSHA miss, executors
	// start on demand, and the rest — the heartbeat, the reaper and the scheduler —
	// begins as soon as the first fetch returned (the runtime metrics cost nothing
	// until scraped). On a cold start every first run of a code path costs page
	// faults, and those would otherwise stand between the worker and its first task.
	_ = w.events.Start(bg)
	_ = w.completer.Start(bg)
	_ = w.poller.Start(bg)
	select {
	case <-w.poller.fetched: // the poller closes it after its first fetch
	case <-ctx.Done(): // a stop before the first fetch: the drain stops the poller
	case <-w.stop.quit:
	}
	// "Started" means Redis answered: if that fetch failed, wait for its first reply.
	answered := w.awaitRedis(ctx)
	// The heap floor, at the process's first collection: placed now, its allocation
	// would set one off by itself in every start (internal/heapfloor).
	heapfloor.KeepAtFirstCollection(w.cfg.HeapFloorMB)
	w.state.Store(stateRunning)
	_ = w.heartbeat.Start(bg) // its first pass writes at once
	_ = w.reaper.Start(bg)
	_ = w.scheduler.Start(bg)
	if answered {
		w.publish(Event{Type: EventWorkerStarted})
		w.log.Info("worker: started", "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)
	}

	select {
	case <-ctx.Done():
	case <-w.stop.quit:
	case <-w.redis.Refused():
	}
	w.drain()
	if err := w.redis.Err(); err != nil {
		return refusedError{err}
	}
	return nil
}

// Stop begins the drain, as SIGTERM does, and waits until Run has returned or ctx
// ends (it then returns ctx's error; the drain goes on). Before Run it returns at once,
// and a later Run drains at once. Safe to call twice and from several goroutines.
func (w *Worker) Stop(ctx context.Context) error {
	w.stop.quitOnce.Do(func() { close(w.stop.quit) })
	if !w.ran.Load() {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopAndCancel is the hard stop: it cancels running functions at once (no drain
// timeout), hands their entries back, then drains and waits as Stop. Safe to call
// twice, after Stop, and before Run.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.stop.hardOnce.Do(func() { close(w.stop.hard) })
	return w.Stop(ctx)
}

// stopSelf begins the drain from inside (a task limit or the idle time reached), as a
// SIGTERM would; Run then returns nil and the process exits 0.
func (w *Worker) stopSelf(why string) {
	w.stop.quitOnce.Do(func() {
		w.log.Info("worker: stopping by itself", "reason", why)
		close(w.stop.quit)
	})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

func (w *Worker) status() liveness.Status {
	switch w.state.Load() {
	case stateStarting:
		return liveness.Starting
	case stateRunning:
		if w.hold.inflight.Load() > 0 {
			return liveness.Busy
		}
		return liveness.Ready
	case stateDraining:
		return liveness.Draining
	default:
		return liveness.Stopped
	}
}
