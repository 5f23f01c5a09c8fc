package runtime

import (
	"sync"

	"github.com/dtq/dtq/internal/prom"
)

// Outcomes counted by dtq_worker_tasks_total.
const (
	OutcomeSucceeded  = "succeeded"
	OutcomeRetried    = "retried"
	OutcomeDead       = "dead"
	OutcomeCancelled  = "cancelled" // stopped on a cancel request while it ran
	OutcomeFenced     = "fenced"
	OutcomeHandedBack = "handed_back"
	OutcomeAbsorbed   = "absorbed"
	OutcomeInvalid    = "invalid"
	OutcomeReturned   = "returned" // delivered while its queue was paused, put back unstarted
)

// metrics are one worker's Prometheus metrics, on a registry of its own (so several
// workers can live in one process, as in tests). They are internal/prom's, not
// client_golang's: its package initialisation alone (a default registry with a Go and
// a process collector, and procfs, protobuf and expvar under it) cost the worker's
// cold start more than all the rest of its initialisation.
type metrics struct {
	reg *prom.Registry

	inflight      *prom.Gauge
	concurrency   *prom.Gauge
	leader        *prom.Gauge
	draining      *prom.Gauge
	tasks         *prom.CounterVec
	duration      *prom.HistogramVec
	pickup        *prom.Histogram
	loopRestarts  *prom.CounterVec
	redisErrors   *prom.CounterVec
	eventsDropped *prom.Counter
	scheduled     *prom.Counter
	roundTrips    *prom.Counter
	redisUp       *prom.Gauge
	handoffs      *prom.Counter
	rescued       *prom.Counter
	deadTrimmed   *prom.CounterVec

	mu     sync.Mutex
	byFunc map[string]*funcMetrics // cached label children: no per-task label hashing
}

type funcMetrics struct {
	outcome  map[string]*prom.Counter
	duration prom.Observer
}

func newMetrics(workerID string) *metrics {
	reg := prom.NewRegistry()
	l := prom.Labels{"worker_id": workerID}
	m := &metrics{
		reg: reg,
		inflight: prom.NewGauge(prom.GaugeOpts{Name: "dtq_worker_inflight", ConstLabels: l,
			Help: "Tasks this worker has started and not yet recorded as finished."}),
		concurrency: prom.NewGauge(prom.GaugeOpts{Name: "dtq_worker_concurrency", ConstLabels: l,
			Help: "Functions this worker runs at once (DTQ_WORKER_CONCURRENCY)."}),
		leader: prom.NewGauge(prom.GaugeOpts{Name: "dtq_worker_scheduler_leader", ConstLabels: l,
			Help: "1 while this worker holds the scheduler lock."}),
		draining: prom.NewGauge(prom.GaugeOpts{Name: "dtq_worker_draining", ConstLabels: l,
			Help: "1 once the worker is draining."}),
		tasks: prom.NewCounterVec(prom.CounterOpts{Name: "dtq_worker_tasks_total", ConstLabels: l,
			Help: "Task executions and entries handled, by function and outcome (succeeded, retried, dead, fenced, handed_back, absorbed, invalid)."},
			[]string{"function", "outcome"}),
		duration: prom.NewHistogramVec(prom.HistogramOpts{Name: "dtq_worker_task_duration_seconds", ConstLabels: l,
			Help:    "Wall time of function executions.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}},
			[]string{"function"}),
		pickup: prom.NewHistogram(prom.HistogramOpts{Name: "dtq_worker_pickup_seconds", ConstLabels: l,
			Help:    "Time from a task becoming runnable (queued) to its execution starting.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 300}}),
		loopRestarts: prom.NewCounterVec(prom.CounterOpts{Name: "dtq_worker_loop_restarts_total", ConstLabels: l,
			Help: "Supervised loops restarted after an error or panic."}, []string{"loop"}),
		redisErrors: prom.NewCounterVec(prom.CounterOpts{Name: "dtq_worker_redis_errors_total", ConstLabels: l,
			Help: "Redis calls that failed, by operation."}, []string{"op"}),
		eventsDropped: prom.NewCounter(prom.CounterOpts{Name: "dtq_worker_events_dropped_total", ConstLabels: l,
			Help: "Lifecycle events dropped because the publish buffer was full."}),
		scheduled: prom.NewCounter(prom.CounterOpts{Name: "dtq_worker_scheduler_enqueued_total", ConstLabels: l,
			Help: "Delayed tasks and retries this worker's scheduler put on their streams."}),
		roundTrips: prom.NewCounter(prom.CounterOpts{Name: "dtq_worker_redis_roundtrips_total", ConstLabels: l,
			Help: "Commands and pipelines sent to Redis (network round trips)."}),
		redisUp: prom.NewGauge(prom.GaugeOpts{Name: "dtq_worker_redis_up", ConstLabels: l,
			Help: "1 while Redis answers the worker's commands; 0 before its first answer, while it is unreachable and while it refuses the worker."}),
		handoffs: prom.NewCounter(prom.CounterOpts{Name: "dtq_worker_handoffs_total", ConstLabels: l,
			Help: "Tasks an enqueue started for this worker while it waited idle (no claim round trip)."}),
		rescued: prom.NewCounter(prom.CounterOpts{Name: "dtq_worker_handoffs_rescued_total", ConstLabels: l,
			Help: "Tasks handed to a worker that never read them (it died waiting), put back on their stream by this worker as scheduler leader."}),
		deadTrimmed: prom.NewCounterVec(prom.CounterOpts{Name: "dtq_worker_dead_trimmed_total", ConstLabels: l,
			Help: "Dead tasks this worker deleted as scheduler leader, beyond DTQ_DEAD_MAX or older than DTQ_DEAD_TTL_S (every leader's: the queue's stats hash, field dead_trimmed)."},
			[]string{"queue"}),
		byFunc: map[string]*funcMetrics{},
	}
	reg.MustRegister(m.inflight, m.concurrency, m.leader, m.draining, m.tasks, m.duration, m.pickup,
		m.loopRestarts, m.redisErrors, m.eventsDropped, m.scheduled, m.roundTrips, m.redisUp, m.handoffs, m.rescued, m.deadTrimmed,
		// The Go runtime's and the process's metrics (client_golang's default
		// collectors' families) cost nothing until a scrape reads them.
		prom.NewGoCollector(), prom.NewProcessCollector())
	return m
}

func (m *metrics) fn(name string) *funcMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.byFunc[name]
	if f == nil {
		f = &funcMetrics{outcome: map[string]*prom.Counter{}, duration: m.duration.WithLabelValues(name)}
		for _, o := range []string{OutcomeSucceeded, OutcomeRetried, OutcomeDead, OutcomeCancelled, OutcomeFenced, OutcomeHandedBack, OutcomeAbsorbed, OutcomeInvalid, OutcomeReturned} {
			f.outcome[o] = m.tasks.WithLabelValues(name, o)
		}
		if len(m.byFunc) < 1000 { // a flood of unknown names must not grow this without bound
			m.byFunc[name] = f
		}
	}
	return f
}

func (m *metrics) count(function, outcome string) { m.fn(function).outcome[outcome].Inc() }
