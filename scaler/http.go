package scaler

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/queuestat"
)

func (s *Scaler) routes() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error {
		select {
		case <-s.stopping:
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "stopping"})
		default:
		}
		if !s.ready.Load() {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "redis unreachable"})
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       2*s.cfg.RedisTimeout + time.Second,
	})))
	return e
}

var (
	descLag = prometheus.NewDesc("dtq_queue_lag",
		"Entries of a queue's priority band not yet delivered to a worker.", []string{"queue", "priority"}, nil)
	descPending = prometheus.NewDesc("dtq_queue_pending",
		"Entries of a queue's priority band delivered and not acknowledged (the PEL).", []string{"queue", "priority"}, nil)
	descDue = prometheus.NewDesc("dtq_queue_scheduled_due",
		"Scheduled tasks and retries of a queue that are due now, and scheduler claims in flight.", []string{"queue"}, nil)
	descDead = prometheus.NewDesc("dtq_queue_dead",
		"Tasks of a queue that used up their retries.", []string{"queue"}, nil)
	descWorkers = prometheus.NewDesc("dtq_workers",
		"Workers by liveness, computed from heartbeat age.", []string{"liveness"}, nil)
	descUp = prometheus.NewDesc("dtq_scaler_redis_up",
		"1 when this scrape read Redis, 0 when it failed.", nil, nil)
	descLimited = prometheus.NewDesc("dtq_scaler_limited_backlog",
		"Backlog of a queue beyond what its own rate or concurrency limit lets run at once (its concurrency, or its rate a second): work no added replica can start.", []string{"queue"}, nil)
	descOmitted = prometheus.NewDesc("dtq_scaler_metrics_queues_omitted",
		"Known queues this scrape left out: more than DTQ_SCALER_MAX_QUEUES.", nil, nil)
)

func (s *Scaler) registerMetrics() {
	s.rpcs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dtq_scaler_grpc_requests_total", Help: "gRPC requests served, by method and code.",
	}, []string{"method", "code"})
	reads := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dtq_scaler_redis_read_seconds",
		Help:    "Duration of the scaler's pipelined signal reads, by result.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"result"})
	s.sig.observe = func(d time.Duration, err error) {
		r := "ok"
		if err != nil {
			r = "error"
		}
		reads.WithLabelValues(r).Observe(d.Seconds())
	}
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dtq_scaler_push_streams", Help: "Open StreamIsActive streams.",
	}, func() float64 { return float64(s.watch.count()) })
	pushQueues := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dtq_scaler_push_queues", Help: "Distinct queues the open StreamIsActive streams watch (at most DTQ_SCALER_MAX_QUEUES).",
	}, func() float64 { return float64(s.watch.queueCount()) })
	watched := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dtq_scaler_watched_queues", Help: "Queues in the shared read behind GetMetrics and IsActive (at most DTQ_SCALER_MAX_QUEUES).",
	}, func() float64 { return float64(s.sig.watchedCount()) })
	outside := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dtq_scaler_unwatched_queue_reads_total",
		Help: "Queues of GetMetrics and IsActive calls answered outside the shared read: absent (no key exists, read as zero) or limit (DTQ_SCALER_MAX_QUEUES reached, read for the caller alone).",
	}, []string{"reason"})
	for _, r := range []string{"absent", "limit"} {
		outside.WithLabelValues(r)
	}
	s.sig.outside = func(reason string, n int) { outside.WithLabelValues(reason).Add(float64(n)) }
	push := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "dtq_scaler_push_seconds",
		Help:    "Time from the stream entry that woke an idle queue to its StreamIsActive push of true.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	s.watch.pushed = func(d time.Duration) { push.Observe(d.Seconds()) }
	repeats := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dtq_scaler_push_repeats_total",
		Help: "StreamIsActive pushes of true sent again while active (DTQ_SCALER_PUSH_REPEAT_MS).",
	})
	s.watch.repeated = repeats.Inc
	s.reg.MustRegister(s.rpcs, reads, streams, pushQueues, watched, outside, push, repeats, queueCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// queueCollector reads the signal of every known queue (the queues set, and the queues
// ScaledObjects watch) at scrape time, so a Prometheus-based autoscaler (KEDA's
// prometheus trigger, Cloud Run, Knative) scales on the same numbers as the external
// scaler.
type queueCollector struct{ s *Scaler }

func (queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLag, descPending, descDue, descDead, descWorkers, descUp, descOmitted, descLimited} {
		ch <- d
	}
}

func (qc queueCollector) Collect(ch chan<- prometheus.Metric) {
	s := qc.s
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RedisTimeout)
	defer cancel()
	stats, workers, omitted, err := s.scrape(ctx)
	up := 1.0
	if err != nil {
		up = 0
		s.log.Warn("scaler: metrics scrape failed", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descOmitted, prometheus.GaugeValue, float64(omitted))
	if was := s.omitting.Swap(omitted > 0); omitted > 0 && !was {
		s.log.Warn("scaler: /metrics leaves out queues beyond DTQ_SCALER_MAX_QUEUES", "omitted", omitted, "max", s.cfg.MaxQueues)
	}
	for _, st := range stats {
		if st.Err != nil {
			s.log.Warn("scaler: queue unreadable", "queue", st.Queue, "err", st.Err)
			continue
		}
		for p := 0; p < keys.Bands; p++ {
			prio := strconv.Itoa(p)
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(st.Band[p].Lag), st.Queue, prio)
			ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Band[p].Pending), st.Queue, prio)
		}
		ch <- prometheus.MustNewConstMetric(descDue, prometheus.GaugeValue, float64(st.DueNow), st.Queue)
		ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(st.Dead), st.Queue)
		if run, ok := st.Limit.Runnable(); ok {
			limited := max(0, st.Backlog(queuestat.AllBands, true)-run)
			ch <- prometheus.MustNewConstMetric(descLimited, prometheus.GaugeValue, float64(limited), st.Queue)
		}
	}
	counts := map[liveness.Liveness]float64{liveness.Live: 0, liveness.Stale: 0, liveness.Gone: 0}
	for _, w := range workers {
		counts[w.Liveness]++
	}
	for l, n := range counts {
		ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, n, string(l))
	}
}

// scrape reads every known queue and the workers: the queue set, then one pipelined
// read of all queues, and the workers (two round trips). Known are the queues of the
// queue set (producers register them) and the queues of the shared read (which hold a
// key), at most MaxQueues of them: those of the queue set first, each part by name;
// omitted counts the rest.
func (s *Scaler) scrape(ctx context.Context) (stats []queuestat.Stat, workers []liveness.Worker, omitted int, err error) {
	names, err := s.c.SMembers(ctx, s.ks.Queues()).Result()
	if err != nil {
		return nil, nil, 0, err
	}
	set := map[string]bool{}
	var registered, watched []string
	for _, q := range names {
		if keys.ValidQueue(q) == nil && !set[q] {
			set[q] = true
			registered = append(registered, q)
		}
	}
	for _, q := range s.sig.watched() {
		if !set[q] {
			set[q] = true
			watched = append(watched, q)
		}
	}
	sort.Strings(registered)
	sort.Strings(watched)
	all := append(registered, watched...)
	if len(all) > s.cfg.MaxQueues {
		omitted = len(all) - s.cfg.MaxQueues
		all = all[:s.cfg.MaxQueues]
	}
	sort.Strings(all)
	specs := make([]queuestat.Spec, len(all))
	for i, q := range all {
		specs[i] = queuestat.Spec{Queue: q, Bands: queuestat.AllBands}
	}
	now := s.now()
	stats, err = queuestat.Read(ctx, s.c, s.ks, specs, now)
	if err != nil {
		return nil, nil, 0, err
	}
	workers, err = liveness.List(ctx, s.c, s.ks, now)
	if err != nil {
		return nil, nil, 0, err
	}
	return stats, workers, omitted, nil
}
