package scaler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// The watcher is a service: Stop is safe before Start and twice, and Start after Stop
// runs the loop anew.
func TestWatcherLifecycle(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	w := newWatcher(c, keys.New(redistest.Prefix(t)), time.Now, slog.New(slog.DiscardHandler))
	w.Stop()
	for range 2 {
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Done():
			t.Fatal("the loop is not running after Start")
		default:
		}
		w.Stop()
		w.Stop()
		<-w.Done()
	}
}

// A blocking read of the watcher ends when it stops, however long its block.
func TestWatcherStopEndsItsRead(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	w := newWatcher(c, keys.New(redistest.Prefix(t)), time.Now, slog.New(slog.DiscardHandler))
	w.maxBlock = time.Hour
	blocked := make(chan struct{}, 1)
	hook := func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	w.beforeBlock.Store(&hook)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := ParseMetadata(map[string]string{KeyQueues: "idle", KeyIncludeScheduled: "false"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.subscribe(m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the watcher never reached its blocking read")
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute): // far below the hour of the block
		t.Fatal("Stop did not end the blocking read")
	}
}

// Run serves until its context ends and returns nil; a listen that fails is its error.
func TestRunServesUntilContextEnds(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	cfg := testConfig(redistest.Prefix(t))
	cfg.Port = 0
	s, err := New(cfg, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Stop(context.Background()) // before Serve: nothing to stop
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(gl, nil) // after Stop: serves nothing, starts no loop
	for _, done := range []<-chan struct{}{s.watch.Done(), s.probe.Done()} {
		select {
		case <-done:
		default:
			t.Fatal("Serve after Stop started a loop")
		}
	}
	if _, err := gl.Accept(); err == nil {
		t.Fatal("the listener of a Serve after Stop is open")
	}
	s, err = New(cfg, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Addr = free.Addr().String()
	_ = free.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	cc, err := grpc.NewClient(s.cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	// Run listens on its own goroutine: the call waits for it.
	st, err := pb.NewExternalScalerClient(cc).StreamIsActive(ctxT(t), ref("queues", "run"), grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if s.GRPCAddr() != s.cfg.Addr || s.HTTPAddr() == "" {
		t.Errorf("serving on %q and %q, want %q and a port", s.GRPCAddr(), s.HTTPAddr(), s.cfg.Addr)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v, want nil once its context ended", err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("stream after Run returned: %v, want io.EOF", err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg.Addr = taken.Addr().String()
	s, err = New(cfg, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "gRPC listen") {
		t.Fatalf("Run on a taken address = %v, want the listen error", err)
	}
}

// Stop with a context that has ended cuts the requests in flight off at once, stops
// every loop, and says so with the context's error; a second Stop has nothing to do.
func TestStopWithEndedContext(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	cfg := testConfig(redistest.Prefix(t))
	cfg.Port = 0
	cfg.ShutdownTimeout = time.Hour // the context, not the timeout, ends the wait
	s, err := New(cfg, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(gl, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop(ended ctx) = %v, want context.Canceled", err)
	}
	for _, done := range []<-chan struct{}{s.watch.Done(), s.probe.Done()} {
		select {
		case <-done:
		default:
			t.Fatal("a loop still runs after Stop returned")
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
}
