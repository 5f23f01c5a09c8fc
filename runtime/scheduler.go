package runtime

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// scheduler is the scheduler loop as a service: every DTQ_SCHEDULER_INTERVAL_S (up to
// a fifth longer) it tries to be the leader (leader.go); the leader puts due delayed
// tasks and retries of every known queue on their streams, re-enqueues stale claims,
// rescues unread hand-offs of dead workers and trims dead tasks (retention.go).
type scheduler struct {
	service.Base
	w      *Worker
	leader *leader
	faults *faults      // queues whose keys Redis refuses, left out for a while
	passes atomic.Int64 // passes led

	knownMu sync.Mutex
	known   []string // every queue ever enqueued to, as of the last pass

	retention *retention // the leader's dead-task trimming (retention.go)
	cron      *cron      // periodic entries (cron.go)
}

func newScheduler(w *Worker, l *leader) *scheduler {
	return &scheduler{w: w, leader: l, faults: w.newFaults("scheduler"), cron: newCron(w)}
}

// Start begins the passes.
func (s *scheduler) Start(ctx context.Context) error {
	s.Go(ctx, func(ctx context.Context) {
		service.Supervise(ctx, "scheduler", s.w.log, s.w.restarted("scheduler"), s.loop)
	})
	return nil
}

func (s *scheduler) loop(ctx context.Context) error {
	interval := s.w.cfg.SchedulerInterval
	for {
		s.cron.declare(ctx) // once per process: the registry's periodic entries
		if err := s.runOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.w.metrics.redisErrors.WithLabelValues("scheduler").Inc()
			return err
		}
		// Up to a fifth longer, never shorter: passes of workers started together drift
		// apart, and an idle worker's one round trip a pass stays at most one a second.
		if !service.Sleep(ctx, service.JitterUp(interval, 0.2)) {
			return nil
		}
	}
}

// runOnce is one scheduler pass, one pipelined round trip when nothing is due:
// the lock (SET NX PX to acquire, lock_renew.lua to keep it, once a third of its TTL
// has passed since it was last taken or renewed), the leader's claim of due tasks on
// every known queue, the known-queue list for the next pass, and the heartbeat when it
// is due (so an idle worker's heartbeat costs no round trip of its own). Claims made in
// a pass whose renewal failed, or by a leader whose lock lapsed between renewals, are
// still exclusive (sched_claim.lua is atomic), so they are enqueued like any other.
func (s *scheduler) runOnce(ctx context.Context) error {
	w := s.w
	ttl := w.cfg.SchedulerLockTTL.Milliseconds()
	now := w.now()
	nowMS := now.UnixMilli()
	// a queue whose keys Redis refuses is left out for a while: the others move
	qs := slices.DeleteFunc(s.scheduledQueues(), func(q keys.Queue) bool { return s.faults.skip(q.Name) })

	p := w.rdb.Pipeline()
	lock := s.leader.queue(ctx, p, nowMS)
	var claims []*lua.Pending[lua.SchedClaimResult]
	var rescues []*lua.Pending[[]string]
	var names *redis.StringSliceCmd
	crons := make([]*redis.ZSliceCmd, len(qs))
	if lock.wasLeader {
		for i, q := range qs {
			crons[i] = s.cron.queue(ctx, p, q, nowMS)
			claims = append(claims, lua.SchedClaim.Queue(ctx, p, lua.SchedClaimArgs{Queue: q, NowMS: nowMS, Limit: schedBatch, StaleMS: nowMS - ttl}))
			rescues = append(rescues, lua.Rescue.Queue(ctx, p, lua.RescueArgs{Queue: q, NowMS: nowMS, CutoffMS: nowMS - lua.RescueAge.Milliseconds(), Limit: rescueBatch}))
		}
		names = p.SMembers(ctx, w.ks.Queues())
	}
	beat := w.heartbeat.due(now, w.cfg.SchedulerInterval)
	if beat {
		w.heartbeat.queue(ctx, p, w.status())
	}
	_, err := p.Exec(ctx)
	w.sawRedis(err)
	if err != nil && (lua.IsNoScript(err) || slices.ContainsFunc(claims, (*lua.Pending[lua.SchedClaimResult]).NoScript) ||
		slices.ContainsFunc(rescues, (*lua.Pending[[]string]).NoScript)) {
		// Redis lost its script cache (a restart): load the scripts; the next pass redoes this one.
		return lua.Load(ctx, w.rdb)
	}
	if beat && err == nil {
		w.heartbeat.lastBeat.Store(now.UnixNano())
	}
	if err != nil && !lua.IsKeyError(err) {
		return err // the server or the network: the whole pass failed
	}
	// A key error belongs to the queue whose commands got it; each is looked at below.

	if s.leader.settle(lock, nowMS) || !lock.wasLeader {
		return nil // the first pass as leader runs at the next tick
	}
	if names.Err() == nil {
		if lost := s.setKnownQueues(names.Val()); len(lost) > 0 {
			// the set lost queues this leader knew (a FLUSHALL, a restart without
			// persistence, a failover that lost the write): put them back
			w.log.Warn("scheduler: known queues missing from the queue set; added back", "queues", lost)
			if err := w.rdb.SAdd(ctx, w.ks.Queues(), lost...).Err(); err != nil {
				w.log.Warn("scheduler: adding back known queues failed", "err", err)
			}
		}
	}
	if s.passes.Add(1)%60 == 0 {
		if n, err := liveness.Prune(ctx, w.rdb, w.ks); err != nil {
			w.log.Warn("scheduler: pruning the workers set failed", "err", err)
		} else if n > 0 {
			w.log.Info("scheduler: pruned expired workers", "count", n)
		}
		if err := s.cron.heal(ctx, now); err != nil {
			w.log.Warn("scheduler: healing periodic entries failed", "err", err)
		}
	}
	for i, q := range qs {
		if err := s.scheduleResults(ctx, q, nowMS, ttl, claims[i], rescues[i]); err != nil {
			if !lua.IsKeyError(err) {
				return err
			}
			s.faults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, "", "schedule", err))
			continue
		}
		s.faults.ok(q.Name)
	}
	if err := s.cron.fire(ctx, qs, crons, now); err != nil {
		w.log.Warn("scheduler: firing periodic entries failed; the next pass tries again", "err", err)
	}
	s.trimDead(ctx) // retention.go: dead tasks beyond DTQ_DEAD_MAX or DTQ_DEAD_TTL_S
	return nil
}

// scheduleResults acts on one queue's rescue and scheduler claim of a pass: it reports
// the rescued hand-offs and enqueues the claimed tasks (working off a backlog).
func (s *scheduler) scheduleResults(ctx context.Context, q keys.Queue, nowMS, ttl int64, claim *lua.Pending[lua.SchedClaimResult], rescue *lua.Pending[[]string]) error {
	w := s.w
	ids, rerr := rescue.Result()
	if len(ids) > 0 {
		w.metrics.rescued.Add(float64(len(ids)))
		w.log.Warn("scheduler: put back tasks handed to a worker that never read them", "queue", q.Name, "count", len(ids))
		for _, id := range ids {
			w.publish(Event{Type: EventHandoffRescued, Queue: q.Name, TaskID: id})
		}
	}
	sc, err := claim.Result()
	if err != nil {
		return err
	}
	if err := s.enqueueClaimed(ctx, q, nowMS, sc.Due, sc.Stale); err != nil {
		return err
	}
	if len(sc.Due) == schedBatch { // a backlog: work it off now, batch by batch
		if err := s.scheduleQueue(ctx, q, ttl); err != nil {
			return err
		}
	}
	return rerr
}

// scheduledQueues are this worker's queues and every other known queue: the leader
// serves them all, or delayed tasks of a queue no leader serves would wait forever.
func (s *scheduler) scheduledQueues() []keys.Queue {
	w := s.w
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	out := append([]keys.Queue(nil), w.queues...)
	for _, n := range s.known {
		if _, own := w.byName[n]; !own {
			out = append(out, w.ks.Queue(n))
		}
	}
	return out
}

// setKnownQueues takes the queue set's members as the known queues, and keeps the ones
// known before that are missing from it, which it returns: queues are never removed
// from the set, so a missing one was lost with the set.
func (s *scheduler) setKnownQueues(names []string) (lost []any) {
	valid := names[:0]
	for _, n := range names {
		if keys.ValidQueue(n) == nil {
			valid = append(valid, n)
		}
	}
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	for _, n := range s.known {
		if !slices.Contains(valid, n) {
			lost = append(lost, n)
			valid = append(valid, n)
		}
	}
	s.known = valid
	return lost
}

func (s *scheduler) enqueueClaimed(ctx context.Context, q keys.Queue, nowMS int64, due, stale []string) error {
	w := s.w
	ids := append(due, stale...)
	if len(ids) == 0 {
		return nil
	}
	r, err := lua.SchedEnqueue.Run(ctx, w.rdb, lua.SchedEnqueueArgs{Queue: q, NowMS: nowMS, IDs: ids})
	w.sawRedis(err)
	if err != nil {
		return err // the claims stay in the claimed set; a later pass takes them as stale
	}
	if enq := r.Enqueued; len(enq) > 0 {
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
func (s *scheduler) scheduleQueue(ctx context.Context, q keys.Queue, lockTTL int64) error {
	w := s.w
	for i := 0; i < 100; i++ {
		nowMS := w.now().UnixMilli()
		sc, err := lua.SchedClaim.Run(ctx, w.rdb, lua.SchedClaimArgs{Queue: q, NowMS: nowMS, Limit: schedBatch, StaleMS: nowMS - lockTTL})
		w.sawRedis(err)
		if err != nil {
			return err
		}
		if err := s.enqueueClaimed(ctx, q, nowMS, sc.Due, sc.Stale); err != nil {
			return err
		}
		if len(sc.Due) < schedBatch {
			return nil
		}
	}
	return nil
}
