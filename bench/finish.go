package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// keyspaceNotifications turns on keyspace notifications of hash commands for the
// benchmark's Redis, and returns how to put the setting back and whether it could. Only
// on a single Redis: on a cluster a notification comes from the node holding the key.
func (e *benchEnv) keyspaceNotifications(ctx context.Context) (restore func(), ok bool) {
	if _, single := e.rdb.(*redis.Client); !single {
		return func() {}, false
	}
	was, err := e.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return func() {}, false
	}
	old := was["notify-keyspace-events"]
	// h: the claim's and the completion's HSET; g: the completion's PEXPIRE of a task
	// that succeeded, the last write of that script.
	if err := e.rdb.ConfigSet(ctx, "notify-keyspace-events", "Khg").Err(); err != nil {
		return func() {}, false
	}
	return func() { _ = e.rdb.ConfigSet(context.Background(), "notify-keyspace-events", old).Err() }, true
}

// finishWatch waits for one task's outcome to be recorded.
type finishWatch struct {
	ctx    context.Context
	q      keys.Queue
	id     string
	rdb    redis.UniversalClient
	sub    *redis.PubSub // nil: poll the band's stream instead
	cancel context.CancelFunc
}

// watchFinish starts watching task id of q; call it before the worker is started.
func (e *benchEnv) watchFinish(ctx context.Context, q keys.Queue, id string, notify bool) (*finishWatch, error) {
	f := &finishWatch{q: q, id: id, rdb: e.rdb}
	f.ctx, f.cancel = context.WithCancel(ctx)
	if notify {
		f.sub = e.rdb.Subscribe(f.ctx, fmt.Sprintf("__keyspace@%d__:%s", e.db, q.Task(id)))
		if _, err := f.sub.Receive(f.ctx); err != nil { // the subscription is confirmed
			f.stop()
			return nil, err
		}
	}
	return f, nil
}

func (f *finishWatch) stop() {
	if f.sub != nil {
		_ = f.sub.Close()
	}
	f.cancel()
}

// wait returns when the task's status turned final: the time the notification of the
// write that made it so arrived, or, polling, the time a poll saw its entry gone.
func (f *finishWatch) wait(limit time.Duration) (time.Time, error) {
	defer f.stop()
	if f.sub == nil {
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
			n, err := f.rdb.XLen(f.ctx, f.q.Stream(0)).Result()
			if err != nil {
				return time.Time{}, err
			}
			if n == 0 {
				return time.Now(), nil
			}
			time.Sleep(100 * time.Microsecond)
		}
		return time.Time{}, errors.New("task not finished in time")
	}
	// A notification is timed when it is read; the status read that follows may already
	// see a later write (the claim's HSET is read, the task has succeeded meanwhile), so
	// a success is timed by the completion's own last write, its PEXPIRE ("expire"),
	// when one comes (a worker keeping results forever sends none).
	ch := f.sub.Channel()
	t := time.NewTimer(limit)
	defer t.Stop()
	var succeeded time.Time
	var grace <-chan time.Time
	for {
		select {
		case m := <-ch:
			at := time.Now()
			if m.Payload == "expire" {
				return at, nil
			}
			if !succeeded.IsZero() {
				continue
			}
			st, err := f.rdb.HGet(f.ctx, f.q.Task(f.id), "status").Result()
			if err != nil {
				return time.Time{}, err
			}
			switch client.Status(st) {
			case client.StatusSucceeded:
				succeeded, grace = at, time.After(time.Second)
			case client.StatusDead, client.StatusRetrying:
				return at, nil
			}
		case <-grace:
			return succeeded, nil
		case <-t.C:
			return time.Time{}, errors.New("task not finished in time")
		}
	}
}
