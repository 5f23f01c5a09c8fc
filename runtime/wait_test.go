package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/runtime"
)

type waited struct {
	ti  *client.TaskInfo
	err error
}

func (e *env) waitAsync(ctx context.Context, id string) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		ti, err := e.c.Wait(ctx, "default", id)
		ch <- waited{ti, err}
	}()
	return ch
}

// waitersGone polls until the queue's waiters key is gone: nothing left behind.
func (e *env) waitersGone(t *testing.T) {
	t.Helper()
	k := keys.New(e.prefix).Queue("default").Waiters()
	deadline := time.Now().Add(waitTimeout)
	for e.rdb.Exists(e.ctx, k).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %v", k, e.rdb.ZRangeWithScores(e.ctx, k, 0, -1).Val())
		}
		waitTick()
	}
}

// Wait returns the final record once the task ends, through a retry, and leaves no
// registration behind.
func TestWaitReturnsTheFinalRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := newBlocking(1) // attempt 1 blocks until released, then fails; attempt 2 succeeds
	reg := runtime.NewRegistry()
	reg.Register("flaky", func(ctx context.Context, task *runtime.Task) ([]byte, error) {
		if task.Attempt == 1 {
			if _, err := b.fn(ctx, task); err != nil {
				return nil, err
			}
			return nil, errors.New("first attempt fails")
		}
		return []byte("second"), nil
	}, runtime.FuncOptions{MaxRetries: 3})
	startWorker(t, e.rdb, e.config(t), reg, nil)
	id := e.enqueue(t, client.Task{Function: "flaky"})
	ch := e.waitAsync(e.ctx, id)
	<-b.started
	// the waiter is registered before the attempt ends (it subscribed first)
	k := keys.New(e.prefix).Queue("default").Waiters()
	deadline := time.Now().Add(waitTimeout)
	for e.rdb.ZScore(e.ctx, k, id).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never registered")
		}
		waitTick()
	}
	close(b.release)
	w := <-ch
	if w.err != nil || w.ti.Status != client.StatusSucceeded || string(w.ti.Result) != "second" || w.ti.Attempt != 2 {
		t.Fatalf("Wait = %+v, %v; want succeeded at attempt 2", w.ti, w.err)
	}
	e.waitersGone(t)
	// a task that has ended returns at once
	if ti, err := e.c.Wait(e.ctx, "default", id); err != nil || ti.Status != client.StatusSucceeded {
		t.Fatalf("Wait on an ended task = %+v, %v", ti, err)
	}
}

// A cancel ends a wait: of a waiting task (cancel.lua tells the waiter) and of a running
// one (the worker's cancelled outcome does).
func TestWaitSeesCancels(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := runtime.NewRegistry()
	started := make(chan struct{}, 1)
	reg.Register("wait", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}, runtime.FuncOptions{})
	queued := e.enqueue(t, client.Task{Function: "wait", Delay: time.Hour})
	ch := e.waitAsync(e.ctx, queued)
	k := keys.New(e.prefix).Queue("default").Waiters()
	for e.rdb.ZScore(e.ctx, k, queued).Err() != nil {
		waitTick()
	}
	if _, err := e.c.CancelTask(e.ctx, "default", queued); err != nil {
		t.Fatal(err)
	}
	if w := <-ch; w.err != nil || w.ti.Status != client.StatusCancelled {
		t.Fatalf("Wait on a cancelled scheduled task = %+v, %v", w.ti, w.err)
	}

	startWorker(t, e.rdb, e.config(t), reg, nil)
	running := e.enqueue(t, client.Task{Function: "wait"})
	<-started
	ch = e.waitAsync(e.ctx, running)
	for e.rdb.ZScore(e.ctx, k, running).Err() != nil {
		waitTick()
	}
	if out, err := e.c.CancelTask(e.ctx, "default", running); err != nil || out != client.CancelRequested {
		t.Fatalf("cancel: %q %v", out, err)
	}
	if w := <-ch; w.err != nil || w.ti.Status != client.StatusCancelled {
		t.Fatalf("Wait on a cancelled running task = %+v, %v", w.ti, w.err)
	}
	e.waitersGone(t)
}

// Bad input and an unknown task get clear errors; a wait that times out ends its
// registration.
func TestWaitErrorsAndTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, err := e.c.Wait(e.ctx, "default", "nosuch"); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("Wait on an unknown id: %v", err)
	}
	if _, err := e.c.Wait(e.ctx, "a{b", "x"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Wait on a bad queue name: %v", err)
	}
	if _, err := e.c.Wait(e.ctx, "default", ""); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Wait on an empty id: %v", err)
	}
	id := e.enqueue(t, client.Task{Function: "noop", Delay: time.Hour})
	ctx, cancel := context.WithCancel(e.ctx)
	ch := e.waitAsync(ctx, id)
	k := keys.New(e.prefix).Queue("default").Waiters()
	for e.rdb.ZScore(e.ctx, k, id).Err() != nil {
		waitTick()
	}
	cancel()
	if w := <-ch; !errors.Is(w.err, context.Canceled) {
		t.Fatalf("Wait after its ctx ended = %+v, %v", w.ti, w.err)
	}
	e.waitersGone(t)
}

// A waiter that vanishes without ending its registration (its process killed) leaves a
// registration that lapses: the key expires with it.
func TestWaiterThatVanishesLeavesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.enqueue(t, client.Task{Function: "noop", Delay: time.Hour})
	q := keys.New(e.prefix).Queue("default")
	c := e.srv.Client(t)
	now := time.Now().UnixMilli()
	if st, err := luaWait(e.ctx, c, q, id, now, now+300); err != nil || st != "scheduled" {
		t.Fatalf("register: %q %v", st, err)
	}
	_ = c.Close() // gone, without a word
	if ttl := e.rdb.PTTL(e.ctx, q.Waiters()).Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("waiters key ttl %v; want it to expire with the registration", ttl)
	}
	e.waitersGone(t)
}

// No waiter, no cost: completions publish nothing and create no key.
func TestNoWaiterNoPublish(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	b := newBlocking(0)
	reg := runtime.NewRegistry()
	reg.Register("noop", func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	reg.Register("block", b.fn, runtime.FuncOptions{})
	startWorker(t, rdb, testConfig(t, srv.URL(), prefix, nil), reg, nil)
	ctx := context.Background()
	var ids []string
	for i := 0; i < 50; i++ {
		id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		for {
			ti, err := c.Get(ctx, "default", id)
			if err != nil {
				t.Fatal(err)
			}
			if ti.Status == client.StatusSucceeded {
				break
			}
			waitTick()
		}
	}
	info := rdb.Info(ctx, "commandstats").Val()
	if strings.Contains(info, "cmdstat_publish:") {
		t.Fatalf("PUBLISH was called with nobody waiting:\n%s", info)
	}
	if n := rdb.Exists(ctx, keys.New(prefix).Queue("default").Waiters()).Val(); n != 0 {
		t.Fatal("a waiters key exists with nobody waiting")
	}
	// and with a waiter, exactly its task is published
	id, _, _ := c.Enqueue(ctx, client.Task{Queue: "default", Function: "block"})
	<-b.started
	ch := make(chan waited, 1)
	go func() {
		ti, err := c.Wait(ctx, "default", id)
		ch <- waited{ti, err}
	}()
	for rdb.ZScore(ctx, keys.New(prefix).Queue("default").Waiters(), id).Err() != nil {
		waitTick()
	}
	close(b.release)
	if w := <-ch; w.err != nil || w.ti.Status != client.StatusSucceeded {
		t.Fatalf("Wait = %+v, %v", w.ti, w.err)
	}
	if info := rdb.Info(ctx, "commandstats").Val(); !strings.Contains(info, "cmdstat_publish:calls=1,") {
		t.Fatalf("want one PUBLISH for one waited task:\n%s", info)
	}
}

func luaWait(ctx context.Context, c *redis.Client, q keys.Queue, id string, now, until int64) (string, error) {
	return lua.Wait.Run(ctx, c, lua.WaitArgs{Queue: q, ID: id, NowMS: now, UntilMS: until})
}
