package runtime

import (
	"context"
	"net"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/prom"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/service"
)

// After SIGTERM, Run returns within the bound doc.go states, even with a function that
// ignores cancellation and Redis gone for the whole drain.
func TestRunReturnsWithinTheExitBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb, redialed := redialingClient(t, srv)
	prefix := redistest.Prefix(t)
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": prefix, "DTQ_DRAIN_TIMEOUT_S": "1",
		"DTQ_HEARTBEAT_INTERVAL_S": "1", "DTQ_VISIBILITY_TIMEOUT_S": "3",
	}))
	if err != nil {
		t.Fatal(err)
	}
	started, stuck := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	reg := NewRegistry()
	reg.Register("stubborn", func(context.Context, *Task) ([]byte, error) {
		close(started)
		<-stuck // ignores cancellation
		return nil, nil
	}, FuncOptions{MaxRetries: -1})
	w, err := New(Options{Config: cfg, Redis: rdb, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.New(rdb, client.Options{Prefix: prefix}).Enqueue(context.Background(), client.Task{Queue: "default", Function: "stubborn"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	o := rdb.Options()
	bound := w.exitBound(o.DialTimeout + o.WriteTimeout + o.ReadTimeout)

	srv.Kill()
	begun := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(begun)
		if took > bound {
			t.Fatalf("Run returned %v after the cancel, over the stated bound %v", took, bound)
		}
		t.Logf("Run returned %v after the cancel; the bound is %v", took, bound)
		// back up, so the client's background redial (go-redis probes a pool whose
		// dials all failed, once a second) succeeds and ends
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-redialed:
		case <-time.After(5 * time.Second): // no probe was started
		}
		if err != nil {
			t.Fatalf("Run: %v, want nil after a drain", err)
		}
	case <-time.After(2 * bound): // a hang: report it instead of waiting for the test timeout
		t.Fatalf("Run has not returned %v after the cancel (bound %v)", 2*bound, bound)
	}
}

// Without InstrumentRedis the worker adds no hook (no round trip is counted), and its
// own commands' errors still feed its Redis health: an outage makes it not ready and
// holds the reaper's reclaims, and the next answer makes it ready again.
func TestUninstrumentedWorkerFollowsRedisFromItsOwnCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t),
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Config: cfg, Redis: rdb, Registry: NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.events.Stop()
	defer w.poller.reader.Close()
	ctx := context.Background()
	if _, err := w.reaper.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.redis.Up() || w.reaper.reclaimHold() > 0 {
		t.Fatalf("after an answered pass: up %v, hold %v; want up, no hold", w.redis.Up(), w.reaper.reclaimHold())
	}
	srv.Kill()
	if _, err := w.reaper.runOnce(ctx); err == nil {
		t.Fatal("a reaper pass against a dead server did not fail")
	}
	if w.redis.Up() || w.reaper.reclaimHold() <= 0 {
		t.Fatalf("after a failed pass: up %v, hold %v; want down, reclaims held", w.redis.Up(), w.reaper.reclaimHold())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Ping(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	w.heartbeat.runOnce(ctx)
	if !w.redis.Up() {
		t.Fatal("the worker's next answered command did not make Redis up again")
	}
	if w.reaper.reclaimHold() <= 0 {
		t.Fatal("the reaper does not hold its reclaims after the outage")
	}
	if n := counterValue(t, w.metrics.roundTrips); n != 0 {
		t.Fatalf("%v round trips counted without InstrumentRedis: the worker hooked the client", n)
	}
}

// With InstrumentRedis the worker's hook counts the client's round trips.
func TestInstrumentedWorkerCountsRoundTrips(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t),
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Config: cfg, Redis: rdb, Registry: NewRegistry(), InstrumentRedis: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.events.Stop()
	if err := rdb.Ping(context.Background()).Err(); err != nil { // dials (its handshake counts too)
		t.Fatal(err)
	}
	before := counterValue(t, w.metrics.roundTrips)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, w.metrics.roundTrips) - before; n != 1 {
		t.Fatalf("%v round trips counted for one PING, want 1", n)
	}
	if !w.redis.Up() {
		t.Fatal("the hook did not feed the health")
	}
}

// redialingClient is a client of srv whose first successful dial after a failed one
// is reported on the channel.
func redialingClient(t *testing.T, srv *redistest.Server) (*redis.Client, <-chan struct{}) {
	redialed := make(chan struct{})
	var failed atomic.Bool
	var once sync.Once
	d := &net.Dialer{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			failed.Store(true)
		} else if failed.Load() {
			once.Do(func() { close(redialed) })
		}
		return c, err
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, redialed
}

func counterValue(t *testing.T, c *prom.Counter) float64 {
	t.Helper()
	return c.Value()
}

// stuckService is a service whose loop ignores its context until released: its Stop
// waits for that.
type stuckService struct {
	service.Base
	ctx     chan context.Context
	release chan struct{}
}

func (s *stuckService) Start(ctx context.Context) error {
	s.Go(ctx, func(ctx context.Context) { s.ctx <- ctx; <-s.release })
	return nil
}

// The drain says "draining" (and the test above enqueues work it must leave) right
// after stopAll returns: by then every loop's context has ended, so none sends another
// claim, even before its goroutine next runs. Not parallel: GOMAXPROCS 1 keeps the
// goroutines stopAll starts from running before the check.
func TestStopAllEndsEveryContextBeforeReturning(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	var ss []*stuckService
	var ctxs []context.Context
	for range 3 {
		s := &stuckService{ctx: make(chan context.Context, 1), release: make(chan struct{})}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
		ctxs = append(ctxs, <-s.ctx)
	}
	done := stopAll(ss[0], ss[1], ss[2])
	for i, ctx := range ctxs {
		if ctx.Err() == nil {
			t.Errorf("service %d: its context still runs after stopAll returned", i)
		}
	}
	select {
	case <-done:
		t.Fatal("stopAll's channel closed while the loops still run")
	default:
	}
	for _, s := range ss {
		close(s.release)
	}
	<-done
}
