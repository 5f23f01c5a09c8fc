package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/service"
)

func TestTaskCtxDeadlineWithoutDone(t *testing.T) {
	t.Parallel()
	c := newTaskCtx(context.Background(), 20*time.Millisecond)
	if c.Err() != nil {
		t.Fatalf("Err before the deadline = %v", c.Err())
	}
	if d, ok := c.Deadline(); !ok || d.IsZero() {
		t.Fatal("no deadline")
	}
	for c.Err() == nil { // never armed: Err reads the clock
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", c.Err())
	}
	c.release()
}

func TestTaskCtxDoneFiresAtDeadlineAndOnParentCancel(t *testing.T) {
	t.Parallel()
	c := newTaskCtx(context.Background(), 10*time.Millisecond)
	<-c.Done()
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", c.Err())
	}
	c.release()

	parent, cancel := context.WithCancel(context.Background())
	c = newTaskCtx(parent, time.Hour)
	child, stop := context.WithCancel(c) // a function deriving its own context arms the timer
	defer stop()
	cancel()
	<-child.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err after parent cancel = %v", c.Err())
	}
	c.release()

	parent, cancel = context.WithCancel(context.Background())
	c = newTaskCtx(parent, time.Hour)
	cancel()
	if !errors.Is(c.Err(), context.Canceled) { // never armed: the parent's error shows
		t.Fatalf("unarmed Err after parent cancel = %v", c.Err())
	}
	c.release()
}

func TestTaskCtxAfterRelease(t *testing.T) {
	t.Parallel()
	c := newTaskCtx(context.Background(), time.Hour)
	c.release()
	<-c.Done()
	if c.Err() == nil {
		t.Fatal("Err after release = nil")
	}
}

// The scheduler's pass period is never shortened by its jitter: an idle worker's one
// round trip a pass stays within one a second at the default interval.
func TestSchedulerJitterOnlyLengthens(t *testing.T) {
	d := time.Second
	var longer bool
	for range 1000 {
		j := service.JitterUp(d, 0.2)
		if j < d || j > d+d/5 {
			t.Fatalf("jitterUp(%v, 0.2) = %v, want within [%v, %v]", d, j, d, d+d/5)
		}
		longer = longer || j > d
	}
	if !longer {
		t.Fatal("jitterUp never lengthened the period")
	}
}
