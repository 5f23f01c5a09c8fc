package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// CronOptions configure RunCron: a periodic entry fired by worker processes while the
// scheduler leader is killed.
type CronOptions struct {
	Workers     int           // worker processes (3)
	Window      time.Duration // the ticks counted: Window/Every of them (60 s)
	Every       time.Duration // the entry's period (1 s)
	LeaderKills int           // SIGKILLs of the scheduler leader, spread over the window (2)
	// WorkerCommand starts a worker process (default: this binary again; call
	// MaybeWorker first thing in its main or TestMain).
	WorkerCommand []string
	Dir           string    // ledger and logs ("" = a temporary directory, removed unless the run failed)
	Log           io.Writer // progress lines (nil: none)
}

// CronReport is what a RunCron saw.
type CronReport struct {
	Ticks       int     // ticks in the window
	Fired       int     // tasks of those ticks that exist
	Started     int     // of those, the ones started (the ledger)
	Extra       []int64 // tasks of ticks off the entry's grid or fired twice under another id
	Missing     []int64 // ticks of the window with no task
	Duplicates  []string
	LeaderKills int
	// FireLatency: from a tick's time to its function's first start, over the window.
	FireMin, FireP50, FireP95, FireMax time.Duration
	Dir                                string
}

// Violations lists what broke "every tick fired exactly once".
func (r CronReport) Violations() []string {
	var v []string
	if len(r.Missing) > 0 {
		v = append(v, fmt.Sprintf("%d ticks never fired: %v", len(r.Missing), r.Missing))
	}
	if len(r.Extra) > 0 {
		v = append(v, fmt.Sprintf("%d tasks of ticks off the grid: %v", len(r.Extra), r.Extra))
	}
	if len(r.Duplicates) > 0 {
		v = append(v, fmt.Sprintf("%d ticks run twice by live workers: %v", len(r.Duplicates), r.Duplicates))
	}
	if r.Started != r.Fired {
		v = append(v, fmt.Sprintf("%d ticks fired but %d started", r.Fired, r.Started))
	}
	return v
}

func (r CronReport) String() string {
	return fmt.Sprintf("cron: %d ticks, %d fired, %d started, %d leader kills; fire time (tick to function start) min %s p50 %s p95 %s max %s",
		r.Ticks, r.Fired, r.Started, r.LeaderKills, r.FireMin.Round(time.Millisecond), r.FireP50.Round(time.Millisecond),
		r.FireP95.Round(time.Millisecond), r.FireMax.Round(time.Millisecond))
}

const cronQueue, cronEntry = "cron", "tick"

// RunCron starts a redis-server and worker processes, adds a periodic entry firing the
// ledger's noop every Every, kills the scheduler leader LeaderKills times during the
// window (restarting it shortly after, as a container runtime would), and checks that
// every tick of the window was fired exactly once, against the task records and the
// ledger the functions wrote. The kills fall alternately just before a tick and just
// after one. It returns an error wrapping ErrInvariant when a tick was
// lost or run twice.
func RunCron(ctx context.Context, o CronOptions) (rep CronReport, err error) {
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.Window == 0 {
		o.Window = time.Minute
	}
	if o.Every == 0 {
		o.Every = time.Second
	}
	if o.Every%time.Second != 0 {
		return rep, errors.New("chaos: the period of @every is whole seconds")
	}
	if len(o.WorkerCommand) == 0 {
		o.WorkerCommand = []string{os.Args[0]}
	}
	say := func(f string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "cron chaos: "+f+"\n", a...)
		}
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "dtq-cron-chaos-"); err != nil {
			return rep, err
		}
		defer func() {
			if err == nil {
				_ = os.RemoveAll(dir)
			}
		}()
	}
	rep.Dir = dir
	ledgerDir := filepath.Join(dir, "ledger")
	rdir := filepath.Join(dir, "redis")
	for _, d := range []string{ledgerDir, rdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return rep, err
		}
	}
	srv, err := startRedis(rdir)
	if err != nil {
		return rep, err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer rdb.Close()
	prefix := "cron-chaos"
	ks := keys.New(prefix)
	c := client.New(rdb, client.Options{Prefix: prefix})
	spec := "@every " + o.Every.String()
	if _, err := c.AddCron(ctx, client.CronEntry{Name: cronEntry, Spec: spec, Queue: cronQueue, Function: "noop"}); err != nil {
		return rep, err
	}
	sup := &supervisor{argv: o.WorkerCommand, dir: dir, id: "cron", procs: map[int]*proc{}}
	sup.env = []string{
		"DTQ_REDIS_URL=redis://" + srv.addr(), "DTQ_KEY_PREFIX=" + prefix, "DTQ_QUEUES=" + cronQueue,
		"DTQ_WORKER_CONCURRENCY=4", "DTQ_HEARTBEAT_INTERVAL_S=0.3", "DTQ_VISIBILITY_TIMEOUT_S=3",
		"DTQ_SCHEDULER_INTERVAL_S=0.2", "DTQ_SCHEDULER_LOCK_TTL_MS=1000", "DTQ_RESULT_TTL_S=0",
		"DTQ_POLL_BLOCK_MS=1000", "DTQ_LOG_LEVEL=warn", "DTQ_LOG_FORMAT=json", "PORT=0",
		EnvLedger + "=" + ledgerDir,
	}
	defer sup.killAll()
	for slot := 0; slot < o.Workers; slot++ {
		if _, err := sup.start(slot); err != nil {
			return rep, err
		}
	}
	say("%d worker processes, entry %q (%s), leader lock TTL 1 s", o.Workers, cronEntry, spec)

	// The window: the ticks from the first one the workers fire, as its task shows up.
	zkey := ks.Queue(cronQueue).Cron()
	var first int64
	if !waitFor(ctx, 30*time.Second, func() bool {
		ids, _ := rdb.Keys(ctx, ks.Queue(cronQueue).TaskPrefix()+"cron-*").Result()
		for _, k := range ids {
			if _, tk, ok := client.CronTick(strings.TrimPrefix(k, ks.Queue(cronQueue).TaskPrefix())); ok && (first == 0 || tk < first) {
				first = tk
			}
		}
		return first != 0
	}) {
		return rep, errors.New("chaos: the entry never fired")
	}
	from := first + o.Every.Milliseconds() // the first tick after the one that showed the workers up
	n := int(o.Window / o.Every)
	last := from + int64(n-1)*o.Every.Milliseconds()
	rep.Ticks = n
	say("counting %d ticks from %s", n, time.UnixMilli(from).UTC().Format(time.RFC3339))

	// the leader kills, spread over the window; the killed process's slot restarts
	var killed []string
	for k := 0; k < o.LeaderKills; k++ {
		// on a tick's boundary, alternately just before the tick and just after it
		at := time.UnixMilli(from).Add((o.Window * time.Duration(k+1) / time.Duration(o.LeaderKills+1)).Truncate(o.Every))
		if k%2 == 0 {
			at = at.Add(-100 * time.Millisecond)
		} else {
			at = at.Add(50 * time.Millisecond)
		}
		if !sleepCtx(ctx, time.Until(at)) {
			return rep, ctx.Err()
		}
		var p *proc
		if !waitFor(ctx, 10*time.Second, func() bool {
			id, err := rdb.Get(ctx, ks.SchedulerLock()).Result()
			p = nil
			if err == nil {
				p = sup.byID(id)
			}
			return p != nil
		}) {
			return rep, errors.New("chaos: no worker holds the scheduler lock")
		}
		sup.kill(p)
		killed = append(killed, p.id)
		rep.LeaderKills++
		say("SIGKILL of the leader %s at %s", p.id, time.Now().UTC().Format("15:04:05.000"))
		if !sleepCtx(ctx, 300*time.Millisecond) {
			return rep, ctx.Err()
		}
		if _, err := sup.start(p.slot); err != nil {
			return rep, err
		}
	}
	// wait until the entry moved past the window and every tick of it has run
	taskOf := func(tk int64) string { return ks.Queue(cronQueue).Task(client.CronTaskID(cronEntry, tk)) }
	done := waitFor(ctx, time.Until(time.UnixMilli(last))+30*time.Second, func() bool {
		s, err := rdb.ZScore(ctx, zkey, cronEntry).Result()
		if err != nil || int64(s) <= last {
			return false
		}
		for tk := from; tk <= last; tk += o.Every.Milliseconds() {
			st, err := rdb.HGet(ctx, taskOf(tk), "status").Result()
			if err == nil && st != string(client.StatusSucceeded) && st != string(client.StatusDead) {
				return false
			}
		}
		return true
	})
	say("window over (settled: %v); stopping the workers", done)
	sup.stopAll(15 * time.Second)

	// judge: the task records, then the ledger
	all, err := rdb.Keys(ctx, ks.Queue(cronQueue).TaskPrefix()+"cron-*").Result()
	if err != nil {
		return rep, err
	}
	got := map[int64]bool{}
	for _, k := range all {
		_, tk, ok := client.CronTick(strings.TrimPrefix(k, ks.Queue(cronQueue).TaskPrefix()))
		if !ok || (tk-from)%o.Every.Milliseconds() != 0 {
			rep.Extra = append(rep.Extra, tk)
			continue
		}
		if tk >= from && tk <= last {
			got[tk] = true
		}
	}
	execs, _, err := ReadLedgers(ledgerDir)
	if err != nil {
		return rep, err
	}
	starts := map[string][]*Exec{}
	for _, e := range execs {
		starts[e.Task] = append(starts[e.Task], e)
	}
	var lat []time.Duration
	for tk := from; tk <= last; tk += o.Every.Milliseconds() {
		if !got[tk] {
			rep.Missing = append(rep.Missing, tk)
			continue
		}
		rep.Fired++
		id := client.CronTaskID(cronEntry, tk)
		es := starts[id]
		if len(es) == 0 {
			continue
		}
		rep.Started++
		lat = append(lat, es[0].Start.Sub(time.UnixMilli(tk)))
		for i := 1; i < len(es); i++ {
			// a second start is fine only after the worker of the one before was killed
			if !slices.Contains(killed, es[i-1].Worker) {
				rep.Duplicates = append(rep.Duplicates, id+" on "+es[i-1].Worker+" and "+es[i].Worker)
			}
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		rep.FireMin, rep.FireP50, rep.FireP95, rep.FireMax = lat[0], q(0.5), q(0.95), lat[len(lat)-1]
	}
	sup.mu.Lock()
	crashes := append([]string(nil), sup.crashes...)
	sup.mu.Unlock()
	if len(crashes) > 0 {
		return rep, fmt.Errorf("chaos: worker crashes: %s", strings.Join(crashes, "; "))
	}
	if v := rep.Violations(); len(v) > 0 {
		return rep, fmt.Errorf("%w: %s (ledger and logs in %s)", ErrInvariant, strings.Join(v, "; "), dir)
	}
	say("%s", rep)
	return rep, nil
}
