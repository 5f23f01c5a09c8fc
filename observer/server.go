// Package observer is dtq's read-only JSON API over queues, tasks and workers, with the
// operator actions (pause, resume, cancel, requeue, delete dead tasks, run now) behind a
// bearer token. It keeps no state of its own: every answer is read from Redis when
// asked, so any number of replicas give the same answers. See README.md for every
// endpoint.
package observer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/observer/ui"
)

// Options build a Server.
type Options struct {
	Config Config
	Redis  redis.UniversalClient
	Logger *slog.Logger     // nil: discard
	Now    func() time.Time // nil: time.Now
	// RequestTimeout bounds the Redis work of one request (0: 5 s).
	RequestTimeout time.Duration
	// PingEvery is the time between the pings of an idle event stream (0: PingEvery).
	PingEvery time.Duration
}

// Server serves the API.
type Server struct {
	cfg     Config
	rdb     redis.UniversalClient
	ks      keys.Space
	c       *client.Client
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration
	token   [sha256.Size]byte // of the configured token, compared in constant time
	reg     *prometheus.Registry
	reqs    *prometheus.CounterVec
	lat     *prometheus.HistogramVec

	hub         *hub         // the events stream's one reader (events.go)
	streams     atomic.Int64 // event streams open, capped by cfg.MaxStreams
	streamsOpen prometheus.Gauge
	pingEvery   time.Duration
}

// New returns a server; it does not touch Redis.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	s := &Server{cfg: o.Config, rdb: o.Redis, ks: keys.New(o.Config.KeyPrefix), log: o.Logger, now: o.Now,
		timeout: o.RequestTimeout, reg: prometheus.NewRegistry(),
		c: client.New(o.Redis, client.Options{Prefix: o.Config.KeyPrefix, Now: o.Now})}
	s.token = sha256.Sum256([]byte(o.Config.Token))
	s.hub, s.pingEvery = newHub(o.Redis, s.ks.Events(), o.Logger), cmp.Or(o.PingEvery, PingEvery)
	s.streamsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "dtq_observer_event_streams", Help: "Event streams open."})
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dtq_observer_requests_total", Help: "API requests served, by route and status code.",
	}, []string{"route", "code"})
	s.lat = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "dtq_observer_request_seconds", Help: "Duration of API requests, by route.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route"})
	s.reg.MustRegister(s.reqs, s.lat, s.streamsOpen, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// apiError is the body of every error answer.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Code    string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func fail(status int, code, format string, a ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.instrument)
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})))

	// The dashboard: index.html at /, its assets under /ui/ (see ui/).
	dash := ui.New()
	both := []string{http.MethodGet, http.MethodHead}
	e.Match(both, "/", echo.WrapHandler(http.HandlerFunc(dash.Index)))
	e.Match(both, ui.Prefix+"*", echo.WrapHandler(http.HandlerFunc(dash.Asset)))

	// Per route, not per group: a group's middleware would also answer the paths no
	// route matches (401 instead of 404).
	const v1 = "/api/v1"
	for path, h := range map[string]echo.HandlerFunc{
		"/workers": s.workers, "/queues": s.queues, "/queues/:q": s.queue,
		"/queues/:q/tasks": s.tasks, "/queues/:q/tasks/:id": s.task, "/cron": s.cronList,
	} {
		e.GET(v1+path, h, s.readAuth, s.bounded)
	}
	e.GET(v1+"/events", s.events, s.readAuth) // a stream: no request deadline
	for path, h := range map[string]echo.HandlerFunc{
		"/queues/:q/pause": s.pause, "/queues/:q/resume": s.resume,
		"/cron/:name/pause": s.cronPause, "/cron/:name/resume": s.cronResume,
		"/queues/:q/tasks/:id/cancel": s.cancel, "/queues/:q/dead/:id/requeue": s.requeue,
		"/queues/:q/dead/requeue": s.requeueDead, "/queues/:q/dead/delete": s.deleteDead,
		"/queues/:q/tasks/:id/run": s.runNow,
	} {
		e.POST(v1+path, h, s.actionAuth, s.bounded)
	}
	e.DELETE(v1+"/queues/:q/dead/:id", s.deleteOneDead, s.actionAuth, s.bounded)
	return e
}

// errorHandler answers every error as {"error", "code"}; Redis failures are logged
// (scrubbed) and answered 503.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ae := s.classify(err)
	if ae.Status >= 500 {
		s.log.Warn("observer: request failed", "method", c.Request().Method, "path", c.Path(), "status", ae.Status, "err", ae.Message)
	}
	if ae.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="dtq-observer"`)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	_ = c.JSON(ae.Status, ae)
}

func (s *Server) classify(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code := strings.ToLower(strings.ReplaceAll(http.StatusText(he.Code), " ", "_"))
		return &apiError{Status: he.Code, Code: code, Message: strings.ToLower(http.StatusText(he.Code))}
	}
	msg := redisconn.Scrub(err.Error(), s.cfg.RedisURL)
	switch {
	case errors.Is(err, client.ErrBadCursor):
		return fail(http.StatusBadRequest, "bad_cursor", "cursor: %s", msg)
	case errors.Is(err, client.ErrInvalid):
		return fail(http.StatusBadRequest, "bad_request", "%s", msg)
	case errors.Is(err, client.ErrNotFound):
		return fail(http.StatusNotFound, "not_found", "%s", msg)
	case errors.Is(err, client.ErrWrongStatus):
		return fail(http.StatusConflict, "wrong_state", "%s", msg)
	}
	switch redisconn.Classify(err) {
	case redisconn.Unreachable:
		return fail(http.StatusServiceUnavailable, "redis_unavailable", "redis unreachable: %s", msg)
	case redisconn.Refused:
		return fail(http.StatusServiceUnavailable, "redis_refused", "redis refuses the observer: %s", redisconn.RefusedCause(err))
	case redisconn.Answered:
		if queuestat.IsServerError(err) {
			return fail(http.StatusInternalServerError, "redis_error", "redis: %s", msg)
		}
	}
	return fail(http.StatusInternalServerError, "internal", "%s", msg)
}

// instrument counts and times every request by its route.
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = s.classify(err).Status
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.reqs.WithLabelValues(route, strconv.Itoa(status)).Inc()
		s.lat.WithLabelValues(route).Observe(time.Since(start).Seconds())
		return err
	}
}

// bounded gives the Redis work of an API request a deadline.
func (s *Server) bounded(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), s.timeout)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// authorized checks the bearer token in constant time (of the token's hash, so its
// length leaks nothing either).
func (s *Server) authorized(r *http.Request) *apiError {
	h := r.Header.Get("Authorization")
	if h == "" {
		return fail(http.StatusUnauthorized, "unauthorized", "an Authorization: Bearer header is required")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return fail(http.StatusUnauthorized, "unauthorized", "the Authorization header must be Bearer <token>")
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(got[:], s.token[:]) != 1 {
		return fail(http.StatusUnauthorized, "unauthorized", "wrong token")
	}
	return nil
}

func (s *Server) readAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.cfg.ReadOpen {
			if ae := s.authorized(c.Request()); ae != nil {
				return ae
			}
		}
		return next(c)
	}
}

// actionAuth lets an action through only with the token in the Authorization header,
// which a cross-site form or fetch cannot set without a CORS preflight (the observer
// answers none), and refuses form content types outright.
func (s *Server) actionAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.Token == "" {
			return fail(http.StatusForbidden, "actions_disabled", "actions are off: the observer was started without DTQ_OBSERVER_TOKEN")
		}
		if ae := s.authorized(c.Request()); ae != nil {
			return ae
		}
		if ct := c.Request().Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt != "application/json" {
				return fail(http.StatusUnsupportedMediaType, "unsupported_media_type", "an action takes no body, or a JSON one: Content-Type %q refused", ct)
			}
		}
		return next(c)
	}
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), min(s.timeout, 2*time.Second))
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		ae := s.classify(err)
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": ae.Message})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
