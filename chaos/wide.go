package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// The faults of this file come from the keyspace and the client rather than from
// processes or the network: a batch enqueue over every band, a pause, a key of the wrong
// type, the queue registry deleted, and an outage longer than the visibility timeout.

// brokenKey is the key a BrokenKeys fault holds broken: band of queue, or its schedule
// when band is -1.
type brokenKey struct {
	queue string
	band  int
}

// avoidBroken keeps the task mix off a broken key: no task is enqueued on a band that
// is not a stream, and none is delayed on a queue whose schedule is not a zset (the
// enqueue would fail until the key is mended, and stall the waves behind it).
func (h *harness) avoidBroken(s *Spec, t *client.Task) {
	h.mu.Lock()
	b := h.broken
	h.mu.Unlock()
	if b == nil || s.Queue != b.queue {
		return
	}
	if b.band < 0 && t.Delay > 0 {
		t.Delay = 0
	}
	if b.band >= 0 && t.Delay == 0 && s.Priority == b.band {
		s.Priority = (s.Priority + 1) % keys.Bands
		t.Priority = s.Priority
	}
}

// quick returns a noop task of the harness's own (not part of the mix).
func quick(queue, id string, prio int) (Spec, client.Task) {
	return Spec{Queue: queue, ID: id, Function: "noop", Priority: prio, MaxRetries: 3},
		client.Task{Queue: queue, ID: id, Function: "noop", Priority: prio, MaxRetries: client.Retries(3)}
}

// burst enqueues, in one EnqueueMany call, three quick tasks on every band of every
// queue: each queue's tasks are one script call, whose entries added in one millisecond
// share their id on every band stream (and often across queues). A worker holds such
// entries side by side; nothing may confuse one with another.
func (h *harness) burst(ctx context.Context, n int) error {
	var specs []Spec
	var tasks []client.Task
	for _, q := range h.o.Queues {
		for b := 0; b < keys.Bands; b++ {
			for k := 0; k < 3; k++ {
				s, t := quick(q, fmt.Sprintf("burst%02d-%d-%d", n, b, k), b)
				if k == 2 {
					s.Function, t.Function, t.Payload = "sleep", "sleep", []byte(`{"ms":50}`)
				}
				h.avoidBroken(&s, &t)
				specs, tasks = append(specs, s), append(tasks, t)
			}
		}
	}
	at := time.Now()
	if err := h.enqueue(ctx, specs, tasks); err != nil {
		return err
	}
	// The entries the tasks were created with (a hand-off keeps its entry too).
	pipe := h.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(specs))
	for i, s := range specs {
		cmds[i] = pipe.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "entry")
	}
	_, _ = pipe.Exec(ctx)
	streams := map[string]map[string]bool{} // entry id -> streams holding it
	for i, s := range specs {
		e := cmds[i].Val()
		if e == "" {
			continue
		}
		if streams[e] == nil {
			streams[e] = map[string]bool{}
		}
		streams[e][h.ks.Queue(s.Queue).Stream(s.Priority)] = true
	}
	shared := 0 // entries whose id another stream holds too
	for _, ss := range streams {
		if len(ss) > 1 {
			shared += len(ss)
		}
	}
	h.addFault(Fault{Kind: FaultBurst, At: at, End: time.Now()})
	h.count(func(r *Report) { r.Bursts++; r.SharedEntryIDs += shared })
	h.say("burst: %d tasks over %d queues × %d bands in one EnqueueMany; %d of their entries share their id with another stream's",
		len(specs), len(h.o.Queues), keys.Bands, shared)
	return nil
}

// attempts reads the record's attempt of every task of queue the harness enqueued.
func (h *harness) attempts(ctx context.Context, queue string) (map[string]int64, error) {
	h.mu.Lock()
	var ids []string
	for _, s := range h.specs {
		if s.Queue == queue {
			ids = append(ids, s.ID)
		}
	}
	h.mu.Unlock()
	q := h.ks.Queue(queue)
	pipe := h.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, q.Task(id), "attempt")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string]int64, len(ids))
	for i, id := range ids {
		n, _ := strconv.ParseInt(cmds[i].Val(), 10, 64)
		out[id] = n
	}
	return out, nil
}

// pause pauses a queue while tasks flow, enqueues one quick task on each of its bands
// (a worker blocked in its read on those bands is woken by each), holds the pause for
// 1–2 s and resumes the queue. The analysis checks the ledger against the window.
func (h *harness) pause(ctx context.Context, n int) error {
	queue := h.o.Queues[h.intn(len(h.o.Queues))]
	// No enqueue in flight from the first snapshot to the second: a task the waves
	// created then would be in Redis (perhaps handed to an idle worker before the
	// pause) but in neither snapshot.
	h.enqMu.Lock()
	before, err := h.attempts(ctx, queue)
	if err != nil {
		h.enqMu.Unlock()
		return fmt.Errorf("chaos: pause: %w", err)
	}
	sent := time.Now()
	if err := h.c.Pause(ctx, queue); err != nil {
		h.enqMu.Unlock()
		return fmt.Errorf("chaos: pause: %w", err)
	}
	at := time.Now()
	after, err := h.attempts(ctx, queue)
	h.enqMu.Unlock()
	if err != nil {
		return fmt.Errorf("chaos: pause: %w", err)
	}
	snap := time.Since(sent)
	var specs []Spec
	var tasks []client.Task
	for b := 0; b < keys.Bands; b++ {
		s, t := quick(queue, fmt.Sprintf("paused%02d-%d", n, b), b)
		h.avoidBroken(&s, &t)
		specs, tasks = append(specs, s), append(tasks, t)
	}
	if err := h.enqueue(ctx, specs, tasks); err != nil {
		return err
	}
	sleepCtx(ctx, time.Second+time.Duration(h.intn(1000))*time.Millisecond)
	end := time.Now()
	// The harness's client reaches Redis directly; the resume must land even when the
	// run is being cancelled, or the queue's tasks would wait for ever.
	for i := 0; ; i++ {
		err := h.c.Resume(context.Background(), queue)
		if err == nil {
			break
		}
		if i == 100 {
			return fmt.Errorf("chaos: resume %s: %w", queue, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.addFault(Fault{Kind: FaultPause, Queue: queue, At: at, End: end, Before: before, After: after})
	h.count(func(r *Report) { r.Pauses++ })
	h.say("paused %s for %s (snapshots and Pause took %s), 10 tasks enqueued on it meanwhile; resumed",
		queue, end.Sub(at).Round(time.Millisecond), snap.Round(time.Millisecond))
	return nil
}

// breakScript sets a key aside (RENAME, groups and pending entries kept) and puts a
// string in its place, atomically; mendScript undoes it. It returns what it set aside:
// a stream's length or a zset's size.
var breakScript = redis.NewScript(`
local n = 0
if redis.call("EXISTS", KEYS[1]) == 1 then
  local t = redis.call("TYPE", KEYS[1])["ok"]
  if t == "stream" then n = redis.call("XLEN", KEYS[1]) elseif t == "zset" then n = redis.call("ZCARD", KEYS[1]) end
  redis.call("RENAME", KEYS[1], KEYS[2])
end
redis.call("SET", KEYS[1], "chaos: not a " .. ARGV[1])
return n`)

var mendScript = redis.NewScript(`
redis.call("DEL", KEYS[1])
if redis.call("EXISTS", KEYS[2]) == 1 then redis.call("RENAME", KEYS[2], KEYS[1]) end
return 1`)

// workerGone reports whether the worker id is not a running, unfrozen process of the
// run. Workers run in this process (InProcess) are never killed or frozen.
func (h *harness) workerGone(id string) bool {
	if h.ip != nil {
		return false
	}
	return !h.sup.running(id)
}

// breakKey turns one band stream of one queue (or its schedule zset)
// into a string for 1–1.2 s — under the visibility timeout, so a running task whose
// heartbeats that queue's key refuses is not taken over — and mends it. What the key
// held is set aside meanwhile (RENAME into the same slot) and put back: the entries and
// schedule items wait and run after, none is lost by the fault's hand. Just before, it
// enqueues quick tasks on the band (or delayed ones, due 300 ms later) so that some wait;
// as the key breaks, it enqueues a probe on each other queue, which must start before
// the key is mended.
func (h *harness) breakKey(ctx context.Context, n int, schedule bool) error {
	o := h.o
	queue := o.Queues[h.intn(len(o.Queues))]
	q := h.ks.Queue(queue)
	bk := brokenKey{queue: queue, band: h.intn(keys.Bands)}
	key, what := q.Stream(bk.band), "stream"
	if schedule {
		bk.band, key, what = -1, q.Schedule(), "zset"
	}
	var specs []Spec
	var tasks []client.Task
	for k := 0; k < 3; k++ {
		prio := bk.band
		if prio < 0 {
			prio = h.intn(keys.Bands)
		}
		s, t := quick(queue, fmt.Sprintf("held%02d-%d", n, k), prio)
		if bk.band < 0 {
			t.Delay = 300 * time.Millisecond
		}
		specs, tasks = append(specs, s), append(tasks, t)
	}
	h.mu.Lock()
	h.broken = &bk
	h.mu.Unlock()
	if err := h.enqueue(ctx, specs, tasks); err != nil {
		return err
	}
	aside := key + "-chaos-aside"
	at := time.Now()
	held, err := breakScript.Run(ctx, h.rdb, []string{key, aside}, what).Int()
	if err != nil {
		return fmt.Errorf("chaos: break %s: %w", key, err)
	}
	var probes []string
	specs, tasks = nil, nil
	for _, other := range o.Queues {
		if other == queue {
			continue
		}
		s, t := quick(other, fmt.Sprintf("probe-b%02d", n), h.intn(keys.Bands))
		specs, tasks = append(specs, s), append(tasks, t)
		probes = append(probes, other+"\x00"+s.ID)
	}
	if err := h.enqueue(ctx, specs, tasks); err != nil {
		return err
	}
	// A probe the enqueue handed to a waiting worker that is gone (killed or frozen just
	// before, its hand-off registration not yet lapsed) waits for the leader's rescue,
	// a second or more: that is the hand-off's documented cost, not a stall of its queue.
	handedDead := map[string]bool{}
	for i, sp := range specs {
		w, _ := h.rdb.HGet(ctx, h.ks.Queue(sp.Queue).Task(sp.ID), "worker").Result()
		if w != "" && h.workerGone(w) {
			handedDead[probes[i]] = true
		}
	}
	sleepCtx(ctx, time.Second+time.Duration(h.intn(200))*time.Millisecond)
	end := time.Now()
	for {
		err := mendScript.Run(context.Background(), h.rdb, []string{key, aside}).Err()
		if err == nil {
			break
		}
		h.say("mending %s failed (%v); again", key, err)
		time.Sleep(100 * time.Millisecond)
	}
	h.mu.Lock()
	h.broken = nil
	h.mu.Unlock()
	kind := FaultBroken
	if schedule {
		kind = FaultBrokenSchedule
	}
	h.addFault(Fault{Kind: kind, Queue: queue, Key: key, At: at, End: end, Probes: probes, HandedDead: handedDead})
	h.count(func(r *Report) {
		if schedule {
			r.BrokenSchedules++
		} else {
			r.BrokenKeys++
		}
		r.BrokenHeld += held
	})
	h.say("%s was a string for %s (%d items set aside, then put back)", key, end.Sub(at).Round(time.Millisecond), held)
	return nil
}

// deleteRegistry deletes PREFIX:queues three times, 300 ms apart, under load, then
// enqueues a delayed task (due 300 ms later) and a task that fails once on every queue:
// delayed tasks and retries of every queue must still move, whoever leads the scheduler.
// It waits up to 10 s — fifty scheduler passes — for all of them to succeed. A queue
// whose tasks did not is a stall (a violation). Then the harness registers the queues
// again, as a producer's restart would, so that the rest of the run can be measured.
func (h *harness) deleteRegistry(ctx context.Context, n int) error {
	at := time.Now()
	for k := 0; k < 3; k++ {
		if k > 0 && !sleepCtx(ctx, 300*time.Millisecond) {
			return ctx.Err()
		}
		if err := h.rdb.Del(ctx, h.ks.Queues()).Err(); err != nil {
			return fmt.Errorf("chaos: delete the registry: %w", err)
		}
	}
	var specs []Spec
	var tasks []client.Task
	for _, queue := range h.o.Queues {
		s, t := quick(queue, fmt.Sprintf("reg%02d-delayed", n), h.intn(keys.Bands))
		t.Delay = 300 * time.Millisecond
		h.avoidBroken(&s, &t)
		specs, tasks = append(specs, s), append(tasks, t)
		s, t = quick(queue, fmt.Sprintf("reg%02d-retry", n), h.intn(keys.Bands))
		s.Function, s.Times, t.Function, t.Payload = "fail", 1, "fail", []byte(`{"times":1}`)
		h.avoidBroken(&s, &t)
		specs, tasks = append(specs, s), append(tasks, t)
	}
	if err := h.enqueue(ctx, specs, tasks); err != nil {
		return err
	}
	stuck := map[string]bool{}
	waitFor(ctx, 10*time.Second, func() bool {
		clear(stuck)
		for _, s := range specs {
			st, _ := h.rdb.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status").Result()
			if st != "succeeded" {
				stuck[s.Queue] = true
			}
		}
		return len(stuck) == 0
	})
	leader, _ := h.rdb.Get(ctx, h.ks.SchedulerLock()).Result()
	served := h.servedBy(leader)
	partial := served != "" && len(strings.Split(served, ",")) < len(h.o.Queues)
	for q := range stuck {
		h.mu.Lock()
		h.rep.Problems = append(h.rep.Problems, fmt.Sprintf("registry deleted at %s: the delayed task or the retry of queue %s did not move within 10 s (scheduler leader %s)",
			at.Format("15:04:05.000"), q, leader))
		h.rep.RegistryStalls++
		h.mu.Unlock()
	}
	// As a producer's restart would: the fault is a registry missing for this long,
	// under the leader of the moment, not for the rest of the run.
	if err := h.rdb.SAdd(ctx, h.ks.Queues(), anySlice(h.o.Queues)...).Err(); err != nil {
		return fmt.Errorf("chaos: register the queues again: %w", err)
	}
	h.addFault(Fault{Kind: FaultRegistry, At: at, End: time.Now()})
	h.count(func(r *Report) {
		r.RegistryDeletes++
		if partial {
			r.RegistryPartialLeader++
		}
	})
	h.say("deleted %s three times; a delayed task and a retry of every queue: %d queues stalled (leader %s serving %s); queues registered again",
		h.ks.Queues(), len(stuck), leader, served)
	return nil
}

// servedBy returns the queues the worker id serves ("" when it is not the run's).
func (h *harness) servedBy(id string) string {
	if h.ip != nil {
		for slot := 0; slot < h.o.Workers; slot++ {
			if id == fmt.Sprintf("%s-in%d", h.o.Prefix, slot) {
				return h.queuesOf(slot)
			}
		}
		return ""
	}
	if p := h.sup.byID(id); p != nil {
		return h.queuesOf(p.slot)
	}
	return ""
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// longOutage makes Redis unreachable through the proxy for twice the visibility
// timeout: every worker is cut off longer than a peer would wait for its heartbeats.
func (h *harness) longOutage(ctx context.Context) {
	at := time.Now()
	h.proxy.Refuse(true)
	h.proxy.CutAll()
	sleepCtx(ctx, 2*h.o.VisibilityTimeout)
	h.proxy.Refuse(false)
	end := time.Now()
	h.addFault(Fault{Kind: FaultLongOutage, Silences: 2 * h.o.VisibilityTimeout, At: at, End: end})
	h.count(func(r *Report) { r.LongOutages++ })
	h.say("Redis unreachable for %s, twice the visibility timeout", end.Sub(at).Round(time.Millisecond))
}

// countEvents counts the events of type typ on the run's event stream. Events are
// published best-effort (a full buffer or an unreachable Redis drops them): a lower bound.
func (h *harness) countEvents(ctx context.Context, typ string) (int, error) {
	n, from := 0, "-"
	for {
		msgs, err := h.rdb.XRangeN(ctx, h.ks.Events(), from, "+", 5000).Result()
		if err != nil {
			return n, err
		}
		for _, m := range msgs {
			if m.Values["type"] == typ {
				n++
			}
		}
		if len(msgs) < 5000 {
			return n, nil
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}

// cancels cancels up to three tasks running now and one in another state, each racing
// its completion: CancelTask's answer and the record's attempt just after it go to the
// fault log, and the analysis holds the ledger and the final records against them.
func (h *harness) cancels(ctx context.Context) error {
	h.mu.Lock()
	var pick []Spec
	for i := 0; i < 60 && len(h.specs) > 0; i++ {
		pick = append(pick, h.specs[h.intn(len(h.specs))])
	}
	h.mu.Unlock()
	pipe := h.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(pick))
	for i, s := range pick {
		cmds[i] = pipe.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("chaos: cancel: %w", err)
	}
	var chosen []Spec
	running, other := 0, 0
	seen := map[string]bool{}
	for i, s := range pick {
		if seen[s.Queue+"/"+s.ID] {
			continue
		}
		seen[s.Queue+"/"+s.ID] = true
		if cmds[i].Val() == string(client.StatusRunning) && running < 3 {
			running++
			chosen = append(chosen, s)
		} else if cmds[i].Val() != string(client.StatusRunning) && other < 1 {
			other++
			chosen = append(chosen, s)
		}
	}
	said := map[string]int{}
	for _, s := range chosen {
		out, err := h.c.CancelTask(ctx, s.Queue, s.ID)
		answer := string(out)
		if errors.Is(err, client.ErrWrongStatus) {
			st, gerr := h.rdb.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "status").Result()
			if gerr != nil {
				return fmt.Errorf("chaos: cancel: %w", gerr)
			}
			answer = "ended " + st
		} else if err != nil {
			return fmt.Errorf("chaos: cancel %s/%s: %w", s.Queue, s.ID, err)
		}
		at := time.Now()
		attempt, err := h.rdb.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "attempt").Int64()
		if err != nil {
			return fmt.Errorf("chaos: cancel: %w", err)
		}
		h.addFault(Fault{Kind: FaultCancel, Queue: s.Queue, Key: s.ID, At: at, End: at, Said: answer, Attempt: attempt})
		said[answer]++
	}
	h.count(func(r *Report) { r.Cancels++ })
	h.say("cancels: %v", said)
	return nil
}
