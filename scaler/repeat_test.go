package scaler

import (
	"context"
	"strings"
	"testing"
	"time"
)

// passesUntil waits, on the watcher's own passes, until at least d has gone since t0:
// what the watcher did in that time is then visible.
func passesUntil(t *testing.T, f *fixture, t0 time.Time, d time.Duration) {
	t.Helper()
	passed := make(chan struct{}, 1)
	hook := func(error) {
		select {
		case passed <- struct{}{}:
		default:
		}
	}
	f.s.watch.afterPass.Store(&hook)
	defer f.s.watch.afterPass.Store(nil)
	deadline := time.After(20 * time.Second)
	for time.Since(t0) < d {
		select {
		case <-passed:
		case <-deadline:
			t.Fatalf("no pass of the watcher for 20 s")
		}
	}
	// one whole pass begun after t0+d
	for range 2 {
		select {
		case <-passed:
		case <-deadline:
			t.Fatalf("no pass of the watcher for 20 s")
		}
	}
}

// An active stream's true is sent again 1, 3 and 7 repeats after it turned active, and
// no more; a stream that went idle gets no stray repeat; turning active again starts
// the repeats afresh. (KEDA drops a true it receives while its cached Deployment still
// shows replicas; the repeat is what wakes it then.)
func TestActiveStreamRepeatsTrue(t *testing.T) {
	t.Parallel()
	const repeat = 100 * time.Millisecond
	f := setup(t, nil, func(c *Config) { c.PushRepeat = repeat })
	s := f.seed(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := f.cli.StreamIsActive(ctx, ref("queues", "rep"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Result {
		t.Fatalf("first message = %v, %v; want false", r, err)
	}
	recv := func(want bool, what string) time.Time {
		t.Helper()
		r, err := stream.Recv()
		if err != nil || r.Result != want {
			t.Fatalf("%s: %v, %v; want %v", what, r, err, want)
		}
		return time.Now()
	}
	repeats := func() string {
		return grepLines(scrape(t, f), "dtq_scaler_push_repeats_total")
	}

	s.add("rep", 0, 1)
	t0 := recv(true, "after the first task")
	prev := t0
	for i, gap := range []time.Duration{repeat, 2 * repeat, 4 * repeat} {
		at := recv(true, "repeat")
		// sent no earlier than due (the schedule counts from the pass before the read
		// that sent the previous one, so allow that read's time)
		if got := at.Sub(prev); got < gap*9/10 {
			t.Errorf("repeat %d came %v after the previous true, want at least %v", i+1, got, gap)
		}
		prev = at
	}
	passesUntil(t, f, t0, 16*repeat) // a fourth, if any, would be due at 15×repeat
	s.finish("rep", 0, s.deliver("rep", 0, 1)...)
	recv(false, "after the backlog drained (no fourth repeat)")
	if got := repeats(); got != "dtq_scaler_push_repeats_total 3" {
		t.Fatalf("repeats = %q, want 3", got)
	}

	// Active again: repeats start afresh; idle before they end: none after the false.
	s.add("rep", 0, 1)
	t1 := recv(true, "after the second task")
	recv(true, "the second activation's first repeat")
	s.finish("rep", 0, s.deliver("rep", 0, 1)...)
	recv(false, "after the second backlog drained")
	passesUntil(t, f, t1, 8*repeat)
	if got := repeats(); got != "dtq_scaler_push_repeats_total 4" {
		t.Fatalf("repeats = %q, want 4 (one repeat before the stream went idle)", got)
	}
}

// DTQ_SCALER_PUSH_REPEAT_MS=0 sends each change once.
func TestPushRepeatOff(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil) // PushRepeat 0
	s := f.seed(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := f.cli.StreamIsActive(ctx, ref("queues", "once"))
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, false)
	s.add("once", 0, 1)
	recvUntil(t, stream, true)
	t0 := time.Now()
	passesUntil(t, f, t0, 500*time.Millisecond)
	s.finish("once", 0, s.deliver("once", 0, 1)...)
	if r, err := stream.Recv(); err != nil || r.Result {
		t.Fatalf("after the backlog drained: %v, %v; want false (no repeat)", r, err)
	}
	if m := scrape(t, f); !strings.Contains(m, "\ndtq_scaler_push_repeats_total 0\n") {
		t.Fatalf("repeats: %q, want 0", grepLines(m, "dtq_scaler_push_repeats_total"))
	}
}
