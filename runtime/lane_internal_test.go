package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/dtq/dtq/lua"
)

// A lane call whose reply was lost (Redis ran it: its tasks are started for this
// worker) is sent again by settle under the same name: its receipt answers, and the
// tasks it claimed are held and started now, on their first attempt, instead of waiting
// for a reaper after the visibility timeout.
func TestLaneSettleStartsWhatALostCallClaimed(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	reg := NewRegistry()
	reg.Register("f", func(context.Context, *Task) ([]byte, error) { <-release; return nil, nil }, FuncOptions{})
	w := unstartedWorker(t, reg, nil)
	t.Cleanup(func() {
		close(release)
		w.pool.close()
		w.pool.wg.Wait()
	})
	q := w.queues[0]
	tasks := []lua.NewTask{{ID: "a", Function: "f"}, {ID: "b", Function: "f"}, {ID: "c", Function: "f"}}
	if _, err := lua.Enqueue.Run(ctx, w.rdb, lua.EnqueueArgs{Queue: q, NowMS: time.Now().UnixMilli(), Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	l := w.poller.lane
	// the lane's call, run in Redis; its reply never reached the lane
	call, prev := l.calls.next(q.Name)
	r, err := lua.Claim.Run(ctx, w.rdb, lua.ClaimArgs{Queue: q, Consumer: w.id, NowMS: time.Now().UnixMilli(),
		Want: 32, MaxPayload: 1 << 20, Call: call, Previous: prev, Tag: w.callTag})
	if err != nil || len(r.Started) != 3 {
		t.Fatalf("the lost call = %+v, %v", r, err)
	}
	if w.Inflight() != 0 {
		t.Fatal("tasks held before the settle")
	}
	l.settle(ctx)
	if l.calls.open[q.Name] {
		t.Fatal("the call is still open after the settle")
	}
	for _, s := range r.Started {
		if !w.hold.holds(q.Name, s.Band, s.Entry) {
			t.Errorf("task %s (entry %s) not held after the settle", s.ID, s.Entry)
		}
	}
	if n := w.Inflight(); n != 3 {
		t.Fatalf("%d tasks in flight after the settle, want 3", n)
	}
	// a second settle sends nothing: the call got its reply
	l.settle(ctx)
	if n := w.Inflight(); n != 3 {
		t.Fatalf("%d tasks in flight after a second settle, want 3", n)
	}
}

// The lane held off by the loop claims nothing, whatever it is given, until released;
// hold waits for a pass in flight.
func TestLaneHeldOffClaimsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := unstartedWorker(t, nil, nil, "DTQ_WORKER_CONCURRENCY", "64")
	l := w.poller.lane
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx) }()
	l.hold()
	l.kick(0)
	l.mu.Lock()
	given, running := l.queue, l.running
	l.mu.Unlock()
	if given != -1 || running {
		t.Fatalf("held lane was given queue %d (running %v)", given, running)
	}
	l.release()
	l.kick(0)
	l.hold() // returns once the pass the kick began (if it began) ended
	l.mu.Lock()
	given, running = l.queue, l.running
	l.mu.Unlock()
	if given != -1 || running {
		t.Fatalf("after hold: queue %d, running %v", given, running)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the lane did not end with its context")
	}
}
