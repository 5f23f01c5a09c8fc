package runtime

import (
	"encoding/json"
	"net/http"

	"github.com/dtq/dtq/internal/prom"
)

// Paths served on PORT.
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// Handler serves /healthz (the process is up), /readyz (the worker takes work: 503
// while starting, once draining and while Redis does not answer it, with the reason)
// and /metrics (Prometheus), GET (and HEAD) only. Three routes need no framework: the
// standard library's mux keeps echo, and what it links (encoding/xml, autocert), out
// of the worker's start.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]any{"ok": true, "worker_id": w.id, "status": w.status()})
	})
	mux.HandleFunc("GET "+PathReadyz, func(rw http.ResponseWriter, _ *http.Request) {
		body := map[string]any{"ready": true, "worker_id": w.id, "status": w.status(), "inflight": w.hold.inflight.Load(), "redis_up": w.redis.Up()}
		if !w.Ready() {
			body["ready"] = false
			body["reason"] = w.notReadyReason()
			writeJSON(rw, http.StatusServiceUnavailable, body)
			return
		}
		writeJSON(rw, http.StatusOK, body)
	})
	mux.Handle("GET "+PathMetrics, prom.Handler(w.metrics.reg))
	if w.cfg.Pprof && w.pprof != nil {
		mux.Handle("GET /debug/pprof/", w.pprof)
	}
	return mux
}

// writeJSON writes v as JSON with the status code.
func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(v)
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
