package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// batchMax is the most entries one read takes from one queue (the design's 32).
const batchMax = 32

// pollLoop is the design's poll loop: while capacity is left, read up to
// min(remaining, 32) new entries from each queue in order, bands p9 → p0, skipping
// paused queues; when nothing was collected, block on all bands at once.
func (w *Worker) pollLoop(ctx context.Context) error {
	paused := make([]bool, len(w.queues))
	calls := w.pollCalls
	for ctx.Err() == nil {
		capacity := int64(w.cfg.Concurrency) - w.inflight.Load()
		if w.cfg.MaxTasks > 0 {
			left := w.cfg.MaxTasks - w.begun.Load()
			if left <= 0 {
				w.stopSelf("DTQ_WORKER_MAX_TASKS reached")
				<-ctx.Done()
				return nil
			}
			capacity = min(capacity, left)
		}
		if capacity <= 0 {
			select {
			case <-w.slotFree:
			case <-ctx.Done():
			}
			continue
		}
		got, err := w.fetch(ctx, calls, capacity, paused)
		w.firstFetchOnce.Do(func() {
			if got > 0 {
				// The executors of the first tasks are runnable on this P: let them call
				// their functions before Run, woken below, starts the heartbeat, the
				// reaper and the scheduler (a cold start's first task: 0.1 ms sooner).
				goruntime.Gosched()
			}
			close(w.firstFetch)
		})
		if err != nil {
			return err
		}
		if got > 0 {
			continue
		}
		if w.idleFor() {
			w.stopSelf("idle for DTQ_WORKER_IDLE_EXIT_S")
			<-ctx.Done()
			return nil
		}
		if err := w.block(ctx, calls, capacity, paused); err != nil {
			return err
		}
	}
	return nil
}

// fetch reads new entries without blocking, queue by queue, and starts their tasks.
func (w *Worker) fetch(ctx context.Context, calls *calls, capacity int64, paused []bool) (int64, error) {
	var got int64
	for i, q := range w.queues {
		want := min(capacity-got, batchMax)
		if want <= 0 || ctx.Err() != nil {
			break
		}
		if w.pollFaults.skip(q.Name) {
			continue
		}
		call, prev := calls.next(q.Name)
		now := w.now()
		var until int64
		if w.waitsOn(i, paused) {
			until = now.Add(w.blockFor() + registrationSlack).UnixMilli()
		}
		res, err := lua.Claim(ctx, w.rdb, q, lua.ClaimArgs{
			Consumer: w.id, NowMS: now.UnixMilli(), Want: int(want), MaxPayload: w.cfg.MaxPayloadBytes,
			Call: call, Previous: prev, RegisterUntilMS: until, Tag: w.callTag, Received: calls.recv[q.Name],
		})
		if err != nil {
			if ctx.Err() != nil {
				return got, nil
			}
			w.metrics.redisErrors.WithLabelValues("claim").Inc()
			if !lua.IsKeyError(err) {
				return got, err
			}
			// this queue's keys are refused (the script wrote no receipt): skip it for a
			// while and serve the others
			calls.answered(q.Name)
			w.pollFaults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, w.id, "claim", err))
			continue
		}
		calls.answered(q.Name)
		w.pollFaults.ok(q.Name)
		w.brokenBands(q, res.Broken)
		paused[i] = res.Paused
		w.handleClaim(q, res)
		got += int64(len(res.Started))
	}
	return got, nil
}

// brokenBands puts the bands a claim found of another type than a stream in backoff,
// so the idle read, which would fail as a whole on them, leaves them out.
func (w *Worker) brokenBands(q keys.Queue, bands []int) {
	for _, b := range bands {
		if s := q.Stream(b); !w.pollFaults.skip(s) {
			w.pollFaults.fail(s, fmt.Errorf("band %d of queue %s is not a stream: its entries wait until it is mended; the other bands are served", b, q.Name))
		}
	}
}

// pausedRecheck bounds the idle block while a queue the worker serves is paused: the
// claim reads the pause flag, so a resume takes effect within this time (at the cost of
// a claim and a read a second while the pause lasts, instead of one read per
// DTQ_POLL_BLOCK_MS).
const pausedRecheck = time.Second

// registrationSlack is how long a hand-off registration outlives the blocking read it
// was made for: the time to the next claim, which renews it.
const registrationSlack = time.Second

// waitsOn reports whether the idle read will cover queue i (every unpaused queue on a
// single node; on a cluster the first unpaused one): only then may the worker register
// for hand-offs on it, or a task handed to it would wait for its next claim.
func (w *Worker) waitsOn(i int, paused []bool) bool {
	off := func(j int) bool { return paused[j] || w.pollFaults.skip(w.queues[j].Name) }
	if off(i) {
		return false
	}
	if w.blocker.single != nil {
		return true
	}
	for j := range i {
		if !off(j) {
			return false
		}
	}
	return true
}

// block waits, on one blocking XREADGROUP over every band and the inbox of every
// unpaused queue, for the next entry or hand-off; a hand-off starts at once, an entry
// is claimed at once, topped up to capacity.
func (w *Worker) block(ctx context.Context, calls *calls, capacity int64, paused []bool) error {
	var streams []string
	for i, q := range w.queues {
		if !w.waitsOn(i, paused) {
			continue
		}
		for p := keys.MaxPriority; p >= 0; p-- {
			if !w.pollFaults.skip(q.Stream(p)) {
				streams = append(streams, q.Stream(p))
			}
		}
		if !w.pollFaults.skip(q.Inbox(w.id)) {
			streams = append(streams, q.Inbox(w.id))
		}
	}
	d := w.blockFor()
	if slices.Contains(paused, true) {
		// a paused queue is not read, so its resume wakes nothing: look again soon
		d = min(d, pausedRecheck)
	}
	if len(streams) == 0 {
		sleepCtx(ctx, d)
		return nil
	}
	xs, err := w.blocker.read(ctx, w.id, streams, d)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if redis.HasErrorPrefix(err, "NOGROUP") {
			return w.ensureGroups(ctx)
		}
		if redis.HasErrorPrefix(err, "UNBLOCKED") {
			// a stream read was deleted or overwritten under the read: the next claim
			// recreates it, or names it broken
			return nil
		}
		w.metrics.redisErrors.WithLabelValues("read").Inc()
		if lua.IsKeyError(err) && w.wrongTypeStreams(ctx, streams, err) {
			return nil // the next read leaves them out
		}
		return err
	}
	if w.pollFaults.any() {
		for _, s := range streams {
			w.pollFaults.ok(s) // read again: mended
		}
	}
	if len(xs) == 0 {
		return nil
	}
	delivered := map[string][]lua.Delivered{}
	handed := map[string][]lua.Started{}
	for _, x := range xs {
		q, band, ok := w.streamOf(x.Stream)
		if !ok {
			continue
		}
		if band < 0 {
			started, d, recv, err := lua.SplitInbox(x.Messages)
			if err != nil {
				w.log.Warn("inbox: malformed hand-off row dropped", "queue", q.Name, "err", err)
			}
			handed[q.Name] = append(handed[q.Name], started...)
			delivered[q.Name] = append(delivered[q.Name], d...)
			calls.recv[q.Name] = append(calls.recv[q.Name], recv...)
			continue
		}
		for _, m := range x.Messages {
			delivered[q.Name] = append(delivered[q.Name], lua.Delivered{Band: band, Entry: m.ID})
		}
	}
	if ctx.Err() != nil {
		// Draining began while the read was blocked: start nothing new. Hand the
		// deliveries and hand-offs back (idle = the visibility timeout) so a peer's
		// reaper takes them at once; they are not ACKed.
		w.handBackStarted(handed)
		return w.handBackDeliveries(delivered)
	}
	for _, q := range w.queues {
		if s := handed[q.Name]; len(s) > 0 {
			w.start(q, s)
			capacity -= int64(len(s))
		}
	}
	if len(handed) > 0 {
		// Let the executor just woken run on this P now, before this loop's next claim
		// is encoded and sent: the hand-off was all the function waited for.
		goruntime.Gosched()
	}
	for i, q := range w.queues {
		d := delivered[q.Name]
		// A hand-off is told to the next claim on its queue (then it is no longer a
		// hand-back if this worker dies); with no capacity left, that is this one.
		if len(d) == 0 && (capacity > 0 || len(calls.recv[q.Name]) == 0) {
			continue
		}
		want := max(0, min(capacity-int64(len(d)), batchMax))
		call, prev := calls.next(q.Name)
		res, err := lua.Claim(ctx, w.rdb, q, lua.ClaimArgs{
			Consumer: w.id, NowMS: w.now().UnixMilli(), Want: int(want), MaxPayload: w.cfg.MaxPayloadBytes,
			Delivered: d, Call: call, Previous: prev, Received: calls.recv[q.Name],
		})
		if err != nil {
			// the entries stay pending; the reaper takes them after the visibility timeout
			w.metrics.redisErrors.WithLabelValues("claim").Inc()
			if !lua.IsKeyError(err) {
				return err
			}
			calls.answered(q.Name)
			w.pollFaults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, w.id, "claim", err))
			continue
		}
		calls.answered(q.Name)
		w.pollFaults.ok(q.Name)
		w.brokenBands(q, res.Broken)
		paused[i] = res.Paused
		w.handleClaim(q, res)
		capacity -= int64(len(res.Started))
	}
	return nil
}

// wrongTypeStreams finds which of the streams the idle read covered are of another
// type (the read failed as a whole on them) and puts them in backoff; it reports
// whether it found any.
func (w *Worker) wrongTypeStreams(ctx context.Context, streams []string, err error) bool {
	found := false
	for _, q := range w.queues {
		if !slices.ContainsFunc(streams, func(s string) bool { return q.BandOf(s) >= 0 || s == q.Inbox(w.id) }) {
			continue
		}
		var qe *lua.QueueError
		if !errors.As(lua.Diagnose(ctx, w.rdb, q, w.id, "read", err), &qe) {
			continue
		}
		for _, wt := range qe.Wrong {
			if slices.Contains(streams, wt.Key) {
				w.pollFaults.fail(wt.Key, fmt.Errorf("the idle read of queue %s: %s", q.Name, wt))
				found = true
			}
		}
	}
	return found
}

// handBackStarted hands back tasks started for this worker that it will not run.
func (w *Worker) handBackStarted(byQueue map[string][]lua.Started) {
	held := make(map[string][]lua.Held, len(byQueue))
	for name, ss := range byQueue {
		for _, s := range ss {
			held[name] = append(held[name], s.Held())
		}
	}
	w.touchBack(held)
}

// leave ends the worker's hand-off registrations (at drain) and hands back what was
// handed to it and not read.
func (w *Worker) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	held := map[string][]lua.Held{}
	delivered := map[string][]lua.Delivered{}
	for _, q := range w.queues {
		left, err := lua.Leave(ctx, w.rdb, q, w.id, w.callTag, w.cfg.MaxPayloadBytes)
		if err != nil {
			w.log.Warn("drain: leaving the hand-off registration failed; it lapses by itself", "queue", q.Name, "err", err)
			continue
		}
		for _, l := range left {
			if l.ID == "" {
				delivered[q.Name] = append(delivered[q.Name], lua.Delivered{Band: l.Band, Entry: l.Entry})
			} else {
				held[q.Name] = append(held[q.Name], lua.Held{ID: l.ID, Entry: l.Entry, Band: l.Band, Attempt: l.Attempt})
			}
		}
	}
	w.touchBack(held)
	_ = w.handBackDeliveries(delivered)
}

func (w *Worker) handBackDeliveries(delivered map[string][]lua.Delivered) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for name, ds := range delivered {
			q := w.byName[name]
			for _, d := range ds {
				p.Do(ctx, "XCLAIM", q.Stream(d.Band), keys.Group, w.id, 0, d.Entry, "IDLE", w.vtMS, "JUSTID")
			}
		}
		return nil
	})
	if err != nil {
		w.log.Warn("drain: hand back of late deliveries failed; peers reclaim them after the visibility timeout", "err", err)
	}
	return nil
}

// calls names one loop's claim calls: a resent call (its reply was lost) gets the same
// reply from its receipt, and each call deletes the receipt of the loop's previous call
// on the queue, which got its reply. A call that got no reply at all (go-redis gave up
// resending, or the loop failed and restarted) is sent again, under the same name, as
// the loop's next call on that queue: if it ran in Redis, its receipt answers and the
// tasks it claimed start now instead of after the visibility timeout. calls outlive
// the loop's restarts for that reason.
type calls struct {
	w    *Worker
	last map[string]string // the queue's latest call
	prev map[string]string // the call before it, which got its reply
	open map[string]bool   // the latest call has had no reply yet
	// hand-offs read from the inbox, told to the next call on the queue
	recv map[string][]lua.Received
}

func (w *Worker) newCalls() *calls {
	return &calls{w: w, last: map[string]string{}, prev: map[string]string{}, open: map[string]bool{},
		recv: map[string][]lua.Received{}}
}

// next names the next call on queue and the previous answered one; call answered once
// the reply is in.
func (c *calls) next(queue string) (call, prev string) {
	if c.open[queue] {
		return c.last[queue], c.prev[queue]
	}
	c.prev[queue] = c.last[queue]
	call = c.w.id + "." + c.w.callTag + "." + strconv.FormatInt(c.w.callSeq.Add(1), 36)
	c.last[queue], c.open[queue] = call, true
	return call, c.prev[queue]
}

// answered records that queue's latest call got its reply (and with it the hand-offs
// it told of).
func (c *calls) answered(queue string) {
	c.open[queue] = false
	delete(c.recv, queue)
}

// idleFor reports whether DTQ_WORKER_IDLE_EXIT_S has passed with nothing running.
func (w *Worker) idleFor() bool {
	if w.cfg.IdleExit <= 0 || w.inflight.Load() > 0 {
		return false
	}
	return time.Since(time.Unix(0, w.active.Load())) >= w.cfg.IdleExit
}

// blockFor is how long the idle read may block: DTQ_POLL_BLOCK_MS, or less when the
// idle exit comes sooner.
func (w *Worker) blockFor() time.Duration {
	d := w.cfg.PollBlock
	if w.cfg.IdleExit > 0 {
		left := w.cfg.IdleExit - time.Since(time.Unix(0, w.active.Load()))
		d = max(time.Millisecond, min(d, left+time.Millisecond))
	}
	return d
}

// streamOf names the queue of a stream the idle read covers and its band (-1: the
// worker's inbox on that queue).
func (w *Worker) streamOf(stream string) (keys.Queue, int, bool) {
	for _, q := range w.queues {
		if b := q.BandOf(stream); b >= 0 {
			return q, b, true
		}
		if stream == q.Inbox(w.id) {
			return q, -1, true
		}
	}
	return keys.Queue{}, 0, false
}

// ensureGroups creates the consumer group on every band of every queue (MKSTREAM).
func (w *Worker) ensureGroups(ctx context.Context) error {
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range w.queues {
			for _, s := range q.Streams {
				p.XGroupCreateMkStream(ctx, s, keys.Group, "0")
			}
			// the inbox lapsed (its worker was busy for ten minutes): as the claim makes it
			p.XGroupCreateMkStream(ctx, q.Inbox(w.id), keys.Group, "0")
			p.PExpire(ctx, q.Inbox(w.id), 10*time.Minute)
		}
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return err
	}
	return nil
}

// handleClaim starts what a claim started and reports what it absorbed or rejected.
func (w *Worker) handleClaim(q keys.Queue, res lua.ClaimResult) {
	if len(res.Started) > 0 {
		w.start(q, res.Started)
	}
	for _, a := range res.Absorbed {
		if a.Status == "dead" {
			w.metrics.count("(claim)", OutcomeDead)
			w.log.Warn("claim: task killed at claim", "queue", q.Name, "task", a.ID)
			w.publish(Event{Type: EventTaskDead, Queue: q.Name, TaskID: a.ID, Detail: "payload over the limit"})
			continue
		}
		w.metrics.count("(claim)", OutcomeAbsorbed)
		w.publish(Event{Type: EventDuplicateAbsorbed, Queue: q.Name, TaskID: a.ID, Detail: "entry " + a.Entry + ", task " + a.Status})
	}
	for _, r := range res.Returned {
		w.metrics.count("(claim)", OutcomeReturned)
		w.publish(Event{Type: EventReturned, Queue: q.Name, TaskID: r.ID, Detail: "queue paused: entry " + r.Entry + " put back as " + r.New})
	}
	for _, in := range res.Invalid {
		w.metrics.count("(claim)", OutcomeInvalid)
		w.log.Warn("claim: malformed entry moved to a dead record", "queue", q.Name, "entry", in.Entry, "dead_id", in.DeadID, "reason", in.Reason)
		w.publish(Event{Type: EventInvalidEntry, Queue: q.Name, TaskID: in.DeadID, Detail: in.Reason})
	}
}

// blocker owns the connection of the idle blocking read. On a single node it is a
// dedicated connection whose CLIENT ID lets a drain CLIENT UNBLOCK it at once, so an
// idle worker exits promptly however long the block.
type blocker struct {
	rdb    redis.UniversalClient
	single *redis.Client

	mu   sync.Mutex
	conn *redis.Conn
	id   int64
}

func newBlocker(rdb redis.UniversalClient) *blocker {
	b := &blocker{rdb: rdb}
	if c, ok := rdb.(*redis.Client); ok {
		b.single = c
	}
	return b
}

func (b *blocker) read(ctx context.Context, consumer string, streams []string, block time.Duration) ([]redis.XStream, error) {
	ids := make([]string, len(streams))
	for i := range ids {
		ids[i] = ">"
	}
	args := &redis.XReadGroupArgs{Group: keys.Group, Consumer: consumer, Streams: append(streams, ids...), Count: 1, Block: block}
	if b.single == nil {
		args.Block = min(block, 500*time.Millisecond) // no CLIENT UNBLOCK across a cluster's nodes
		res, err := b.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return res, err
	}
	conn, err := b.connection(ctx)
	if err != nil {
		if ctx.Err() == nil && isRedisError(err) {
			// The server refuses CLIENT ID (an ACL without it, a proxy, an embedded
			// server): block on the pool with a short block instead, as on a cluster.
			b.mu.Lock()
			b.single = nil
			b.mu.Unlock()
			return b.read(ctx, consumer, streams, block)
		}
		return nil, err
	}
	res, err := conn.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		b.reset() // a broken connection gets a new one (and a new CLIENT ID)
	}
	return res, err
}

// isRedisError reports whether err is an error reply from the server (not a network
// or context error).
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (b *blocker) connection(ctx context.Context) (*redis.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		return b.conn, nil
	}
	conn := b.single.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	b.conn, b.id = conn, id
	return conn, nil
}

func (b *blocker) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close()
		b.conn, b.id = nil, 0
	}
}

// unblockUntil sends CLIENT UNBLOCK to the blocked read until the fetch loops are done.
func (b *blocker) unblockUntil(loops *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { loops.Wait(); close(done) }()
	for {
		b.mu.Lock()
		id := b.id
		b.mu.Unlock()
		if id != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_ = b.rdb.ClientUnblock(ctx, id).Err()
			cancel()
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (b *blocker) close() { b.reset() }
