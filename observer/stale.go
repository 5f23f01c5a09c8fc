package observer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// StaleWatcher publishes WORKER_STALE on the events stream when a worker's heartbeat
// goes stale: once per worker going stale, however many observer replicas run one, and
// never for a worker that reported stopped. Every pass it reads every worker of the
// workers set and judges it with internal/liveness; stale.lua then publishes, atomically
// with the check that the record is still the one judged and that no replica published
// for it (a marker PREFIX:stale:ID says so).
//
// A worker whose record expired (a killed worker's record expires as it goes stale)
// is published once, keyed on its id: the marker lasts while the id stays in the
// workers set, and lua.StaleMarkTTL after. A worker that stopped cleanly is remembered
// by the marker too, when a pass saw its "stopped" record before it expired.
type StaleWatcher struct {
	service.Base
	rdb    redis.UniversalClient
	ks     keys.Space
	every  time.Duration
	maxLen int64
	log    *slog.Logger
	now    func() time.Time

	passes    atomic.Int64
	published atomic.Int64

	mu         sync.Mutex
	unreadable map[string]bool // ids whose record Redis refused to read, logged once
}

// StaleOptions build a StaleWatcher.
type StaleOptions struct {
	Redis     redis.UniversalClient
	KeyPrefix string
	Every     time.Duration // between passes; 0: 2 s
	MaxLen    int64         // MAXLEN ~ of the events stream; 0: the watcher does nothing
	Logger    *slog.Logger  // nil: discard
	Now       func() time.Time
}

// NewStaleWatcher returns a watcher; it starts nothing.
func NewStaleWatcher(o StaleOptions) *StaleWatcher {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	return &StaleWatcher{rdb: o.Redis, ks: keys.New(o.KeyPrefix), every: o.Every, maxLen: o.MaxLen,
		log: o.Logger, now: o.Now, unreadable: map[string]bool{}}
}

// Start starts the passes, the first at once, and returns. It starts nothing when the
// events are off (MaxLen 0) or on Redis Cluster, whose slots the script's keys span.
func (w *StaleWatcher) Start(ctx context.Context) error {
	if w.maxLen <= 0 {
		w.log.Info("stale watcher: off (DTQ_EVENTS_MAXLEN=0)")
		return nil
	}
	if _, ok := w.rdb.(*redis.ClusterClient); ok {
		w.log.Warn("stale watcher: off on Redis Cluster (its script spans several slots)")
		return nil
	}
	w.Go(ctx, func(ctx context.Context) {
		service.Supervise(ctx, "stale watcher", w.log, nil, w.loop)
	})
	return nil
}

// Passes is the number of passes completed, Published the events this watcher
// published.
func (w *StaleWatcher) Passes() int64    { return w.passes.Load() }
func (w *StaleWatcher) Published() int64 { return w.published.Load() }

func (w *StaleWatcher) loop(ctx context.Context) error {
	failing := false
	for {
		err := w.Pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !failing {
			w.log.Warn("stale watcher: pass failed", "err", err)
		} else if err == nil && failing {
			w.log.Info("stale watcher: passes succeed again")
		}
		failing = err != nil
		if !service.Sleep(ctx, service.Jitter(w.every, 0.1)) {
			return nil
		}
	}
}

// passTimeout bounds one pass's Redis work.
const passTimeout = 10 * time.Second

// Pass judges every worker once. A worker whose record or marker Redis refuses to read
// (a key of another type) is logged, once, and skipped; the others are still judged.
func (w *StaleWatcher) Pass(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	ids, err := w.rdb.SMembers(ctx, w.ks.Workers()).Result()
	if err != nil {
		return fmt.Errorf("read the workers set: %w", err)
	}
	recs := make([]*redis.MapStringStringCmd, len(ids))
	marks := make([]*redis.StringCmd, len(ids))
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			recs[i] = p.HGetAll(ctx, w.ks.Worker(id))
			marks[i] = p.Get(ctx, w.ks.StaleMark(id))
		}
		return nil
	})
	if redisconn.NoReply(err) {
		return fmt.Errorf("read the workers: %w", err)
	}
	for i := range ids {
		for _, err := range []error{recs[i].Err(), marks[i].Err()} {
			if redisconn.NoReply(err) {
				return fmt.Errorf("read the workers: %w", err)
			}
		}
	}
	var errs []error
	for i, id := range ids {
		mark := marks[i].Err()
		if err := recs[i].Err(); err != nil || (mark != nil && !errors.Is(mark, redis.Nil)) {
			w.skip(id, errors.Join(err, mark))
			continue
		}
		if err := w.judge(ctx, id, recs[i].Val(), mark == nil); err != nil {
			if redisconn.NoReply(err) {
				errs = append(errs, err)
				continue
			}
			w.skip(id, err)
			continue
		}
		w.readable(id)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	w.passes.Add(1)
	return nil
}

// judge settles one worker: rec its heartbeat hash (empty: expired), marked whether
// it has a marker.
func (w *StaleWatcher) judge(ctx context.Context, id string, rec map[string]string, marked bool) error {
	now := w.now()
	a := lua.StaleArgs{Record: w.ks.Worker(id), Mark: w.ks.StaleMark(id), Events: w.ks.Events(),
		Worker: id, NowMS: now.UnixMilli(), MaxLen: w.maxLen, Heartbeat: rec[liveness.FieldLastHeartbeat]}
	wk := liveness.Decode(id, rec, now)
	switch {
	case len(rec) == 0:
		a.Judged, a.Detail = lua.JudgedExpired, "heartbeat record expired: last heartbeat over 3× its interval ago"
	case wk.Liveness == liveness.Stale:
		a.Judged = lua.JudgedStale
		if wk.LastHeartbeat.IsZero() {
			a.Detail = "no last heartbeat in its record"
		} else {
			a.Detail = fmt.Sprintf("last heartbeat %s ago", now.Sub(wk.LastHeartbeat).Round(time.Millisecond))
		}
	case wk.Liveness == liveness.Gone && !marked:
		a.Judged = lua.JudgedStopped
	case wk.Liveness == liveness.Live && marked:
		a.Judged = lua.JudgedLive
	default:
		return nil // live and unmarked, or stopped and marked: nothing to settle
	}
	out, err := lua.Stale.Run(ctx, w.rdb, a)
	if err != nil {
		return err
	}
	if out == lua.StalePublished {
		w.published.Add(1)
		w.log.Info("stale watcher: WORKER_STALE published", "worker", id, "detail", a.Detail)
	}
	return nil
}

// skip logs, once until it is readable again, a worker whose keys Redis refuses to read.
func (w *StaleWatcher) skip(id string, err error) {
	w.mu.Lock()
	seen := w.unreadable[id]
	w.unreadable[id] = true
	w.mu.Unlock()
	if !seen {
		w.log.Warn("stale watcher: worker skipped: its keys cannot be read", "worker", id, "err", err)
	}
}

func (w *StaleWatcher) readable(id string) {
	w.mu.Lock()
	delete(w.unreadable, id)
	w.mu.Unlock()
}
