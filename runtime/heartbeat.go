package runtime

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// heartbeat is the heartbeat service: at once and then every DTQ_HEARTBEAT_INTERVAL_S
// (jittered) it writes the worker's hash, unless the scheduler's pass wrote it in its
// pipeline lately, and resets the idle clock of every entry this worker still runs
// (touch.lua). It keeps going while the worker drains, so long tasks finishing within
// the drain are not reclaimed; the drain stops it and writes the final heartbeat.
type heartbeat struct {
	service.Base
	w        *Worker
	lastBeat atomic.Int64 // unix ns of the last heartbeat written
}

// Start begins the heartbeats; the first pass writes at once.
func (h *heartbeat) Start(ctx context.Context) error {
	h.Go(ctx, func(ctx context.Context) {
		service.Supervise(ctx, "heartbeat", h.w.log, h.w.restarted("heartbeat"), h.loop)
	})
	return nil
}

func (h *heartbeat) loop(ctx context.Context) error {
	for {
		h.runOnce(ctx)
		if !service.Sleep(ctx, service.Jitter(h.w.cfg.HeartbeatInterval, 0.1)) {
			return nil
		}
	}
}

// runOnce is one heartbeat pass: the heartbeat when it is due, then the touch of every
// held entry.
func (h *heartbeat) runOnce(ctx context.Context) {
	if h.due(h.w.now(), 0) {
		h.write(ctx)
	}
	h.w.touchHeld(ctx)
}

// heartbeatDue reports whether the heartbeat must be written before now+ahead: the
// scheduler writes it in its pipeline when the next heartbeat would fall before its own
// next pass, and the heartbeat loop then has nothing to write.
func (h *heartbeat) due(now time.Time, ahead time.Duration) bool {
	last := h.lastBeat.Load()
	if last == 0 {
		return true
	}
	next := time.Unix(0, last).Add(h.w.cfg.HeartbeatInterval * 9 / 10)
	return !now.Add(ahead).Before(next)
}

// write writes the heartbeat with the worker's status now, bounded by the interval
// (at least a second).
func (h *heartbeat) write(ctx context.Context) {
	w := h.w
	ctx, cancel := context.WithTimeout(ctx, h.writeTimeout())
	defer cancel()
	if err := h.writeStatus(ctx, w.status()); err != nil {
		w.metrics.redisErrors.WithLabelValues("heartbeat").Inc()
		w.log.Warn("heartbeat: write failed", "err", err)
		return
	}
	h.lastBeat.Store(w.now().UnixNano())
}

// writeTimeout bounds one heartbeat write: the interval, at least a second.
func (h *heartbeat) writeTimeout() time.Duration {
	return max(time.Second, h.w.cfg.HeartbeatInterval)
}

func (h *heartbeat) writeStatus(ctx context.Context, status liveness.Status) error {
	p := h.w.rdb.Pipeline()
	h.queue(ctx, p, status)
	_, err := p.Exec(ctx)
	h.w.sawRedis(err)
	return err
}

// queue queues the heartbeat's writes on p.
func (h *heartbeat) queue(ctx context.Context, p redis.Pipeliner, status liveness.Status) {
	w := h.w
	hbMS := w.cfg.HeartbeatInterval.Milliseconds()
	key := w.ks.Worker(w.id)
	p.HSet(ctx, key,
		liveness.FieldWorkerID, w.id,
		liveness.FieldHostname, hostname(),
		liveness.FieldStartedAt, w.startedAt.UnixMilli(),
		liveness.FieldLastHeartbeat, w.now().UnixMilli(),
		liveness.FieldActiveTasks, w.hold.inflight.Load(),
		liveness.FieldConcurrency, w.cfg.Concurrency,
		liveness.FieldProcessed, w.processed.Load(),
		liveness.FieldFailed, w.failed.Load(),
		liveness.FieldRetried, w.retried.Load(),
		liveness.FieldStatus, string(status),
		liveness.FieldIntervalMS, hbMS,
		liveness.FieldQueues, strings.Join(w.cfg.Queues, ","),
	)
	p.PExpire(ctx, key, time.Duration(liveness.StaleFactor*hbMS)*time.Millisecond)
	p.SAdd(ctx, w.ks.Workers(), w.id)
	// the queues this worker serves stay known however the set was lost
	p.SAdd(ctx, w.ks.Queues(), w.queueNames...)
}

// touchHeld XCLAIMs every held entry back to this worker with idle 0 (fenced: entries
// whose task was reclaimed by a peer are left alone).
//
// The pass holds the touch pass (holdings.touching) from its snapshot to its last
// touch, so the drain's hand-back, which releases what it hands back before it takes
// the pass, never has its idle clocks reset behind it.
func (w *Worker) touchHeld(ctx context.Context) {
	w.hold.beginTouch(0)
	defer w.hold.endTouch()
	held := w.hold.byQueue()
	if w.hold.afterSnapshot != nil {
		w.hold.afterSnapshot()
	}
	for name, es := range held {
		ok, err := w.touchOwn(ctx, name, es)
		if err != nil {
			w.log.Warn("heartbeat: touch failed", "queue", name, "err", err)
			continue
		}
		for i, e := range es {
			if ok[i] == lua.StopRequested && e.cancelRequested() {
				w.log.Info("heartbeat: cancel requested; the task's context is cancelled", "queue", name, "task", e.s.ID, "attempt", e.s.Attempt)
			}
			// An execution whose outcome went to the completer since the snapshot is
			// not "lost": its completion may have landed first. If it was reclaimed after
			// all, the completion is fenced and says so.
			if !ok[i].Held() && !e.recorded.Load() && e.lost() {
				w.log.Warn("heartbeat: task no longer ours (reclaimed by a peer); its function is cancelled and its outcome will be fenced off", "queue", name, "task", e.s.ID, "attempt", e.s.Attempt)
			}
		}
	}
}

// touchOwn touches the entries of executions es of queue name with idle 0 (fenced, as
// touchHeld's), bounded by the heartbeat interval (at least a second), and notes each
// one still held as confirmed at the time the touch was sent. The caller holds the
// touch pass.
func (w *Worker) touchOwn(ctx context.Context, name string, es []*execution) ([]lua.Touched, error) {
	hs := make([]lua.Held, len(es))
	for i, e := range es {
		hs[i] = e.heldRef()
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, w.cfg.HeartbeatInterval))
	defer cancel()
	sent := w.now().UnixNano()
	ok, err := lua.Touch.Run(ctx, w.rdb, lua.TouchArgs{Queue: w.byName[name], Consumer: w.id, IdleMS: 0, Handback: false, Items: hs})
	w.sawRedis(err)
	if err != nil {
		w.metrics.redisErrors.WithLabelValues("touch").Inc()
		return nil, err
	}
	for i, e := range es {
		if ok[i].Held() {
			e.confirmed.Store(sent)
		}
	}
	return ok, nil
}

// final reports "stopped" (the drain's last write); the record expires after 3× the
// interval.
func (h *heartbeat) final() {
	h.w.state.Store(stateStopped)
	ctx, cancel := context.WithTimeout(context.Background(), finalHeartbeatTimeout)
	defer cancel()
	if err := h.writeStatus(ctx, liveness.Stopped); err != nil {
		h.w.log.Warn("heartbeat: final write failed", "err", err)
	}
}

// finalHeartbeatTimeout bounds the final heartbeat.
const finalHeartbeatTimeout = time.Second
