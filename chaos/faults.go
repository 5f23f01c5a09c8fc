package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// injectAll injects the faults of the options in a random order, one at a time, about
// FaultEvery apart.
func (h *harness) injectAll(ctx context.Context) error {
	o := h.o
	var kinds []string
	add := func(n int, k string) {
		for i := 0; i < n; i++ {
			kinds = append(kinds, k)
		}
	}
	add(o.Kills, FaultKill)
	add(o.LeaderKills, FaultLeaderKill)
	add(o.Terms, FaultTerm)
	add(o.Freezes, FaultFreeze)
	add(o.RedisRestarts, FaultRedisRestart)
	add(o.ConnCuts, FaultCut)
	add(o.ReplyCuts, FaultReplyCut)
	add(o.Outages, FaultOutage)
	add(o.Delays, FaultDelay)
	add(o.LongOutages, FaultLongOutage)
	add(o.Bursts, FaultBurst)
	add(o.Pauses, FaultPause)
	add(o.BrokenKeys, FaultBroken)
	add(o.BrokenSchedules, FaultBrokenSchedule)
	add(o.RegistryDeletes, FaultRegistry)
	add(o.Cancels, FaultCancel)
	for i := len(kinds) - 1; i > 0; i-- {
		j := h.intn(i + 1)
		kinds[i], kinds[j] = kinds[j], kinds[i]
	}
	for i, k := range kinds {
		if !sleepCtx(ctx, h.jitter(o.FaultEvery)) {
			return ctx.Err()
		}
		if err := h.inject(ctx, k, i); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) inject(ctx context.Context, kind string, n int) error {
	switch kind {
	case FaultKill:
		procs := h.sup.unfrozen()
		return h.killAndRestart(ctx, FaultKill, procs[h.intn(len(procs))])
	case FaultLeaderKill:
		var p *proc
		found := waitFor(ctx, 10*time.Second, func() bool {
			id, err := h.rdb.Get(ctx, h.ks.SchedulerLock()).Result()
			p = nil
			if err == nil && h.sup.running(id) {
				p = h.sup.byID(id)
			}
			return p != nil
		})
		if !found {
			h.say("leader kill skipped: no worker of this run holds the scheduler lock")
			return nil
		}
		return h.killAndRestart(ctx, FaultLeaderKill, p)
	case FaultTerm:
		procs := h.sup.unfrozen()
		p := procs[h.intn(len(procs))]
		h.waitReady(ctx, p)
		at := time.Now()
		err := h.sup.term(p, h.o.DrainTimeout+10*time.Second)
		end := time.Now()
		if err != nil {
			h.sup.mu.Lock()
			h.sup.crashes = append(h.sup.crashes, fmt.Sprintf("worker %s on SIGTERM: %v; log: %s", p.id, err, tailFile(p.log, 5)))
			h.sup.mu.Unlock()
		}
		h.addFault(Fault{Kind: FaultTerm, Worker: p.id, PID: p.pid(), At: at, End: end})
		h.count(func(r *Report) { r.Terms++ })
		h.say("SIGTERM %s: drained and exited in %s; starting its replacement", p.id, end.Sub(at).Round(time.Millisecond))
		_, err = h.startSlot(p.slot)
		return err
	case FaultFreeze:
		return h.freeze(ctx, n)
	case FaultLongOutage:
		h.longOutage(ctx)
	case FaultBurst:
		return h.burst(ctx, n)
	case FaultPause:
		return h.pause(ctx, n)
	case FaultBroken:
		return h.breakKey(ctx, n, false)
	case FaultBrokenSchedule:
		return h.breakKey(ctx, n, true)
	case FaultRegistry:
		return h.deleteRegistry(ctx, n)
	case FaultCancel:
		return h.cancels(ctx)
	case FaultRedisRestart:
		at := time.Now()
		h.srv.kill()
		sleepCtx(ctx, 200*time.Millisecond+time.Duration(h.intn(600))*time.Millisecond)
		if err := h.srv.launch(); err != nil {
			return err
		}
		end := time.Now()
		h.addFault(Fault{Kind: FaultRedisRestart, Silences: 2 * h.o.VisibilityTimeout, At: at, End: end})
		h.count(func(r *Report) { r.RedisRestarts++ })
		h.say("redis-server killed (-9) and restarted on its AOF: down %s", end.Sub(at).Round(time.Millisecond))
	case FaultCut:
		at := time.Now()
		dropped := h.proxy.CutAll()
		h.addFault(Fault{Kind: FaultCut, Silences: 2 * h.o.VisibilityTimeout, At: at, End: at})
		h.count(func(r *Report) { r.ConnCuts++ })
		h.say("dropped all %d worker connections", dropped)
	case FaultOutage:
		at := time.Now()
		h.proxy.Refuse(true)
		h.proxy.CutAll()
		sleepCtx(ctx, 300*time.Millisecond+time.Duration(h.intn(700))*time.Millisecond)
		h.proxy.Refuse(false)
		end := time.Now()
		h.addFault(Fault{Kind: FaultOutage, Silences: 2 * h.o.VisibilityTimeout, At: at, End: end})
		h.count(func(r *Report) { r.Outages++ })
		h.say("Redis unreachable for %s (connections dropped and refused)", end.Sub(at).Round(time.Millisecond))
	case FaultDelay:
		d := time.Duration(5+h.intn(45)) * time.Millisecond
		at := time.Now()
		h.proxy.SetDelay(d)
		sleepCtx(ctx, 2*time.Second)
		h.proxy.SetDelay(0)
		h.addFault(Fault{Kind: FaultDelay, Silences: 2 * h.o.VisibilityTimeout, At: at, End: time.Now()})
		h.count(func(r *Report) { r.Delays++ })
		h.say("every packet delayed by %s for 2s", d)
	case FaultReplyCut:
		targets := []struct {
			name  string
			match func([]byte) bool
		}{
			{"a claim (read)", Contains("EVALSHA", ":paused", "read")},
			{"a claim (reclaim)", Contains("EVALSHA", ":paused", "reclaim")},
			{"a completion", isComplete},
			{"a blocking XREADGROUP", Command("XREADGROUP", "BLOCK")},
		}
		t := targets[h.intn(len(targets))]
		if t.name == "a claim (reclaim)" && h.intn(2) == 0 {
			t = targets[0] // reclaims are rare: mostly cut reads
		}
		at := time.Now()
		h.proxy.CutOnReply(t.match, 1)
		if waitFor(ctx, 10*time.Second, func() bool { return h.proxy.Armed() == 0 }) {
			h.addFault(Fault{Kind: FaultReplyCut, Silences: 2 * h.o.VisibilityTimeout, At: at, End: time.Now()})
			h.count(func(r *Report) { r.ReplyCuts++ })
			h.say("dropped the reply to %s after Redis ran it", t.name)
		} else {
			h.proxy.Disarm()
			h.say("reply cut of %s not triggered within 10s", t.name)
		}
	}
	return nil
}

// isComplete matches a complete.lua call: its keys name the schedule and the dead set,
// but not the paused flag (claim) or the claimed set (scheduler).
func isComplete(req []byte) bool {
	return Contains("EVALSHA", ":schedule", ":dead")(req) && !bytes.Contains(req, []byte(":paused")) &&
		!bytes.Contains(req, []byte(":claimed"))
}

// waitReady waits until p's worker has written its first heartbeat: it runs and has
// installed its SIGTERM handler (a rolling restart waits for readiness too). A process
// signalled before that dies of the signal having claimed nothing.
func (h *harness) waitReady(ctx context.Context, p *proc) {
	waitFor(ctx, 30*time.Second, func() bool {
		select {
		case <-p.exited:
			return true
		default:
		}
		return h.rdb.Exists(ctx, h.ks.Worker(p.id)).Val() == 1
	})
}

func (h *harness) count(f func(*Report)) {
	h.mu.Lock()
	f(&h.rep)
	h.mu.Unlock()
}

func (h *harness) killAndRestart(ctx context.Context, kind string, p *proc) error {
	at := time.Now()
	pid := p.pid()
	h.sup.kill(p)
	h.addFault(Fault{Kind: kind, Worker: p.id, PID: pid, At: at, End: time.Now()})
	h.count(func(r *Report) {
		if kind == FaultLeaderKill {
			r.LeaderKills++
		} else {
			r.Kills++
		}
	})
	h.say("SIGKILL %s (%s); restarting it shortly", p.id, kind)
	// like a container runtime: a short, jittered delay before the new process
	if !sleepCtx(ctx, h.jitter(300*time.Millisecond)) {
		return ctx.Err()
	}
	_, err := h.startSlot(p.slot)
	return err
}

// freeze enqueues a long probe task, waits until a worker runs it, SIGSTOPs that worker
// until a peer has reclaimed the probe (its visibility timeout passed), and resumes it:
// the resumed worker's late completion must be fenced off.
func (h *harness) freeze(ctx context.Context, n int) error {
	o := h.o
	id := fmt.Sprintf("probe%03d", n)
	// Long enough to be running when the freeze lands, short enough to end during the
	// freeze: it finishes the moment the worker resumes, after a peer took it over.
	ms := (o.VisibilityTimeout + 500*time.Millisecond).Milliseconds()
	s := Spec{Queue: o.Queues[0], ID: id, Function: "sleep", Priority: keys.MaxPriority, MaxRetries: 3}
	t := client.Task{Queue: s.Queue, ID: id, Function: "sleep", Priority: s.Priority,
		Payload: []byte(fmt.Sprintf(`{"ms":%d}`, ms)), MaxRetries: client.Retries(3)}
	if err := h.enqueue(ctx, []Spec{s}, []client.Task{t}); err != nil {
		return err
	}
	key := h.ks.Queue(s.Queue).Task(id)
	var p *proc
	var attempt int64
	// Running: the function started on that worker (its ledger says so). The record
	// alone says "running" as soon as the enqueue hands the task to an idle worker,
	// before the worker has read it; a freeze then is a hand-off the leader rescues at
	// the same attempt, not the stale completion this fault is for.
	running := waitFor(ctx, 30*time.Second, func() bool {
		v, err := h.rdb.HMGet(ctx, key, "status", "worker", "attempt").Result()
		if err != nil || len(v) != 3 || v[0] != "running" {
			return false
		}
		w, _ := v[1].(string)
		a, _ := v[2].(string)
		attempt, _ = strconv.ParseInt(a, 10, 64)
		p = h.sup.byID(w)
		return p != nil && h.ledgerHas(p, "S", s.Queue, id, attempt)
	})
	if !running {
		h.say("freeze skipped: probe %s never ran on a live worker", id)
		return nil
	}
	at := time.Now()
	h.sup.freeze(p)
	h.say("SIGSTOP %s while it runs %s attempt %d", p.id, id, attempt)
	limit := 3*o.VisibilityTimeout + 20*time.Second
	// Taken over: a later attempt, or — when the probe had been handed to the worker
	// and it froze before reading it — the leader's rescue put it back and a peer
	// started it afresh (attempt 1 again, another worker).
	// The peer must have started its attempt (its ledger says so), not only claimed it:
	// a resumed worker finishing between a peer's claim and that peer's start is fenced
	// off just the same, but it is not the late finish this fault is there to show.
	reclaimed := waitFor(ctx, limit, func() bool {
		v, err := h.rdb.HMGet(ctx, key, "attempt", "worker").Result()
		if err != nil || len(v) != 2 {
			return false
		}
		as, _ := v[0].(string)
		w, _ := v[1].(string)
		a, _ := strconv.ParseInt(as, 10, 64)
		if !(a > attempt || (a == attempt && w != "" && w != p.id)) {
			return false
		}
		peer := h.sup.byID(w)
		return peer != nil && h.ledgerHas(peer, "S", s.Queue, id, a)
	})
	h.sup.thaw(p)
	end := time.Now()
	h.addFault(Fault{Kind: FaultFreeze, Worker: p.id, PID: p.pid(), At: at, End: end})
	h.count(func(r *Report) { r.Freezes++ })
	if !reclaimed {
		h.mu.Lock()
		h.rep.Problems = append(h.rep.Problems, fmt.Sprintf("probe %s on frozen %s was not reclaimed within %s", id, p.id, limit))
		h.mu.Unlock()
		h.count(func(r *Report) { r.FreezeNotReclaimed++ })
	}
	h.say("SIGCONT %s after %s (probe reclaimed by a peer: %v)", p.id, end.Sub(at).Round(time.Millisecond), reclaimed)
	// Let the resumed worker finish its stale attempt (its completion is fenced off)
	// before the next fault can take it down.
	waitFor(ctx, 10*time.Second, func() bool { return h.ledgerHas(p, "F", s.Queue, id, attempt) })
	return nil
}

// ledgerHas reports whether the ledger of worker process p holds a line of kind ("S"
// start, "F" finish) for attempt of task id.
func (h *harness) ledgerHas(p *proc, kind, queue, id string, attempt int64) bool {
	b, _ := os.ReadFile(filepath.Join(h.ledgerDir, fmt.Sprintf("ledger-%s-%d.log", p.id, p.pid())))
	mark := fmt.Sprintf(" %s %s %d %s %d ", queue, id, attempt, p.id, p.pid())
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, kind+" ") && strings.Contains(line+" ", mark) {
			return true
		}
	}
	return false
}

// state counts tasks not ended and work left in Redis (entries, pending entries,
// scheduled or claimed items).
func (h *harness) state(ctx context.Context) (open, leftover int, err error) {
	h.mu.Lock()
	specs := append([]Spec(nil), h.specs...)
	h.mu.Unlock()
	pipe := h.rdb.Pipeline()
	sts := make([]*redis.StringCmd, len(specs))
	for i, s := range specs {
		sts[i] = pipe.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status")
	}
	var ints []*redis.IntCmd
	var pends []*redis.XPendingCmd
	for _, name := range h.o.Queues {
		q := h.ks.Queue(name)
		for _, st := range q.Streams {
			ints = append(ints, pipe.XLen(ctx, st))
			pends = append(pends, pipe.XPending(ctx, st, keys.Group))
		}
		ints = append(ints, pipe.ZCard(ctx, q.Schedule()), pipe.ZCard(ctx, q.Claimed()))
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range sts {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, 0, err
		}
		if v != "succeeded" && v != "dead" && v != "cancelled" {
			open++
		}
	}
	for _, c := range ints {
		n, err := c.Result()
		if err != nil {
			return 0, 0, err
		}
		leftover += int(n)
	}
	for _, c := range pends {
		if p, err := c.Result(); err == nil {
			leftover += int(p.Count)
		}
	}
	return open, leftover, nil
}

// waitQuiet waits until every task has ended and nothing is left in Redis.
func (h *harness) waitQuiet(ctx context.Context, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	last := time.Now()
	for {
		open, left, err := h.state(ctx)
		if err == nil && open == 0 && left == 0 {
			return true
		}
		if time.Since(last) > 5*time.Second {
			h.say("waiting: %d tasks not ended (%s), %d items left in Redis (err %v)", open, h.someOpen(ctx), left, err)
			last = time.Now()
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// someOpen describes a few tasks that have not ended, for the progress log.
func (h *harness) someOpen(ctx context.Context) string {
	h.mu.Lock()
	specs := append([]Spec(nil), h.specs...)
	h.mu.Unlock()
	var out []string
	for _, s := range specs {
		v, err := h.rdb.HMGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status", "attempt", "worker", "run_at").Result()
		if err != nil || len(v) != 4 {
			continue
		}
		if st, _ := v[0].(string); st != "succeeded" && st != "dead" && st != "cancelled" {
			out = append(out, fmt.Sprintf("%s/%s %v attempt %v on %v run_at %v", s.Queue, s.ID, v[0], v[1], v[2], v[3]))
			if len(out) == 3 {
				break
			}
		}
	}
	return strings.Join(out, "; ")
}

// finish reads the task records and the ledger and checks the invariants.
func (h *harness) finish(ctx context.Context, ledgerDir string) (Report, error) {
	h.mu.Lock()
	specs := append([]Spec(nil), h.specs...)
	faults := append([]Fault(nil), h.faults...)
	rep := h.rep
	h.mu.Unlock()
	pipe := h.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(specs))
	for i, s := range specs {
		cmds[i] = pipe.HMGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status", "attempt", "failures", "result", "error")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return rep, fmt.Errorf("chaos: read task records: %w", err)
	}
	finals := map[string]Final{}
	for i, s := range specs {
		v := cmds[i].Val()
		str := func(j int) string { x, _ := v[j].(string); return x }
		num := func(j int) int64 { n, _ := strconv.ParseInt(str(j), 10, 64); return n }
		finals[s.Queue+"\x00"+s.ID] = Final{Status: client.Status(str(0)), Attempt: num(1), Failures: num(2), Result: str(3), Error: str(4), Missing: v[0] == nil}
	}
	execs, torn, err := ReadLedgers(ledgerDir)
	if err != nil {
		return rep, err
	}
	problems := rep.Problems
	rep.Findings = Analyze(specs, finals, execs, faults)
	rep.Problems = append(problems, rep.Problems...)
	if torn > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d ledger lines could not be read", torn))
	}
	if rep.Limits, err = h.checkLimits(ctx, specs, execs, faults); err != nil {
		return rep, err
	}
	_, rep.Leftover, err = h.state(ctx)
	if err != nil {
		return rep, err
	}
	races, logProblems := h.sup.scanLogs()
	rep.DataRaces = races
	rep.Problems = append(rep.Problems, logProblems...)
	crashes := h.sup.crashList()
	if h.ip != nil {
		crashes = append(crashes, h.ip.crashList()...)
	}
	rep.Crashes = len(crashes)
	rep.Problems = append(rep.Problems, crashes...)
	if rep.Pauses > 0 {
		if rep.PauseReturned, err = h.countEvents(ctx, "TASK_RETURNED_PAUSED"); err != nil {
			return rep, fmt.Errorf("chaos: read the events: %w", err)
		}
	}
	rep.Tasks = len(specs)
	for _, s := range specs {
		if s.Long {
			rep.LongTasks++
		}
	}
	rep.Faults = faults
	rep.Elapsed = time.Since(h.start)
	if v := rep.Violations(); len(v) > 0 {
		return rep, fmt.Errorf("%w: %v", ErrInvariant, v)
	}
	return rep, nil
}
