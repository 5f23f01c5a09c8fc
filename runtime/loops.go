package runtime

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/lua"
)

// reaperInterval is the design's max(0.5 s, visibility timeout / 2).
func (w *Worker) reaperInterval() time.Duration {
	return max(500*time.Millisecond, w.cfg.VisibilityTimeout/2)
}

// reaperLoop takes over entries idle past the visibility timeout (their worker died or
// went silent) on every band of every queue, at most concurrency×2 per pass.
func (w *Worker) reaperLoop(ctx context.Context) error {
	calls := w.reapCalls
	for {
		if hold := w.reclaimHold(); hold > 0 {
			if !sleepCtx(ctx, hold) {
				return nil
			}
			continue
		}
		if _, err := w.reapOnce(ctx, calls); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.metrics.redisErrors.WithLabelValues("reclaim").Inc()
			return err
		}
		d := jitter(w.reaperInterval(), 0.1)
		slept := time.Now()
		if !sleepCtx(ctx, d) {
			return nil
		}
		w.noteStall(time.Since(slept) - d)
	}
}

// noteStall holds the reaper's reclaims as after an outage when its own sleep overran
// by more than half the visibility timeout: this process (or the machine) stalled, and
// so, likely, did its peers, none of which could touch its entries meanwhile.
func (w *Worker) noteStall(late time.Duration) {
	if late > w.cfg.VisibilityTimeout/2 {
		w.unreachableAt.Store(time.Now().UnixNano())
		w.log.Warn("reaper: this process stalled; holding reclaims while live workers touch their entries", "late", late.String())
	}
}

// reclaimHold is how long the reaper still leaves silent entries alone after this
// worker last found Redis unreachable. During an outage no live worker can touch its
// entries, so once Redis is back every entry in flight may look idle past the visibility
// timeout; the owners, alive and cut off like everyone, touch theirs within a heartbeat
// interval (after a failed touch's timeout at worst). Reclaiming before that would run
// live workers' tasks a second time. The cost: a worker that really died during the
// outage has its tasks reclaimed that much later.
func (w *Worker) reclaimHold() time.Duration {
	last := w.unreachableAt.Load()
	if last == 0 {
		return 0
	}
	grace := 2*w.cfg.HeartbeatInterval + 2*time.Second
	return time.Until(time.Unix(0, last).Add(grace))
}

// heldEntries lists, by queue, the entries of the executions this worker runs now.
func (w *Worker) heldEntries() map[string][]lua.Delivered {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	out := map[string][]lua.Delivered{}
	for k := range w.held {
		out[k.queue] = append(out[k.queue], lua.Delivered{Band: k.band, Entry: k.entry})
	}
	return out
}

// reclaimCallBound is the longest one reclaim call may take, resends included: a
// quarter of the visibility timeout, within 0.2–2 s.
func (w *Worker) reclaimCallBound() time.Duration {
	return min(2*time.Second, max(200*time.Millisecond, w.cfg.VisibilityTimeout/4))
}

// reapOnce runs one reaper pass and returns how many tasks it started.
func (w *Worker) reapOnce(ctx context.Context, calls *calls) (int, error) {
	budget := 2 * w.cfg.Concurrency
	if w.cfg.MaxTasks > 0 {
		budget = int(min(int64(budget), max(0, w.cfg.MaxTasks-w.begun.Load())))
	}
	started := 0
	// This worker's own entries look as idle as anyone's after an outage or a stall of
	// its process: touch them first, and name them to the reclaim, which never takes
	// back what its own worker still runs (a stall between the touch and the call).
	w.touchHeld(ctx)
	holds := w.heldEntries()
	for _, q := range w.queues {
		if budget <= 0 {
			break
		}
		if w.reapFaults.skip(q.Name) || w.reclaimHold() > 0 {
			continue
		}
		call, prev := calls.next(q.Name)
		// A reclaim may not outlast reclaimCallBound: go-redis resends a command whose
		// connection broke, and one sent before an outage and resent after it would
		// reclaim every live worker's entries (all idle past the visibility timeout by
		// then) before their owners could touch them.
		cctx, cancel := context.WithTimeout(ctx, w.reclaimCallBound())
		res, err := lua.Claim(cctx, w.rdb, q, lua.ClaimArgs{
			Consumer: w.id, NowMS: w.now().UnixMilli(), Reclaim: true, Want: budget,
			MinIdleMS: w.vtMS, MaxPayload: w.cfg.MaxPayloadBytes, Call: call, Previous: prev,
			Holds: holds[q.Name],
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil || !lua.IsKeyError(err) {
				return started, err
			}
			calls.answered(q.Name)
			w.reapFaults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, w.id, "reclaim", err))
			continue
		}
		calls.answered(q.Name)
		w.reapFaults.ok(q.Name)
		w.handleClaim(q, res)
		n := len(res.Started) + len(res.Absorbed) + len(res.Invalid)
		budget -= n
		started += len(res.Started)
	}
	return started, nil
}

// schedulerLoop: every ~1 s (jittered) try to be the leader; the leader puts due
// delayed tasks and retries on their streams and re-enqueues stale claims.
func (w *Worker) schedulerLoop(ctx context.Context) error {
	interval := w.cfg.SchedulerInterval
	for {
		if err := w.scheduleOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.metrics.redisErrors.WithLabelValues("scheduler").Inc()
			return err
		}
		// Up to a fifth longer, never shorter: passes of workers started together drift
		// apart, and an idle worker's one round trip a pass stays at most one a second.
		if !sleepCtx(ctx, jitterUp(interval, 0.2)) {
			return nil
		}
	}
}

// scheduleOnce is one scheduler pass, one pipelined round trip when nothing is due:
// the lock (SET NX PX to acquire, lock_renew.lua to keep it, once a third of its TTL
// has passed since it was last taken or renewed), the leader's claim of due tasks on
// every known queue, the known-queue list for the next pass, and the heartbeat when it
// is due (so an idle worker's heartbeat costs no round trip of its own). Claims made in
// a pass whose renewal failed, or by a leader whose lock lapsed between renewals, are
// still exclusive (sched_claim.lua is atomic), so they are enqueued like any other.
func (w *Worker) scheduleOnce(ctx context.Context) error {
	lock, ttl := w.ks.SchedulerLock(), w.cfg.SchedulerLockTTL.Milliseconds()
	now := w.now()
	nowMS := now.UnixMilli()
	wasLeader := w.leader.Load()
	// a queue whose keys Redis refuses is left out for a while: the others move
	qs := slices.DeleteFunc(w.scheduledQueues(), func(q keys.Queue) bool { return w.schedFaults.skip(q.Name) })

	p := w.rdb.Pipeline()
	var renew *redis.Cmd
	var acquire *redis.BoolCmd
	var claims, rescues []*redis.Cmd
	var names *redis.StringSliceCmd
	if wasLeader {
		if nowMS-w.lockedAt.Load() >= ttl/3 {
			renew = lua.LockRenewCmd(ctx, p, lock, w.id, ttl)
		}
		for _, q := range qs {
			claims = append(claims, lua.SchedClaimCmd(ctx, p, q, nowMS, schedBatch, nowMS-ttl))
			rescues = append(rescues, lua.RescueCmd(ctx, p, q, nowMS, nowMS-lua.RescueAge.Milliseconds(), rescueBatch))
		}
		names = p.SMembers(ctx, w.ks.Queues())
	} else {
		acquire = p.SetNX(ctx, lock, w.id, time.Duration(ttl)*time.Millisecond)
	}
	beat := w.heartbeatDue(now, w.cfg.SchedulerInterval)
	if beat {
		w.queueHeartbeat(ctx, p, w.status())
	}
	_, err := p.Exec(ctx)
	if err != nil && (lua.IsNoScript(err) || slices.ContainsFunc(append(claims, rescues...), func(c *redis.Cmd) bool { return lua.IsNoScript(c.Err()) })) {
		// Redis lost its script cache (a restart): load the scripts; the next pass redoes this one.
		return lua.Load(ctx, w.rdb)
	}
	if beat && err == nil {
		w.lastBeat.Store(now.UnixNano())
	}
	if err != nil && !lua.IsKeyError(err) {
		return err // the server or the network: the whole pass failed
	}
	// A key error belongs to the queue whose commands got it; each is looked at below.

	if !wasLeader {
		if !acquire.Val() {
			return nil
		}
		w.lockedAt.Store(nowMS) // the lock's TTL runs from no earlier than this
		w.leader.Store(true)
		w.metrics.leader.Set(1)
		w.log.Info("scheduler: became leader")
		w.publish(Event{Type: EventLeaderAcquired})
		return nil // the first pass as leader runs at the next tick
	}
	if renew != nil {
		if ok, _ := lua.LockRenewResult(renew); ok {
			w.lockedAt.Store(nowMS)
		} else {
			w.leader.Store(false)
			w.metrics.leader.Set(0)
			w.log.Warn("scheduler: lost the leader lock")
			w.publish(Event{Type: EventLeaderLost})
		}
	}
	if names.Err() == nil {
		if lost := w.setKnownQueues(names.Val()); len(lost) > 0 {
			// the set lost queues this leader knew (a FLUSHALL, a restart without
			// persistence, a failover that lost the write): put them back
			w.log.Warn("scheduler: known queues missing from the queue set; added back", "queues", lost)
			if err := w.rdb.SAdd(ctx, w.ks.Queues(), lost...).Err(); err != nil {
				w.log.Warn("scheduler: adding back known queues failed", "err", err)
			}
		}
	}
	if w.passes.Add(1)%60 == 0 {
		if n, err := liveness.Prune(ctx, w.rdb, w.ks); err != nil {
			w.log.Warn("scheduler: pruning the workers set failed", "err", err)
		} else if n > 0 {
			w.log.Info("scheduler: pruned expired workers", "count", n)
		}
	}
	for i, q := range qs {
		if err := w.scheduleResults(ctx, q, nowMS, ttl, claims[i], rescues[i]); err != nil {
			if !lua.IsKeyError(err) {
				return err
			}
			w.schedFaults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, "", "schedule", err))
			continue
		}
		w.schedFaults.ok(q.Name)
	}
	w.trimDead(ctx) // retention.go: dead tasks beyond DTQ_DEAD_MAX or DTQ_DEAD_TTL_S
	return nil
}

// scheduleResults acts on one queue's rescue and scheduler claim of a pass: it reports
// the rescued hand-offs and enqueues the claimed tasks (working off a backlog).
func (w *Worker) scheduleResults(ctx context.Context, q keys.Queue, nowMS, ttl int64, claim, rescue *redis.Cmd) error {
	ids, rerr := lua.RescueResult(q, rescue)
	if len(ids) > 0 {
		w.metrics.rescued.Add(float64(len(ids)))
		w.log.Warn("scheduler: put back tasks handed to a worker that never read them", "queue", q.Name, "count", len(ids))
		for _, id := range ids {
			w.publish(Event{Type: EventHandoffRescued, Queue: q.Name, TaskID: id})
		}
	}
	due, stale, _, err := lua.SchedClaimResult(q, claim)
	if err != nil {
		return err
	}
	if err := w.enqueueClaimed(ctx, q, nowMS, due, stale); err != nil {
		return err
	}
	if len(due) == schedBatch { // a backlog: work it off now, batch by batch
		if err := w.scheduleQueue(ctx, q, ttl); err != nil {
			return err
		}
	}
	return rerr
}

// scheduledQueues are this worker's queues and every other known queue: the leader
// serves them all, or delayed tasks of a queue no leader serves would wait forever.
func (w *Worker) scheduledQueues() []keys.Queue {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	out := append([]keys.Queue(nil), w.queues...)
	for _, n := range w.known {
		if _, own := w.byName[n]; !own {
			out = append(out, w.ks.Queue(n))
		}
	}
	return out
}

// setKnownQueues takes the queue set's members as the known queues, and keeps the ones
// known before that are missing from it, which it returns: queues are never removed
// from the set, so a missing one was lost with the set.
func (w *Worker) setKnownQueues(names []string) (lost []any) {
	valid := names[:0]
	for _, n := range names {
		if keys.ValidQueue(n) == nil {
			valid = append(valid, n)
		}
	}
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	for _, n := range w.known {
		if !slices.Contains(valid, n) {
			lost = append(lost, n)
			valid = append(valid, n)
		}
	}
	w.known = valid
	return lost
}

func (w *Worker) enqueueClaimed(ctx context.Context, q keys.Queue, nowMS int64, due, stale []string) error {
	ids := append(due, stale...)
	if len(ids) == 0 {
		return nil
	}
	enq, _, err := lua.SchedEnqueue(ctx, w.rdb, q, nowMS, ids)
	if err != nil {
		return err // the claims stay in the claimed set; a later pass takes them as stale
	}
	if len(enq) > 0 {
		w.metrics.scheduled.Add(float64(len(enq)))
		w.publish(Event{Type: EventScheduled, Queue: q.Name, Detail: strconv.Itoa(len(enq))})
	}
	return nil
}

const schedBatch = 1000

// rescueBatch bounds the unread hand-offs one pass looks at per queue.
const rescueBatch = 100

// scheduleQueue claims and enqueues due tasks of q batch by batch until fewer than a
// batch are due (bounded: a huge backlog is worked off over passes).
func (w *Worker) scheduleQueue(ctx context.Context, q keys.Queue, lockTTL int64) error {
	for i := 0; i < 100; i++ {
		nowMS := w.now().UnixMilli()
		due, stale, _, err := lua.SchedClaim(ctx, w.rdb, q, nowMS, schedBatch, nowMS-lockTTL)
		if err != nil {
			return err
		}
		if err := w.enqueueClaimed(ctx, q, nowMS, due, stale); err != nil {
			return err
		}
		if len(due) < schedBatch {
			return nil
		}
	}
	return nil
}

// heartbeatLoop writes the heartbeat at once and then every interval (jittered), and
// resets the idle clock of every entry this worker still runs. It keeps going while
// the worker drains, so long tasks finishing within the drain are not reclaimed.
func (w *Worker) heartbeatLoop(ctx context.Context) error {
	for {
		if w.heartbeatDue(w.now(), 0) {
			w.heartbeatOnce(ctx)
		}
		w.touchHeld(ctx)
		if !sleepCtx(ctx, jitter(w.cfg.HeartbeatInterval, 0.1)) {
			return nil
		}
	}
}

// heartbeatDue reports whether the heartbeat must be written before now+ahead: the
// scheduler writes it in its pipeline when the next heartbeat would fall before its own
// next pass, and the heartbeat loop then has nothing to write.
func (w *Worker) heartbeatDue(now time.Time, ahead time.Duration) bool {
	last := w.lastBeat.Load()
	if last == 0 {
		return true
	}
	next := time.Unix(0, last).Add(w.cfg.HeartbeatInterval * 9 / 10)
	return !now.Add(ahead).Before(next)
}

func (w *Worker) heartbeatOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, w.cfg.HeartbeatInterval))
	defer cancel()
	if err := w.writeHeartbeat(ctx, w.status()); err != nil {
		w.metrics.redisErrors.WithLabelValues("heartbeat").Inc()
		w.log.Warn("heartbeat: write failed", "err", err)
		return
	}
	w.lastBeat.Store(w.now().UnixNano())
}

func (w *Worker) writeHeartbeat(ctx context.Context, status string) error {
	p := w.rdb.Pipeline()
	w.queueHeartbeat(ctx, p, status)
	_, err := p.Exec(ctx)
	return err
}

// queueHeartbeat queues the heartbeat's writes on p.
func (w *Worker) queueHeartbeat(ctx context.Context, p redis.Pipeliner, status string) {
	hbMS := w.cfg.HeartbeatInterval.Milliseconds()
	key := w.ks.Worker(w.id)
	p.HSet(ctx, key,
		liveness.FieldWorkerID, w.id,
		liveness.FieldHostname, hostname(),
		liveness.FieldStartedAt, w.startedAt.UnixMilli(),
		liveness.FieldLastHeartbeat, w.now().UnixMilli(),
		liveness.FieldActiveTasks, w.inflight.Load(),
		liveness.FieldConcurrency, w.cfg.Concurrency,
		liveness.FieldProcessed, w.processed.Load(),
		liveness.FieldFailed, w.failed.Load(),
		liveness.FieldRetried, w.retried.Load(),
		liveness.FieldStatus, status,
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
func (w *Worker) touchHeld(ctx context.Context) {
	byQueue := map[string][]*execution{}
	w.heldMu.Lock()
	for _, e := range w.held {
		byQueue[e.q.Name] = append(byQueue[e.q.Name], e)
	}
	w.heldMu.Unlock()
	for name, es := range byQueue {
		hs := make([]lua.Held, len(es))
		for i, e := range es {
			hs[i] = e.heldRef()
		}
		tctx, cancel := context.WithTimeout(ctx, max(time.Second, w.cfg.HeartbeatInterval))
		ok, err := lua.Touch(tctx, w.rdb, w.byName[name], w.id, 0, false, hs)
		cancel()
		if err != nil {
			w.metrics.redisErrors.WithLabelValues("touch").Inc()
			w.log.Warn("heartbeat: touch failed", "queue", name, "err", err)
			continue
		}
		for i, e := range es {
			// An execution whose outcome went to the completer since the snapshot is
			// not "lost": its completion may have landed first. If it was reclaimed after
			// all, the completion is fenced and says so.
			if !ok[i] && !e.recorded.Load() {
				w.log.Warn("heartbeat: task no longer ours (reclaimed by a peer); its completion will be fenced off", "queue", name, "task", hs[i].ID, "attempt", hs[i].Attempt)
			}
		}
	}
}

// finalHeartbeat reports "stopped"; the record expires after 3× the interval.
func (w *Worker) finalHeartbeat() {
	w.state.Store(stateStopped)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.writeHeartbeat(ctx, liveness.Stopped); err != nil {
		w.log.Warn("heartbeat: final write failed", "err", err)
	}
}
