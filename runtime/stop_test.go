package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/runtime"
)

// Stop before Run returns at once, and the Run after it drains at once and returns nil.
func TestStopBeforeRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w, err := runtime.New(runtime.Options{Config: e.config(t), Redis: e.rdb, Registry: runtime.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Run: %v", err)
	}
	if err := w.StopAndCancel(context.Background()); err != nil {
		t.Fatalf("StopAndCancel after Stop, before Run: %v", err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("a second Run returned nil, want an error")
	}
}

// Stop drains as SIGTERM does: it waits for the running function, and returns ctx's
// error when ctx ends first (the drain goes on). Twice is fine.
func TestStopWaitsForTheDrain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := newBlocking(0)
	reg := runtime.NewRegistry()
	reg.Register("block", b.fn, runtime.FuncOptions{MaxRetries: -1})
	rec := newRecorder()
	w, err := runtime.New(runtime.Options{Config: e.config(t, "DTQ_DRAIN_TIMEOUT_S", "600"), Redis: e.rdb, Registry: reg, Observe: rec.observe})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	id := e.enqueue(t, client.Task{Queue: "default", Function: "block"})
	b.waitStart(t)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended context while a function runs: %v, want context.Canceled", err)
	}
	close(b.release)
	// that Stop began the drain: Run returns once the function did
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := rec.count(is(runtime.EventTaskSucceeded, id)); n != 1 {
		t.Fatalf("%d successes of the drained task, want 1", n)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after Run returned: %v", err)
	}
}

// StopAndCancel does not wait for the drain timeout: it cancels the running function
// at once and hands its entry back.
func TestStopAndCancelHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := newBlocking(0)
	reg := runtime.NewRegistry()
	reg.Register("block", b.fn, runtime.FuncOptions{MaxRetries: -1})
	rec := newRecorder()
	w, err := runtime.New(runtime.Options{Config: e.config(t, "DTQ_DRAIN_TIMEOUT_S", "600"), Redis: e.rdb, Registry: reg, Observe: rec.observe})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	id := e.enqueue(t, client.Task{Queue: "default", Function: "block"})
	b.waitStart(t)
	// Bounded far below the drain timeout: a StopAndCancel that waited for it fails.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := w.StopAndCancel(ctx); err != nil {
		t.Fatalf("StopAndCancel: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec.wait(t, "the hand-back", is(runtime.EventHandedBack, id))
	if ti := e.task(t, id); ti.Status != "running" {
		t.Fatalf("task status %q after the hard stop, want running (handed back, not recorded)", ti.Status)
	}
	if err := w.StopAndCancel(ctx); err != nil {
		t.Fatalf("a second StopAndCancel: %v", err)
	}
}
