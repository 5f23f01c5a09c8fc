package runtime

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/internal/prom"
	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/lua"
)

// leader owns the scheduler lock: it takes it (SET NX PX with the worker id), renews it
// (lock_renew.lua, token checked) once a third of its TTL has passed since it was last
// taken or renewed, and releases it (lock_release.lua) at drain. Its commands ride in
// the scheduler's pipeline: queue adds the pass's lock command, settle reads its reply.
// Only the scheduler's goroutine calls queue and settle; the drain calls release after
// the scheduler stopped. Is may be read from anywhere.
type leader struct {
	rdb    redis.UniversalClient
	lock   string // the lock key
	token  string // the worker id
	ttlMS  int64
	log    *slog.Logger
	gauge  *prom.Gauge // dtq_worker_scheduler_leader
	notify func(Event) // publishes SCHEDULER_LEADER_ACQUIRED / _LOST
	seen   func(error) // the worker's Redis health (Worker.sawRedis)

	is       atomic.Bool
	lockedAt atomic.Int64 // unix ms of the pass that last took or renewed the lock
}

// lockCmd is one pass's lock command: an acquisition or a renewal (or nothing, for a
// leader whose lock is not due for renewal).
type lockCmd struct {
	wasLeader bool
	acquire   *redis.BoolCmd
	renew     *lua.Pending[bool]
}

// Is reports whether this worker holds the scheduler lock (as of its last pass).
func (l *leader) Is() bool { return l.is.Load() }

// queue adds this pass's lock command to p: SET NX PX when not the leader, the renewal
// when a third of the TTL has passed since the lock was last taken or renewed.
func (l *leader) queue(ctx context.Context, p redis.Pipeliner, nowMS int64) lockCmd {
	c := lockCmd{wasLeader: l.is.Load()}
	if !c.wasLeader {
		c.acquire = p.SetNX(ctx, l.lock, l.token, time.Duration(l.ttlMS)*time.Millisecond)
	} else if nowMS-l.lockedAt.Load() >= l.ttlMS/3 {
		c.renew = lua.LockRenew.Queue(ctx, p, lua.LockArgs{Lock: l.lock, Token: l.token, TTLMS: l.ttlMS})
	}
	return c
}

// settle reads the lock command's reply once the pipeline ran: it reports whether this
// pass took the lock (the first pass as leader does no work: it runs at the next tick).
func (l *leader) settle(c lockCmd, nowMS int64) (acquired bool) {
	if !c.wasLeader {
		if !c.acquire.Val() {
			return false
		}
		l.lockedAt.Store(nowMS) // the lock's TTL runs from no earlier than this
		l.set(true)
		l.log.Info("scheduler: became leader")
		l.notify(Event{Type: EventLeaderAcquired})
		return true
	}
	if c.renew != nil {
		if ok, _ := c.renew.Result(); ok {
			l.lockedAt.Store(nowMS)
		} else {
			l.set(false)
			l.log.Warn("scheduler: lost the leader lock")
			l.notify(Event{Type: EventLeaderLost})
		}
	}
	return false
}

// release gives the lock up (token checked), when held; bounded by a second.
func (l *leader) release() {
	if !l.is.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaderReleaseTimeout)
	defer cancel()
	_, err := lua.LockRelease.Run(ctx, l.rdb, lua.LockArgs{Lock: l.lock, Token: l.token})
	l.seen(err)
	if err != nil {
		l.log.Warn("scheduler: lock release failed", "err", err)
	}
	l.set(false)
}

func (l *leader) set(is bool) {
	l.is.Store(is)
	if is {
		l.gauge.Set(1)
	} else {
		l.gauge.Set(0)
	}
}

// leaderReleaseTimeout bounds the lock's release at drain.
const leaderReleaseTimeout = time.Second
