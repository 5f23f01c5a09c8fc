package runtime

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// Dead-task retention. Dead tasks stay for inspection and requeue, but not without
// bound: the scheduler leader deletes, oldest first, the dead tasks of every known queue
// beyond DTQ_DEAD_MAX or older than DTQ_DEAD_TTL_S (trim_dead.lua, one queue per call,
// atomic). It looks at every queue once every deadTrimEvery; a queue with more to delete
// than one call's batch is worked on again in every pass, up to deadTrimRounds calls a
// pass, until it is within its bounds.
const (
	deadTrimEvery  = 30 * time.Second
	deadTrimBatch  = 200 // most deletions of one call: about a millisecond of Redis
	deadTrimRounds = 25  // most calls on one queue in one pass: 5 000 deletions
)

// retention is the leader's trimming state; only the scheduler's goroutine uses it.
type retention struct {
	next    int64           // w.now() in unix ms when every queue is looked at again
	backlog map[string]bool // queues whose last call stopped at its batch
	faults  *faults         // queues whose keys Redis refuses, left out for a while
}

// trimDead is the scheduler leader's retention step of a pass: every deadTrimEvery all
// known queues (as of this pass: a new leader's first pass sees them all), in between
// the ones with a backlog. A worker that does not lead does nothing. Failures are logged and counted, never returned: trimming waits
// for a later pass, scheduling goes on.
func (s *scheduler) trimDead(ctx context.Context) {
	w := s.w
	if !s.leader.Is() {
		return
	}
	r := s.retention
	if r == nil {
		r = &retention{backlog: map[string]bool{}, faults: w.newFaults("retention")}
		s.retention = r
	}
	now := w.now().UnixMilli()
	all := now >= r.next
	if all {
		r.next = now + deadTrimEvery.Milliseconds()
	}
	qs := s.scheduledQueues()
	var todo []keys.Queue
	for _, q := range qs {
		if (all || r.backlog[q.Name]) && !r.faults.skip(q.Name) {
			todo = append(todo, q)
		}
	}
	clear(r.backlog)
	trimmed := map[string]int64{}
	for round := 0; round < deadTrimRounds && len(todo) > 0; round++ {
		var stop bool
		todo, stop = s.trimRound(ctx, r, todo, trimmed, false)
		if stop {
			break
		}
	}
	for _, q := range todo {
		r.backlog[q.Name] = true
	}
	for _, q := range qs {
		if n := trimmed[q.Name]; n > 0 {
			w.log.Info("retention: deleted dead tasks beyond the bounds", "queue", q.Name, "count", n,
				"more", r.backlog[q.Name], "max", w.cfg.DeadMax, "ttl_s", w.cfg.DeadTTL.Seconds())
			w.publish(Event{Type: EventDeadTrimmed, Queue: q.Name, Detail: strconv.FormatInt(n, 10)})
		}
	}
}

// trimRound makes one trim call on each of qs, in one pipeline, adds what each deleted
// to trimmed and returns the queues with more to delete; stop: the round failed as a
// whole (Redis or the network), try again in a later pass. A round that found the script
// missing loads it and runs again, once (reloaded).
func (s *scheduler) trimRound(ctx context.Context, r *retention, qs []keys.Queue, trimmed map[string]int64, reloaded bool) (more []keys.Queue, stop bool) {
	w := s.w
	a := lua.TrimDeadArgs{NowMS: w.now().UnixMilli(), Max: w.cfg.DeadMax, TTLMS: w.cfg.DeadTTL.Milliseconds(), Limit: deadTrimBatch}
	p := w.rdb.Pipeline()
	cmds := make([]*lua.Pending[lua.TrimDeadResult], 0, len(qs))
	for _, q := range qs {
		a.Queue = q
		c := lua.TrimDead.Queue(ctx, p, a)
		if err := c.Err(); err != nil { // refused before Exec: the arguments are fixed and valid, a bug
			w.log.Error("retention: bad trim arguments", "err", err)
			return qs, true
		}
		cmds = append(cmds, c)
	}
	_, err := p.Exec(ctx)
	w.sawRedis(err)
	if err != nil && (lua.IsNoScript(err) || slices.ContainsFunc(cmds, (*lua.Pending[lua.TrimDeadResult]).NoScript)) {
		// Redis lost its script cache (a restart), or never had the script: load it and
		// run the round again. A Redis that refuses it (before 7.0: no script flags) is
		// asked again at the next sweep.
		if reloaded {
			return qs, true
		}
		if lerr := lua.LoadTrimDead(ctx, w.rdb); lerr != nil {
			if ctx.Err() == nil {
				w.metrics.redisErrors.WithLabelValues("retention").Inc()
				w.log.Warn("retention: loading trim_dead.lua failed (it needs Redis 7.0 or later); dead tasks are not trimmed", "err", lerr)
			}
			return nil, true
		}
		return s.trimRound(ctx, r, qs, trimmed, true)
	}
	if err != nil && !lua.IsKeyError(err) {
		if ctx.Err() == nil {
			w.metrics.redisErrors.WithLabelValues("retention").Inc()
			w.log.Warn("retention: trimming dead tasks failed; a later pass tries again", "err", err)
		}
		return qs, true
	}
	for i, q := range qs {
		res, err := cmds[i].Result()
		if err != nil {
			if lua.IsKeyError(err) {
				r.faults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, "", "trim dead tasks", err))
			} else {
				w.metrics.redisErrors.WithLabelValues("retention").Inc()
				w.log.Warn("retention: trimming dead tasks failed; a later pass tries again", "queue", q.Name, "err", err)
			}
			continue
		}
		r.faults.ok(q.Name)
		if res.Trimmed > 0 {
			trimmed[q.Name] += res.Trimmed
			w.metrics.deadTrimmed.WithLabelValues(q.Name).Add(float64(res.Trimmed))
		}
		if res.More {
			more = append(more, q)
		}
	}
	return more, false
}
