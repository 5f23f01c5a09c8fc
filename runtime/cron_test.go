package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/runtime"
)

// runs records the executions of a function by task id.
type runs struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func newRuns() *runs { return &runs{at: map[string][]time.Time{}} }

func (r *runs) fn(_ context.Context, t *runtime.Task) ([]byte, error) {
	r.mu.Lock()
	r.at[t.ID] = append(r.at[t.ID], time.Now())
	r.mu.Unlock()
	return nil, nil
}

func (r *runs) snapshot() map[string][]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]time.Time{}
	for k, v := range r.at {
		out[k] = append([]time.Time(nil), v...)
	}
	return out
}

// A declared 1 s entry fires one task per tick, ids by tick, each run once; a tick whose
// advance was lost (the leader died between the enqueue and the advance) is fired again,
// absorbed, and the entry moves on.
func TestPeriodicFiresEachTickOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := newRuns()
	reg := runtime.NewRegistry()
	reg.Register("tick", r.fn, runtime.FuncOptions{})
	if err := reg.Periodic("sec", "@every 1s", runtime.PeriodicTask{Queue: "cronq", Function: "tick", Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	if got := reg.PeriodicNames(); len(got) != 1 || got[0] != "sec" {
		t.Fatalf("PeriodicNames = %v", got)
	}
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "cronq"), reg, nil)
	eventually(t, "three ticks run", func() bool { return len(r.snapshot()) >= 3 })
	got := r.snapshot()
	var ticks []int64
	for id, at := range got {
		name, tick, ok := client.CronTick(id)
		if !ok || name != "sec" {
			t.Fatalf("task id %q is not a tick of sec", id)
		}
		if len(at) != 1 {
			t.Errorf("tick %s ran %d times", id, len(at))
		}
		t.Logf("tick %d: fired %v after its time", tick, at[0].Sub(time.UnixMilli(tick)))
		ticks = append(ticks, tick)
	}
	for _, tk := range ticks {
		if tk%1000 != 0 {
			t.Errorf("tick %d is not on a second", tk)
		}
	}
	// lose an advance: put the entry back on a tick already fired
	first := ticks[0]
	for _, tk := range ticks {
		first = min(first, tk)
	}
	zkey := keysQueueCron(e, "cronq")
	if err := e.rdb.ZAdd(e.ctx, zkey, redis.Z{Score: float64(first), Member: "sec"}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the entry moved past the re-fired tick", func() bool {
		s, err := e.rdb.ZScore(e.ctx, zkey, "sec").Result()
		return err == nil && int64(s) > time.Now().UnixMilli()-1000 && int64(s) > first
	})
	eventually(t, "two more ticks run", func() bool { return len(r.snapshot()) >= len(got)+2 })
	for id, at := range r.snapshot() {
		if len(at) != 1 {
			t.Errorf("tick %s ran %d times after the lost advance", id, len(at))
		}
	}
	// consecutive ticks: none lost between the first and the last
	all := r.snapshot()
	lo, hi := int64(1<<62), int64(0)
	for id := range all {
		_, tk, _ := client.CronTick(id)
		lo, hi = min(lo, tk), max(hi, tk)
	}
	if want := int((hi-lo)/1000) + 1; want != len(all) {
		t.Errorf("ticks %d..%d: %d ran, want %d (one per second)", lo, hi, len(all), want)
	}
}

// Ticks that fell due while no worker ran: within the lateness bound each fires; beyond
// it "once" fires one task (the first missed tick's id) and "skip" none, and the
// entry goes on from now. A paused entry and a removed one fire nothing.
func TestCronMissedTicksWithNoWorker(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := e.ctx
	now := time.Now()
	add := func(name, spec string, missed client.MissedPolicy, tick int64) {
		t.Helper()
		if _, err := e.c.AddCron(ctx, client.CronEntry{Name: name, Spec: spec, Queue: "missq", Function: "noop", Missed: missed}); err != nil {
			t.Fatal(err)
		}
		// the tick it waits for, as if no worker had run since
		if err := e.rdb.ZAdd(ctx, keysQueueCron(e, "missq"), redis.Z{Score: float64(tick), Member: name}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := now.Add(-time.Hour).Truncate(time.Second).UnixMilli()
	add("once", "0 0 1 1 *", client.MissedOnce, hourAgo)
	add("skip", "0 0 1 1 *", client.MissedSkip, hourAgo)
	late := now.Add(-3 * time.Second).Truncate(time.Second).UnixMilli() // within the 5 s bound
	add("late", "@every 1s", client.MissedSkip, late)
	add("paused", "0 0 1 1 *", client.MissedOnce, hourAgo)
	if err := e.c.PauseCron(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	add("gone", "0 0 1 1 *", client.MissedOnce, hourAgo)
	if err := e.rdb.HDel(ctx, keys.New(e.prefix).Cron(), "gone").Err(); err != nil { // the definition is gone, its member left
		t.Fatal(err)
	}
	reg := runtime.NewRegistry()
	reg.Register("noop", func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	rec := newRecorder()
	rec.logOnFailure(t)
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "missq"), reg, rec)

	zkey := keysQueueCron(e, "missq")
	eventually(t, "every entry moved on", func() bool {
		zs, _ := e.rdb.ZRangeWithScores(ctx, zkey, 0, -1).Result()
		if len(zs) != 3 { // once, skip, late: the paused and the removed left the zset
			return false
		}
		for _, z := range zs {
			if int64(z.Score) <= now.UnixMilli() {
				return false
			}
		}
		return true
	})
	exists := func(id string) bool {
		_, err := e.c.Get(ctx, "missq", id)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !exists(client.CronTaskID("once", hourAgo)) {
		t.Error(`missed policy "once": no task for the missed tick`)
	}
	if exists(client.CronTaskID("skip", hourAgo)) {
		t.Error(`missed policy "skip": the missed tick fired`)
	}
	for tk := late; tk <= late+2000; tk += 1000 {
		if !exists(client.CronTaskID("late", tk)) {
			t.Errorf("late tick %d (within the bound) did not fire", tk)
		}
	}
	for _, id := range []string{client.CronTaskID("paused", hourAgo), client.CronTaskID("gone", hourAgo)} {
		if exists(id) {
			t.Errorf("%s fired", id)
		}
	}
	onceTasks, _ := e.rdb.Keys(ctx, e.prefix+":{missq}:t:cron-once-*").Result()
	if len(onceTasks) != 1 {
		t.Errorf(`"once" fired %d tasks, want 1`, len(onceTasks))
	}
	for _, want := range []string{"once once", "skip skip"} {
		rec.wait(t, "CRON_MISSED "+want, func(ev runtime.Event) bool { return ev.Type == runtime.EventCronMissed && ev.Detail == want })
	}
	rec.wait(t, "CRON_FIRED of once", is(runtime.EventCronFired, client.CronTaskID("once", hourAgo)))
	if n := rec.count(func(ev runtime.Event) bool { return ev.Type == runtime.EventCronMissed }); n != 2 {
		t.Errorf("%d CRON_MISSED events, want 2 (late ticks within the bound are not missed)", n)
	}
	ci, _ := e.c.Cron(ctx, "once")
	if next := time.UnixMilli(ci.NextMS); next.Month() != time.January || next.Day() != 1 || !next.After(now) {
		t.Errorf(`"once" goes on at %v, want the next 1 January`, next)
	}
}

// Declarations are checked when made.
func TestPeriodicRefusesBadDeclarations(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	for _, c := range []struct {
		name, spec string
		task       runtime.PeriodicTask
	}{
		{"x", "every second", runtime.PeriodicTask{Queue: "q", Function: "f"}},
		{"x", "@every 1s", runtime.PeriodicTask{Queue: "q", Function: "f", Missed: "later"}},
		{"bad name", "@every 1s", runtime.PeriodicTask{Queue: "q", Function: "f"}},
		{"x", "@every 1s", runtime.PeriodicTask{Queue: "q{", Function: "f"}},
		{"x", "@every 1s", runtime.PeriodicTask{Queue: "q"}},
	} {
		if err := reg.Periodic(c.name, c.spec, c.task); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("Periodic(%q, %q, %+v) = %v, want ErrInvalid", c.name, c.spec, c.task, err)
		}
	}
	if n := reg.PeriodicNames(); len(n) != 0 {
		t.Errorf("refused declarations were kept: %v", n)
	}
}

// keysQueueCron is the cron zset of queue q in e's key space.
func keysQueueCron(e *env, q string) string { return keys.New(e.prefix).Queue(q).Cron() }

// An entry lost from its queue's zset (a failover that lost the write) is put back by
// the leader from its definition; a paused one is not.
func TestCronLostMemberHealed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := e.ctx
	for _, n := range []string{"lost", "paused"} {
		if _, err := e.c.AddCron(ctx, client.CronEntry{Name: n, Spec: "@yearly", Queue: "healq", Function: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.PauseCron(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	zkey := keysQueueCron(e, "healq")
	if err := e.rdb.ZRem(ctx, zkey, "lost").Err(); err != nil {
		t.Fatal(err)
	}
	startWorker(t, e.rdb, e.config(t, "DTQ_QUEUES", "healq"), runtime.NewRegistry(), nil)
	eventually(t, "the lost entry back in its zset", func() bool {
		_, err := e.rdb.ZScore(ctx, zkey, "lost").Result()
		return err == nil
	})
	if _, err := e.rdb.ZScore(ctx, zkey, "paused").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the paused entry is in the zset (%v)", err)
	}
}
