package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type loop struct {
	Base
	ticks atomic.Int64
}

func (l *loop) Start(ctx context.Context) error {
	l.Go(ctx, func(ctx context.Context) {
		for {
			l.ticks.Add(1)
			if !Sleep(ctx, time.Millisecond) {
				return
			}
		}
	})
	return nil
}

var _ Service = (*loop)(nil)

func TestStopBeforeStartIsSafe(t *testing.T) {
	t.Parallel()
	var l loop
	l.Stop()
	l.Stop()
	select {
	case <-l.Done():
	default:
		t.Fatal("Done of a service never started is not closed")
	}
}

func TestStartReturnsAtOnceAndStopWaits(t *testing.T) {
	t.Parallel()
	var l loop
	entered := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	l.Go(context.Background(), func(ctx context.Context) {
		close(entered)
		<-ctx.Done()
		<-release
		returned.Store(true)
	})
	<-entered
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned before the goroutine did")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	if !returned.Load() {
		t.Fatal("Stop returned before fn")
	}
	l.Stop() // again: a no-op
}

// Cancel ends the context before it returns, does not wait for fn, and a Stop after it
// still waits.
func TestCancelEndsTheContextWithoutWaiting(t *testing.T) {
	t.Parallel()
	var b Base
	b.Cancel() // before Go: a no-op
	ctxs := make(chan context.Context, 1)
	release := make(chan struct{})
	b.Go(context.Background(), func(ctx context.Context) { ctxs <- ctx; <-release })
	ctx := <-ctxs
	b.Cancel()
	if !errors.Is(context.Cause(ctx), ErrStopped) {
		t.Fatalf("after Cancel the context's cause is %v, want ErrStopped", context.Cause(ctx))
	}
	select {
	case <-b.Done():
		t.Fatal("fn returned before it was released")
	default:
	}
	stopped := make(chan struct{})
	go func() { b.Stop(); close(stopped) }()
	close(release)
	<-stopped
	select {
	case <-b.Done():
	default:
		t.Fatal("Stop after Cancel returned before fn")
	}
}

func TestGoWhileRunningIsRefused(t *testing.T) {
	t.Parallel()
	var b Base
	if !b.Go(context.Background(), func(ctx context.Context) { <-ctx.Done() }) {
		t.Fatal("first Go refused")
	}
	if b.Go(context.Background(), func(ctx context.Context) { t.Error("second fn ran") }) {
		t.Fatal("second Go while running accepted")
	}
	b.Stop()
	// after Stop, the service starts anew
	ran := make(chan struct{})
	if !b.Go(context.Background(), func(ctx context.Context) { close(ran) }) {
		t.Fatal("Go after Stop refused")
	}
	<-ran
	<-b.Done()
	b.Stop()
}

func TestStopCauseReachesTheContext(t *testing.T) {
	t.Parallel()
	var b Base
	got := make(chan error, 1)
	b.Go(context.Background(), func(ctx context.Context) { <-ctx.Done(); got <- context.Cause(ctx) })
	cause := errors.New("drain")
	b.StopCause(cause)
	if err := <-got; !errors.Is(err, cause) {
		t.Fatalf("cause %v, want %v", err, cause)
	}
}

func TestParentContextEndsTheService(t *testing.T) {
	t.Parallel()
	var l loop
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Done()
	l.Stop()
}

// Start and Stop from many goroutines at once: no race, no leak, no deadlock.
func TestStartStopStress(t *testing.T) {
	t.Parallel()
	var l loop
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_ = l.Start(context.Background())
			} else {
				l.Stop()
			}
		}()
	}
	wg.Wait()
	l.Stop()
	<-l.Done()
}

func TestSuperviseRestartsAfterErrorAndPanic(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs, restarts atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		Supervise(ctx, "test", slog.New(slog.DiscardHandler), func() { restarts.Add(1) }, func(ctx context.Context) error {
			switch runs.Add(1) {
			case 1:
				return errors.New("boom")
			case 2:
				panic("bang")
			default:
				cancel()
				<-ctx.Done()
				return nil
			}
		})
	}()
	<-done
	if runs.Load() != 3 || restarts.Load() != 2 {
		t.Fatalf("runs %d restarts %d, want 3 and 2", runs.Load(), restarts.Load())
	}
}

// A loop that failed after running a while restarts after the shortest delay; one that
// keeps failing sooner waits twice as long each time, up to the longest.
func TestRestartBackoff(t *testing.T) {
	t.Parallel()
	var b backoff
	want := []time.Duration{20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if d := b.after(time.Duration(i) * time.Millisecond); d != w*time.Millisecond {
			t.Fatalf("restart %d after a short run: %v, want %v", i, d, w*time.Millisecond)
		}
	}
	if d := b.after(restartReset); d != restartMin {
		t.Fatalf("restart after a run of %v: %v, want %v", restartReset, d, restartMin)
	}
	if d := b.after(0); d != 2*restartMin {
		t.Fatalf("the restart after that: %v, want %v", d, 2*restartMin)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported a full wait")
	}
	if !Sleep(context.Background(), time.Microsecond) {
		t.Fatal("a short Sleep did not report a full wait")
	}
}

func TestJitterBounds(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := Jitter(time.Second, 0.5); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("Jitter out of bounds: %v", d)
		}
		if d := JitterUp(time.Second, 0.2); d < time.Second || d > 1200*time.Millisecond {
			t.Fatalf("JitterUp out of bounds: %v", d)
		}
	}
}
