package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// Periodic tasks (cron). Entries are declared in code (Registry.Periodic: a worker
// upserts its declarations at start) or managed at run time (client.AddCron, dtq cron).
// The scheduler leader fires them: in its pipelined pass it reads, per known queue,
// the entries whose next tick is due (ZRANGEBYSCORE PREFIX:{Q}:cron -inf now), and for
// each enqueues the tick's task with the id client.CronTaskID(name, tick), then moves
// the entry on with cron_advance.lua, a compare-and-set on the tick it handled.
//
// Exactly once: a re-fire of a tick (a leader that died between the enqueue and the
// advance, or two leaders overlapping) is refused by the enqueue as ErrTaskExists and
// absorbed; the advance of the second does nothing. The window left: a tick re-fired
// after its first task's record expired (DTQ_RESULT_TTL_S shorter than the leader's
// failover) runs again.
//
// Lateness: a tick fired within cronLateness(cfg) of its time counts as on time (a
// leader failover, a slow pass); ticks older than that were missed (no worker ran)
// and follow the entry's policy: "once" fires one task, with the id of the first
// missed tick, "skip" fires none; the entry then goes on from the first tick within
// the bound.

// PeriodicTask is the task a periodic entry declared in code enqueues at each tick.
type PeriodicTask struct {
	Queue      string
	Function   string
	Payload    []byte // UTF-8 text: it is kept in the entry's JSON definition
	Priority   int
	MaxRetries *int          // nil: the function's default
	Timeout    time.Duration // 0: the function's default
	Unique     string        // a unique key for its tasks: a tick while one runs adds none
	// Missed: what to do with ticks missed while no worker ran (client.MissedOnce, the
	// default, or client.MissedSkip).
	Missed client.MissedPolicy
}

// Periodic declares a periodic entry: every worker with this registry upserts it into
// Redis at start (an unchanged entry is left as it is, paused or not). spec is a
// five-field cron line or a descriptor (@hourly, @every 30s), optionally after
// "CRON_TZ=Zone ". A second declaration of a name replaces the first. It refuses a bad
// name, spec, missed policy or task with an error wrapping client.ErrInvalid.
func (r *Registry) Periodic(name, spec string, t PeriodicTask) error {
	e := client.CronEntry{Name: name, Spec: spec, Queue: t.Queue, Function: t.Function,
		Payload: string(t.Payload), Priority: t.Priority, MaxRetries: t.MaxRetries,
		TimeoutMS: t.Timeout.Milliseconds(), Unique: t.Unique, Missed: t.Missed}
	if err := client.New(nil, client.Options{MaxPayload: 1 << 29}).ValidateCron(&e); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cron == nil {
		r.cron = map[string]client.CronEntry{}
	}
	r.cron[name] = e
	return nil
}

// PeriodicNames lists the registry's declared entries, sorted.
func (r *Registry) PeriodicNames() []string {
	var out []string
	for _, e := range r.periodicEntries() {
		out = append(out, e.Name)
	}
	return out
}

func (r *Registry) periodicEntries() []client.CronEntry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []client.CronEntry
	for _, e := range r.cron {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// cronBatch bounds the due entries one pass reads per queue, and cronTicksPerPass the
// ticks one entry fires in a pass (a backlog is worked off over passes).
const (
	cronBatch        = 16
	cronTicksPerPass = 100
)

// cronLateness is how late a tick may fire and still count as on time: it covers a
// leader failover (the lock's TTL and two passes) and never falls under 5 s.
func cronLateness(cfg Config) time.Duration {
	return max(5*time.Second, 3*cfg.SchedulerInterval, cfg.SchedulerLockTTL+2*cfg.SchedulerInterval)
}

// cron is the scheduler's part that declares and fires periodic entries.
type cron struct {
	w        *Worker
	c        *client.Client
	declared bool // this process's declarations are in Redis
}

func newCron(w *Worker) *cron {
	return &cron{w: w, c: client.New(w.rdb, client.Options{Prefix: w.cfg.KeyPrefix,
		MaxPayload: w.cfg.MaxPayloadBytes, ResultTTL: w.cfg.ResultTTL, Now: w.now})}
}

// declare upserts the registry's declarations once per process; a failure is logged
// and tried again at the next pass.
func (c *cron) declare(ctx context.Context) {
	if c.declared {
		return
	}
	for _, e := range c.w.reg.periodicEntries() {
		if _, err := c.c.DeclareCron(ctx, e); err != nil {
			c.w.log.Warn("cron: declaring an entry failed; trying again", "entry", e.Name, "err", err)
			return
		}
	}
	c.declared = true
}

// queue adds to p the read of q's due entries.
func (c *cron) queue(ctx context.Context, p redis.Pipeliner, q keys.Queue, nowMS int64) *redis.ZSliceCmd {
	return p.ZRangeByScoreWithScores(ctx, q.Cron(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(nowMS, 10), Count: cronBatch})
}

// due is one due entry of a queue as the pass read it.
type cronDue struct {
	q      keys.Queue
	name   string
	tickMS int64
}

// plan is what a pass does with one due entry: the tasks it fires and where it goes on.
type cronPlan struct {
	cronDue
	tasks  []client.Task
	missed client.MissedPolicy // set when the entry missed ticks beyond the bound
	nextMS int64
	remove bool // the entry is gone, paused, moved or broken: take it out of the zset
	failed bool // a fire failed: the entry stays, the next pass tries again
}

// fire acts on the due entries the pass read: nothing when none is due (the idle
// pass costs no round trip more).
func (c *cron) fire(ctx context.Context, qs []keys.Queue, reads []*redis.ZSliceCmd, now time.Time) error {
	var due []cronDue
	for i, r := range reads {
		if r == nil {
			continue
		}
		zs, err := r.Result()
		if err != nil {
			c.w.log.Warn("cron: reading due entries failed", "queue", qs[i].Name, "err", err)
			continue
		}
		for _, z := range zs {
			name, _ := z.Member.(string)
			due = append(due, cronDue{q: qs[i], name: name, tickMS: int64(z.Score)})
		}
	}
	if len(due) == 0 {
		return nil
	}
	p := c.w.rdb.Pipeline()
	defs := make([]*redis.StringCmd, len(due))
	for i, d := range due {
		defs[i] = p.HGet(ctx, c.w.ks.Cron(), d.name)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("cron: read definitions: %w", err)
	}
	plans := make([]cronPlan, len(due))
	var tasks []client.Task
	for i, d := range due {
		plans[i] = c.plan(d, defs[i], now)
		tasks = append(tasks, plans[i].tasks...)
	}
	var results []client.Result
	if len(tasks) > 0 {
		var err error
		if results, err = c.c.EnqueueMany(ctx, tasks); err != nil {
			return fmt.Errorf("cron: enqueue: %w", err)
		}
	}
	k := 0
	for i := range plans {
		pl := &plans[i]
		for range pl.tasks {
			r := results[k]
			k++
			switch {
			case r.Err == nil:
				if r.Created {
					c.w.publish(Event{Type: EventCronFired, Queue: pl.q.Name, TaskID: r.ID, Detail: pl.name})
				}
			case errors.Is(r.Err, client.ErrTaskExists): // this tick fired already
			case errors.Is(r.Err, client.ErrInvalid) || errors.Is(r.Err, client.ErrPayloadTooBig):
				c.w.log.Warn("cron: an entry's task was refused; tick skipped", "entry", pl.name, "err", r.Err)
			default:
				pl.failed = true
			}
		}
		if pl.failed {
			continue
		}
		if pl.missed != "" {
			c.w.log.Warn("cron: an entry missed ticks while no worker ran", "entry", pl.name, "missed", pl.missed)
			c.w.publish(Event{Type: EventCronMissed, Queue: pl.q.Name, Detail: pl.name + " " + string(pl.missed)})
		}
		ok, err := lua.CronAdvance.Run(ctx, c.w.rdb, lua.CronAdvanceArgs{Queue: pl.q, Name: pl.name,
			TickMS: pl.tickMS, NextMS: pl.nextMS, Remove: pl.remove})
		c.w.sawRedis(err)
		if err != nil {
			return fmt.Errorf("cron: advance %s: %w", pl.name, err)
		}
		if !ok {
			c.w.log.Debug("cron: entry moved meanwhile", "entry", pl.name)
		}
	}
	return nil
}

// plan decides what to fire for one due entry from its definition.
func (c *cron) plan(d cronDue, def *redis.StringCmd, now time.Time) cronPlan {
	pl := cronPlan{cronDue: d}
	raw, err := def.Result()
	if errors.Is(err, redis.Nil) { // removed: the zset member is left over
		pl.remove = true
		return pl
	}
	if err != nil {
		c.w.log.Warn("cron: reading an entry's definition failed", "entry", d.name, "err", err)
		pl.failed = true
		return pl
	}
	e, err := client.DecodeCron(d.name, raw)
	if err == nil && e.Queue != d.q.Name {
		return cronPlan{cronDue: d, remove: true} // moved to another queue
	}
	var sched interface{ Next(time.Time) time.Time }
	if err == nil {
		sched, err = client.ParseCron(e.Spec)
	}
	if err != nil {
		c.w.log.Warn("cron: an entry's definition is broken; it is taken out until added again", "entry", d.name, "err", err)
		return cronPlan{cronDue: d, remove: true}
	}
	if e.Paused {
		return cronPlan{cronDue: d, remove: true}
	}
	nowMS := now.UnixMilli()
	bound := cronLateness(c.w.cfg).Milliseconds()
	t := d.tickMS
	if nowMS-t > bound { // missed: no worker fired it in time
		pl.missed = e.Missed
		if e.Missed != client.MissedSkip {
			pl.tasks = append(pl.tasks, e.Task(t))
		}
		t = sched.Next(time.UnixMilli(nowMS - bound - 1)).UnixMilli()
		if t <= d.tickMS { // a schedule with no tick left
			return cronPlan{cronDue: d, tasks: pl.tasks, remove: true}
		}
	}
	for t <= nowMS && len(pl.tasks) < cronTicksPerPass {
		pl.tasks = append(pl.tasks, e.Task(t))
		next := sched.Next(time.UnixMilli(t)).UnixMilli()
		if next <= t { // a schedule with no tick left
			return cronPlan{cronDue: d, tasks: pl.tasks, remove: true}
		}
		t = next
	}
	pl.nextMS = t
	return pl
}

// heal puts back in its queue's zset, at its first tick after now, every entry that is
// not paused and is missing from it (a failover or a restart that lost the write): the
// definitions are the record, as the queue set is for queues. Run every 60th pass.
// A pause or remove racing it may leave a stale member, which the pass that finds it
// due takes out (its definition is paused or gone) without firing.
func (c *cron) heal(ctx context.Context, now time.Time) error {
	h, err := c.w.rdb.HGetAll(ctx, c.w.ks.Cron()).Result()
	if err != nil || len(h) == 0 {
		return err
	}
	type cand struct {
		e     client.CronEntry
		score *redis.FloatCmd
	}
	var cs []cand
	p := c.w.rdb.Pipeline()
	for name, raw := range h {
		e, err := client.DecodeCron(name, raw)
		if err != nil || e.Paused || keys.ValidCronName(name) != nil || keys.ValidQueue(e.Queue) != nil {
			continue
		}
		cs = append(cs, cand{e: e, score: p.ZScore(ctx, c.w.ks.Queue(e.Queue).Cron(), name)})
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, cd := range cs {
		if !errors.Is(cd.score.Err(), redis.Nil) {
			continue
		}
		sched, err := client.ParseCron(cd.e.Spec)
		if err != nil {
			continue
		}
		next := sched.Next(now).UnixMilli()
		if err := c.w.rdb.ZAddNX(ctx, c.w.ks.Queue(cd.e.Queue).Cron(), redis.Z{Score: float64(next), Member: cd.e.Name}).Err(); err != nil {
			return err
		}
		c.w.log.Warn("cron: an entry was missing from its queue's zset; added back", "entry", cd.e.Name, "queue", cd.e.Queue)
	}
	return nil
}
