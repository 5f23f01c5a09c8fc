package runtime

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux, served only with DTQ_PPROF

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Paths served on PORT.
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// Handler serves /healthz (the process is up), /readyz (the worker takes work: false
// while starting and once draining) and /metrics (Prometheus).
func (w *Worker) Handler() http.Handler {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.GET(PathHealthz, func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"ok": true, "worker_id": w.id, "status": w.status()})
	})
	e.GET(PathReadyz, func(c echo.Context) error {
		code := http.StatusOK
		if !w.Ready() {
			code = http.StatusServiceUnavailable
		}
		return c.JSON(code, map[string]any{"ready": code == http.StatusOK, "worker_id": w.id, "status": w.status(), "inflight": w.inflight.Load()})
	})
	e.GET(PathMetrics, echo.WrapHandler(promhttp.HandlerFor(w.metrics.reg, promhttp.HandlerOpts{})))
	if w.cfg.Pprof {
		e.GET("/debug/pprof/*", echo.WrapHandler(http.DefaultServeMux))
	}
	return e
}
