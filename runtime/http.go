package runtime

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Paths served on PORT.
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// Handler serves /healthz (the process is up), /readyz (the worker takes work: 503
// while starting, once draining and while Redis does not answer it, with the reason)
// and /metrics (Prometheus).
func (w *Worker) Handler() http.Handler {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.GET(PathHealthz, func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"ok": true, "worker_id": w.id, "status": w.status()})
	})
	e.GET(PathReadyz, func(c echo.Context) error {
		body := map[string]any{"ready": true, "worker_id": w.id, "status": w.status(), "inflight": w.hold.inflight.Load(), "redis_up": w.redis.Up()}
		if !w.Ready() {
			body["ready"] = false
			body["reason"] = w.notReadyReason()
			return c.JSON(http.StatusServiceUnavailable, body)
		}
		return c.JSON(http.StatusOK, body)
	})
	e.GET(PathMetrics, echo.WrapHandler(promhttp.HandlerFor(w.metrics.reg, promhttp.HandlerOpts{})))
	if w.cfg.Pprof && w.pprof != nil {
		e.GET("/debug/pprof/*", echo.WrapHandler(w.pprof))
	}
	return e
}

// notReadyReason says why Ready is false: the worker's state first, then Redis.
func (w *Worker) notReadyReason() string {
	switch w.state.Load() {
	case stateDraining, stateStopped:
		return "draining"
	}
	if r := w.redis.Reason(); r != "" {
		return r
	}
	if w.state.Load() == stateStarting {
		return "starting"
	}
	return "" // ready again since the check
}
