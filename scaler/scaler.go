package scaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/internal/tlsreload"
)

// ServiceName is the gRPC service KEDA calls; the health service reports it SERVING
// while Redis answers.
const ServiceName = "externalscaler.ExternalScaler"

// Options are what New needs beyond the Config.
type Options struct {
	Logger *slog.Logger     // nil: discard
	Now    func() time.Time // nil: time.Now
}

// Scaler is the KEDA external scaler: gRPC (externalscaler.ExternalScaler and the
// health service) and HTTP (/metrics, /healthz, /readyz), both reading Redis.
//
// Its shape is the worker's: New builds it and starts nothing, Run serves until its
// context ends. Serve and Stop do the same in two steps, on listeners of the caller's.
type Scaler struct {
	cfg   Config
	c     redis.UniversalClient
	ks    keys.Space
	log   *slog.Logger
	now   func() time.Time
	sig   *signal
	watch *watcher // the push loop (a service)
	probe *prober  // the readiness loop (a service)

	grpc   *grpc.Server
	health *health.Server
	http   *http.Server
	reg    *prometheus.Registry
	rpcs   *prometheus.CounterVec

	ready    atomic.Bool
	omitting atomic.Bool // the last scrape left queues out (logged once per spell)
	stopping chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	mu       sync.Mutex
	grpcAddr net.Addr
	httpAddr net.Addr
}

// New builds a scaler over client c. It starts nothing and does not listen yet (Run or
// Serve does), and never closes c.
func New(cfg Config, c redis.UniversalClient, o Options) (*Scaler, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Scaler{cfg: cfg, c: c, ks: keys.New(cfg.KeyPrefix), log: o.Logger, now: o.Now,
		stopping: make(chan struct{})}
	if cfg.MaxQueues <= 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	s.cfg = cfg
	s.sig = newSignal(c, s.ks, s.now, cfg.RedisTimeout)
	s.sig.maxQueues = cfg.MaxQueues
	s.watch = newWatcher(c, s.ks, s.now, s.log)
	s.watch.maxQueues = cfg.MaxQueues
	s.watch.timeout = cfg.RedisTimeout
	s.watch.poll = cfg.PushPoll
	s.watch.maxBlock = cfg.PushMaxBlock
	s.watch.repeat = cfg.PushRepeat
	s.probe = &prober{s: s}

	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.recoverUnary),
		grpc.ChainStreamInterceptor(s.recoverStream),
		// KEDA keeps one connection per scaler address; probe it so a client that
		// vanished without closing (a killed operator pod) frees its streams.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if cfg.TLSCertFile != "" {
		tc, err := tlsreload.Server(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile, "h2")
		if err != nil {
			return nil, fmt.Errorf("scaler %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterExternalScalerServer(s.grpc, &externalScaler{s: s})
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)

	s.reg = prometheus.NewRegistry()
	s.registerMetrics()
	s.http = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// GRPCServer is the gRPC server, for registering more services before Run or Serve.
func (s *Scaler) GRPCServer() *grpc.Server { return s.grpc }

// Run listens on the configured gRPC address and HTTP port and serves until ctx ends
// (or Stop), then stops as Stop does and returns nil. It returns at once with the
// error when it cannot listen. Call Run, or Serve, once.
func (s *Scaler) Run(ctx context.Context) error {
	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("scaler: gRPC listen on %s: %w", s.cfg.Addr, err)
	}
	hl, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(s.cfg.Port))
	if err != nil {
		_ = gl.Close()
		return fmt.Errorf("scaler: HTTP listen on port %d: %w", s.cfg.Port, err)
	}
	s.Serve(gl, hl)
	select {
	case <-ctx.Done():
	case <-s.stopping:
	}
	_ = s.Stop(context.Background()) // bounded by the shutdown timeout
	return nil
}

// Serve serves gRPC on gl and HTTP on hl (nil: no HTTP) until Stop; it returns at once.
func (s *Scaler) Serve(gl, hl net.Listener) {
	select {
	case <-s.stopping: // stopped: the servers refuse to serve again, and so do the loops
		_ = gl.Close()
		if hl != nil {
			_ = hl.Close()
		}
		return
	default:
	}
	s.mu.Lock()
	s.grpcAddr = gl.Addr()
	if hl != nil {
		s.httpAddr = hl.Addr()
	}
	s.mu.Unlock()
	// The loops run until Stop, which ends them after the servers.
	_ = s.watch.Start(context.Background())
	_ = s.probe.Start(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(gl); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("scaler: gRPC server failed", "err", err)
		}
	}()
	if hl != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.http.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("scaler: HTTP server failed", "err", err)
			}
		}()
	}
	s.log.Info("scaler: serving", "grpc", gl.Addr().String(), "http", addrString(hl), "tls", s.cfg.TLSCertFile != "", "mtls", s.cfg.TLSClientCAFile != "")
}

func addrString(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// GRPCAddr and HTTPAddr are the addresses served (once Run listens, or after Serve).
func (s *Scaler) GRPCAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpcAddr == nil {
		return ""
	}
	return s.grpcAddr.String()
}

func (s *Scaler) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpAddr == nil {
		return ""
	}
	return s.httpAddr.String()
}

// Stop ends open streams cleanly (a nil return, so KEDA reconnects after 2 s rather than
// backing off), waits for requests in flight until ctx ends or the shutdown timeout
// passes, whichever is first, then cuts the rest off and stops everything Serve
// started. It returns ctx's error when ctx ended first, else nil. Idempotent, safe
// before Serve and from several goroutines; a stopped Scaler does not serve again.
func (s *Scaler) Stop(parent context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.ready.Store(false)
		close(s.stopping)
		s.health.Shutdown()
		ctx, cancel := context.WithTimeout(parent, s.cfg.ShutdownTimeout)
		defer cancel()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
		if e := s.http.Shutdown(ctx); e != nil {
			_ = s.http.Close()
		}
		s.watch.Stop()
		s.probe.Stop()
		s.sig.stop()
		err = parent.Err()
	})
	s.wg.Wait()
	return err
}

// value reads one metric of m, from a read at most the cache TTL old, waiting at most
// two read timeouts (one read may be ahead of it).
func (s *Scaler) value(ctx context.Context, m Metadata, mt Metric) (int64, error) {
	wants := make([]want, len(m.Queues))
	for i, q := range m.Queues {
		wants[i] = want{queue: q, bands: m.Priorities, lead: m.ScheduledLead}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.RedisTimeout)
	defer cancel()
	v, err := s.sig.get(ctx, wants, s.cfg.CacheTTL)
	if err != nil {
		return 0, err
	}
	return m.Value(mt, v.stats, v.due), nil
}

// prober pings Redis every couple of seconds (jittered) and keeps readiness and the
// health status of ServiceName in step; a service.
type prober struct {
	service.Base
	s *Scaler
}

// Start runs the probe loop until ctx ends or Stop; it returns at once.
func (p *prober) Start(ctx context.Context) error {
	p.Go(ctx, p.run)
	return nil
}

func (p *prober) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.s.probeOnce(ctx)
		t.Reset(service.Jitter(2*time.Second, 0.25)) // 1.5–2.5 s
	}
}

func (s *Scaler) probeOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	err := s.c.Ping(ctx).Err()
	cancel()
	select {
	case <-s.stopping:
		return
	default:
	}
	was := s.ready.Swap(err == nil)
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
		if was {
			s.log.Warn("scaler: redis unreachable; not ready", "err", err)
		}
	} else if !was {
		s.log.Info("scaler: redis reachable; ready")
	}
	s.health.SetServingStatus(ServiceName, st)
}

func (s *Scaler) observeRPC(method string, err error) {
	s.rpcs.WithLabelValues(method, status.Code(err).String()).Inc()
}
