package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

// An execution whose task a peer took over (this worker looked silent past the
// visibility timeout: a freeze, a long outage) is stopped at its next heartbeat: its
// context ends with runtime.ErrLost as the cause, so a fenced execution does not keep
// running beside the new attempt (a concurrency limit counts the task once), and its
// outcome changes nothing.
func TestReclaimedExecutionIsStopped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	causes := make(chan error, 1)
	started := make(chan struct{}, 1)
	reg := runtime.NewRegistry()
	reg.Register("hold", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, runtime.FuncOptions{MaxRetries: 5})
	startWorker(t, e.rdb, e.config(t), reg, newRecorder())
	id := e.enqueue(t, client.Task{Function: "hold"})
	<-started
	// a peer's reaper takes the entry over, as it would from a silent worker
	q := keys.New(e.prefix).Queue("default")
	r, err := lua.Claim.Run(e.ctx, e.rdb, lua.ClaimArgs{Queue: q, Consumer: "peer", NowMS: time.Now().UnixMilli(),
		Reclaim: true, Want: 5, MaxPayload: 1 << 20, MinIdleMS: 0})
	if err != nil || len(r.Started) != 1 || r.Started[0].Attempt != 2 {
		t.Fatalf("peer's reclaim = %+v, %v", r, err)
	}
	select {
	case c := <-causes:
		if !errors.Is(c, runtime.ErrLost) {
			t.Fatalf("context cause = %v, want runtime.ErrLost", c)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the fenced execution kept running")
	}
	// its outcome was fenced: the record is the peer's attempt, still running
	ti := e.task(t, id)
	if ti.Status != client.StatusRunning || ti.Attempt != 2 || ti.Worker != "peer" {
		t.Fatalf("record = status %s attempt %d worker %s", ti.Status, ti.Attempt, ti.Worker)
	}
}
