package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// reaper takes over entries idle past the visibility timeout (their worker died or
// went silent) on every band of every queue, at most concurrency×2 per pass, every
// max(0.5 s, visibility timeout / 2), jittered. It holds its reclaims after an outage
// or a stall (reclaimHold).
type reaper struct {
	service.Base
	w      *Worker
	calls  *calls  // the loop's claim calls, kept across its restarts (receipts.go)
	faults *faults // queues whose keys Redis refuses, skipped for a while
	// unreachableAt is the unix ns of the last command that found Redis unreachable
	// (Worker.sawRedis, or the round-trip hook), or of the reaper's own stall.
	unreachableAt atomic.Int64
}

func newReaper(w *Worker) *reaper {
	return &reaper{w: w, calls: w.newCalls(), faults: w.newFaults("reaper")}
}

// Start begins reaping.
func (r *reaper) Start(ctx context.Context) error {
	r.Go(ctx, func(ctx context.Context) { service.Supervise(ctx, "reaper", r.w.log, r.w.restarted("reaper"), r.loop) })
	return nil
}

// interval is the design's max(0.5 s, visibility timeout / 2).
func (r *reaper) interval() time.Duration {
	return max(500*time.Millisecond, r.w.cfg.VisibilityTimeout/2)
}

func (r *reaper) loop(ctx context.Context) error {
	for {
		if hold := r.reclaimHold(); hold > 0 {
			if !service.Sleep(ctx, hold) {
				return nil
			}
			continue
		}
		if _, err := r.runOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.w.metrics.redisErrors.WithLabelValues("reclaim").Inc()
			return err
		}
		d := service.Jitter(r.interval(), 0.1)
		slept := time.Now()
		if !service.Sleep(ctx, d) {
			return nil
		}
		r.noteStall(time.Since(slept) - d)
	}
}

// noteStall holds the reaper's reclaims as after an outage when its own sleep overran
// by more than half the visibility timeout: this process (or the machine) stalled, and
// so, likely, did its peers, none of which could touch its entries meanwhile.
func (r *reaper) noteStall(late time.Duration) {
	if late > r.w.cfg.VisibilityTimeout/2 {
		r.unreachableAt.Store(time.Now().UnixNano())
		r.w.log.Warn("reaper: this process stalled; holding reclaims while live workers touch their entries", "late", late.String())
	}
}

// reclaimHold is how long the reaper still leaves silent entries alone after this
// worker last found Redis unreachable. During an outage no live worker can touch its
// entries, so once Redis is back every entry in flight may look idle past the visibility
// timeout; the owners, alive and cut off like everyone, touch theirs within a heartbeat
// interval (after a failed touch's timeout at worst). Reclaiming before that would run
// live workers' tasks a second time. The cost: a worker that really died during the
// outage has its tasks reclaimed that much later.
func (r *reaper) reclaimHold() time.Duration {
	last := r.unreachableAt.Load()
	if last == 0 {
		return 0
	}
	grace := 2*r.w.cfg.HeartbeatInterval + 2*time.Second
	return time.Until(time.Unix(0, last).Add(grace))
}

// reclaimCallBound is the longest one reclaim call may take, resends included: a
// quarter of the visibility timeout, within 0.2–2 s.
func (r *reaper) reclaimCallBound() time.Duration {
	return min(2*time.Second, max(200*time.Millisecond, r.w.cfg.VisibilityTimeout/4))
}

// runOnce runs one reaper pass and returns how many tasks it started.
func (r *reaper) runOnce(ctx context.Context) (int, error) {
	w, calls := r.w, r.calls
	budget := 2 * w.cfg.Concurrency
	if w.cfg.MaxTasks > 0 {
		budget = int(min(int64(budget), max(0, w.cfg.MaxTasks-w.hold.begun.Load())))
	}
	started := 0
	// This worker's own entries look as idle as anyone's after an outage or a stall of
	// its process: touch them first, and name them to the reclaim, which never takes
	// back what its own worker still runs (a stall between the touch and the call).
	w.touchHeld(ctx)
	holds := w.hold.entries()
	for _, q := range w.queues {
		if budget <= 0 {
			break
		}
		if r.faults.skip(q.Name) || r.reclaimHold() > 0 {
			continue
		}
		call, prev := calls.next(q.Name)
		// A reclaim may not outlast reclaimCallBound: go-redis resends a command whose
		// connection broke, and one sent before an outage and resent after it would
		// reclaim every live worker's entries (all idle past the visibility timeout by
		// then) before their owners could touch them.
		cctx, cancel := context.WithTimeout(ctx, r.reclaimCallBound())
		res, err := lua.Claim.Run(cctx, w.rdb, lua.ClaimArgs{Queue: q,
			Consumer: w.id, NowMS: w.now().UnixMilli(), Reclaim: true, Want: budget,
			MinIdleMS: w.vtMS, MaxPayload: w.cfg.MaxPayloadBytes, Call: call, Previous: prev,
			Holds: holds[q.Name], KeepMS: w.keepMS,
		})
		cancel()
		w.sawRedis(err)
		if err != nil {
			if ctx.Err() != nil || !lua.IsKeyError(err) {
				return started, err
			}
			calls.answered(q.Name)
			r.faults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, w.id, "reclaim", err))
			continue
		}
		calls.answered(q.Name)
		r.faults.ok(q.Name)
		w.handleClaim(q, res)
		n := len(res.Started) + len(res.Absorbed) + len(res.Invalid)
		budget -= n
		started += len(res.Started)
	}
	return started, nil
}
