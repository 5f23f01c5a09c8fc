package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/blockread"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/service"
	"github.com/dtq/dtq/lua"
)

// batchMax is the most entries one read takes from one queue (the design's 32).
const batchMax = 32

// poller is the poll loop as a service: while capacity is left, read up to
// min(remaining, 32) new entries from each queue in order, bands p9 → p0, skipping
// paused queues; when nothing was collected, block on all bands at once (internal/blockread)
// and claim what the read delivered. It ends the worker by itself when
// DTQ_WORKER_MAX_TASKS tasks have started or nothing ran for DTQ_WORKER_IDLE_EXIT_S.
type poller struct {
	service.Base
	w      *Worker
	calls  *calls            // the loop's claim calls, kept across its restarts (receipts.go)
	faults *faults           // what the loop skips while Redis refuses its keys
	reader *blockread.Reader // the idle read: an ended ctx interrupts it at once
	paused []bool            // per served queue: paused as of its last claim (the loop's only)
	// per served queue (the loop's only): its rate or concurrency limit starts nothing
	// before this time (unix ms; the queue is not claimed, read or registered on until
	// then), and entries a limit set aside may start from recheck (unix ms; 0 none)
	throttled, recheck []int64
	// the band streams of an idle read that failed without a reply from Redis (a
	// dropped connection): it may have delivered an entry whose reply was lost, which
	// the loop's next pass takes (retake) instead of leaving it to a reaper
	lost []string
	// per served queue (the loop's only): that read covered the queue's inbox, so the
	// next claim on the queue takes the inbox rows it may have been delivered (Reread)
	reread []bool

	lane *lane // the second claim loop of the busy path (lane.go)
	// claiming counts the tasks asked for by the claims in flight (the loop's and the
	// lane's): they are slots taken until the replies are in
	claiming atomic.Int64

	fetched     chan struct{} // closed when the loop's first fetch returned
	fetchedOnce sync.Once
}

func newPoller(w *Worker) *poller {
	p := &poller{w: w, calls: w.newCalls(), faults: w.newFaults("poll"), reader: blockread.New(w.rdb, blockread.Options{}),
		paused: make([]bool, len(w.queues)), reread: make([]bool, len(w.queues)), throttled: make([]int64, len(w.queues)), recheck: make([]int64, len(w.queues)),
		fetched: make(chan struct{})}
	p.lane = newLane(p)
	return p
}

// Start begins polling.
func (p *poller) Start(ctx context.Context) error {
	p.Go(ctx, func(ctx context.Context) {
		var lane sync.WaitGroup
		if p.w.cfg.PollLanes >= 2 {
			lane.Go(func() { p.lane.run(ctx) }) // ends with ctx, like the loop
		}
		service.Supervise(ctx, "poll", p.w.log, p.w.restarted("poll"), p.loop)
		lane.Wait()
	})
	return nil
}

// Stop ends the loop and waits: the loop's context ends, which unblocks its idle read
// at once (CLIENT UNBLOCK, blockread).
func (p *poller) Stop() {
	p.Base.Stop()
	p.markFetched() // a stop before the first fetch
}

// markFetched closes fetched, once.
func (p *poller) markFetched() { p.fetchedOnce.Do(func() { close(p.fetched) }) }

func (p *poller) loop(ctx context.Context) error {
	w := p.w
	for ctx.Err() == nil {
		capacity, ok := p.capacity(ctx)
		if !ok {
			return nil
		}
		if p.lost != nil && capacity > 0 {
			p.quiesce(ctx)
			if err := p.retake(ctx, capacity); err != nil {
				return err
			}
			continue
		}
		if capacity <= 0 {
			select {
			case <-w.hold.slotFree:
			case <-ctx.Done():
			}
			continue
		}
		got, err := p.fetch(ctx, capacity)
		p.fetchedOnce.Do(func() {
			if got > 0 {
				// The executors of the first tasks are runnable on this P: let them call
				// their functions before Run, woken below, starts the heartbeat, the
				// reaper and the scheduler (a cold start's first task: 0.1 ms sooner).
				goruntime.Gosched()
			}
			close(p.fetched)
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
		p.quiesce(ctx)
		if capacity, ok = p.capacity(ctx); !ok || capacity <= 0 {
			continue // the lane's last claims took the slots
		}
		if err := p.block(ctx, capacity); err != nil {
			return err
		}
	}
	return nil
}

// capacity is how many tasks the next fetch may start: concurrency − in flight, within
// what DTQ_WORKER_MAX_TASKS leaves; false once that limit is reached (the worker then
// stops by itself and the loop waits for its end).
func (p *poller) capacity(ctx context.Context) (int64, bool) {
	w := p.w
	if w.cfg.MaxTasks > 0 && w.cfg.MaxTasks-w.hold.begun.Load() <= 0 {
		w.stopSelf("DTQ_WORKER_MAX_TASKS reached")
		<-ctx.Done()
		return 0, false
	}
	return p.room(), true
}

// room is how many more tasks a claim may ask for now: concurrency − in flight −
// asked for by the claims on their way, within what DTQ_WORKER_MAX_TASKS leaves.
func (p *poller) room() int64 { return p.roomBeside(p.claiming.Load()) }

func (p *poller) roomBeside(claiming int64) int64 {
	w := p.w
	room := int64(w.cfg.Concurrency) - w.hold.inflight.Load() - claiming
	if w.cfg.MaxTasks > 0 {
		room = min(room, w.cfg.MaxTasks-w.hold.begun.Load()-claiming)
	}
	return room
}

// reserve takes min(room, limit) slots for a claim about to be sent, in one step with
// the room it reads (the loop and the lane reserve concurrently: a room read and then
// added to would let both take the same slots), when that is at least least; else it
// takes none and returns 0. The claim gives them back (claiming.Add(-n)) once its
// reply's tasks are in flight.
func (p *poller) reserve(limit, least int64) int64 {
	for {
		c := p.claiming.Load()
		n := min(p.roomBeside(c), limit)
		if n < max(least, 1) {
			return 0
		}
		if p.claiming.CompareAndSwap(c, c+n) {
			return n
		}
	}
}

// quiesce holds the lane off and sends again what its unanswered calls claimed: the
// loop is about to block, or to take back what a lost read delivered, alone.
func (p *poller) quiesce(ctx context.Context) {
	p.lane.hold()
	p.lane.settle(ctx)
}

// runOnce is one non-blocking fetch pass at the capacity left: what the loop does
// before it considers blocking. It returns how many tasks it started.
func (p *poller) runOnce(ctx context.Context) (int64, error) {
	capacity, ok := p.capacity(ctx)
	if !ok || capacity <= 0 {
		return 0, nil
	}
	return p.fetch(ctx, capacity)
}

// fetch reads new entries without blocking, queue by queue, and starts their tasks.
func (p *poller) fetch(ctx context.Context, capacity int64) (int64, error) {
	w, calls := p.w, p.calls
	p.lane.release()
	var got int64
	for i, q := range w.queues {
		want := min(capacity-got, batchMax, p.room())
		if want <= 0 || ctx.Err() != nil {
			break
		}
		if p.faults.skip(q.Name) {
			continue
		}
		now := w.now()
		if p.throttled[i] > now.UnixMilli() {
			continue // the queue's limit starts nothing yet
		}
		if want = p.reserve(want, 1); want == 0 {
			break // the lane took the slots
		}
		call, prev := calls.next(q.Name)
		var until int64
		if p.waitsOn(i) {
			until = now.Add(w.blockFor() + registrationSlack).UnixMilli()
		}
		res, err := lua.Claim.Run(ctx, w.rdb, lua.ClaimArgs{Queue: q,
			Consumer: w.id, NowMS: now.UnixMilli(), Want: int(want), MaxPayload: w.cfg.MaxPayloadBytes,
			Call: call, Previous: prev, RegisterUntilMS: until, Tag: w.callTag, Received: calls.recv[q.Name],
			Reread: p.reread[i],
		})
		w.sawRedis(err)
		if err != nil {
			p.claiming.Add(-want)
			if ctx.Err() != nil {
				return got, nil
			}
			if err := p.claimFailed(ctx, q, err); err != nil {
				return got, err
			}
			continue
		}
		n := p.claimed(i, q, res)
		p.claiming.Add(-want)
		got += n
		if n == want && want == batchMax {
			p.lane.kick(i) // the queue has more: the lane claims beside the loop
		}
	}
	return got, nil
}

// claimed takes in the reply of a claim on queue i, q: the call got its reply, the
// queue is served again, its broken bands and its pause are noted, and what the claim
// started runs. It returns how many tasks started.
func (p *poller) claimed(i int, q keys.Queue, res lua.ClaimResult) int64 {
	p.calls.answered(q.Name)
	p.faults.ok(q.Name)
	p.reread[i] = false
	p.brokenBands(q, res.Broken)
	p.paused[i] = res.Paused
	p.throttled[i], p.recheck[i] = res.ThrottledUntilMS, res.RecheckMS
	p.w.handleClaim(q, res)
	return int64(len(res.Started))
}

// claimFailed takes in a claim on q that failed: an error of the server or the network
// is returned (the loop restarts); a refusal of this queue's keys (the script wrote no
// receipt) puts the queue in backoff, so the loop serves the others.
func (p *poller) claimFailed(ctx context.Context, q keys.Queue, err error) error {
	w := p.w
	w.metrics.redisErrors.WithLabelValues("claim").Inc()
	if !lua.IsKeyError(err) {
		return err
	}
	p.calls.answered(q.Name)
	p.faults.fail(q.Name, lua.Diagnose(ctx, w.rdb, q, w.id, "claim", err))
	return nil
}

// brokenBands puts the bands a claim found of another type than a stream in backoff,
// so the idle read, which would fail as a whole on them, leaves them out.
func (p *poller) brokenBands(q keys.Queue, bands []int) {
	for _, b := range bands {
		if s := q.Stream(b); !p.faults.skip(s) {
			p.faults.fail(s, fmt.Errorf("band %d of queue %s is not a stream: its entries wait until it is mended; the other bands are served", b, q.Name))
		}
	}
}

// pausedRecheck bounds the idle block while a queue the worker serves is paused: the
// claim reads the pause flag, so a resume takes effect within this time (at the cost of
// a claim and a read a second while the pause lasts, instead of one read per
// DTQ_POLL_BLOCK_MS).
const pausedRecheck = time.Second

// limitRecheckMax bounds how long the loop waits for a queue's limit (a throttled
// queue, or entries a limit set aside) before it claims on that queue again.
const limitRecheckMax = time.Second

// limitWait is how long the idle wait may last before a limited queue may start a
// task again: the earliest of its throttle's end and its set-aside entries' recheck,
// within limitRecheckMax (at least a millisecond); no bound (the maximum duration)
// when no queue waits for a limit.
func (p *poller) limitWait() time.Duration {
	return limitWait(p.w.now().UnixMilli(), p.throttled, p.recheck)
}

func limitWait(now int64, throttled, recheck []int64) time.Duration {
	d := time.Duration(math.MaxInt64)
	for i := range throttled {
		for _, at := range [2]int64{throttled[i], recheck[i]} {
			if at > 0 {
				d = min(d, limitRecheckMax, max(time.Millisecond, time.Duration(at-now)*time.Millisecond))
			}
		}
	}
	return d
}

// registrationSlack is how long a hand-off registration outlives the blocking read it
// was made for: the time to the next claim, which renews it.
const registrationSlack = time.Second

// waitsOn reports whether the idle read will cover queue i (every unpaused queue on a
// single node; on a cluster the first unpaused one): only then may the worker register
// for hand-offs on it, or a task handed to it would wait for its next claim.
func (p *poller) waitsOn(i int) bool {
	w := p.w
	now := w.now().UnixMilli()
	off := func(j int) bool { return p.paused[j] || p.throttled[j] > now || p.faults.skip(w.queues[j].Name) }
	if off(i) {
		return false
	}
	if p.reader.Interruptible() {
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
func (p *poller) block(ctx context.Context, capacity int64) error {
	w, calls, paused := p.w, p.calls, p.paused
	var streams []string
	for i, q := range w.queues {
		if !p.waitsOn(i) {
			continue
		}
		for b := keys.MaxPriority; b >= 0; b-- {
			if !p.faults.skip(q.Stream(b)) {
				streams = append(streams, q.Stream(b))
			}
		}
		if !p.faults.skip(q.Inbox(w.id)) {
			streams = append(streams, q.Inbox(w.id))
		}
	}
	d := w.blockFor()
	if slices.Contains(paused, true) {
		// a paused queue is not read, so its resume wakes nothing: look again soon
		d = min(d, pausedRecheck)
	}
	d = min(d, p.limitWait())
	if len(streams) == 0 {
		service.Sleep(ctx, d)
		return nil
	}
	ids := make([]string, len(streams))
	for i := range ids {
		ids[i] = ">"
	}
	xs, err := p.reader.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: w.id,
		Streams: append(streams, ids...), Count: 1, Block: d})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		w.sawRedis(err)
		if redis.HasErrorPrefix(err, "NOGROUP") {
			return w.ensureGroups(ctx)
		}
		if redis.HasErrorPrefix(err, "UNBLOCKED") {
			// a stream read was deleted or overwritten under the read: the next claim
			// recreates it, or names it broken
			return nil
		}
		w.metrics.redisErrors.WithLabelValues("read").Inc()
		if lua.IsKeyError(err) && p.wrongTypeStreams(ctx, streams, err) {
			return nil // the next read leaves them out
		}
		if redisconn.NoReply(err) {
			p.lostRead(streams)
		}
		return err
	}
	w.sawRedis(nil)
	if p.faults.any() {
		for _, s := range streams {
			p.faults.ok(s) // read again: mended
		}
	}
	if len(xs) == 0 {
		return nil
	}
	delivered, handed := w.sortRead(xs, calls)
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
	return p.claimDelivered(ctx, delivered, capacity)
}

// claimDelivered claims, queue by queue, the entries delivered to this worker (by an
// idle read, or found again by retake), topped up to capacity.
func (p *poller) claimDelivered(ctx context.Context, delivered map[string][]lua.Delivered, capacity int64) error {
	w, calls := p.w, p.calls
	for i, q := range w.queues {
		d := delivered[q.Name]
		// A hand-off is told to the next claim on its queue (then it is no longer a
		// hand-back if this worker dies); with no capacity left, that is this one.
		if len(d) == 0 && (capacity > 0 || len(calls.recv[q.Name]) == 0) {
			continue
		}
		want := max(0, min(capacity-int64(len(d)), batchMax))
		call, prev := calls.next(q.Name)
		res, err := lua.Claim.Run(ctx, w.rdb, lua.ClaimArgs{Queue: q,
			Consumer: w.id, NowMS: w.now().UnixMilli(), Want: int(want), MaxPayload: w.cfg.MaxPayloadBytes,
			Delivered: d, Call: call, Previous: prev, Received: calls.recv[q.Name], Reread: p.reread[i],
		})
		w.sawRedis(err)
		if err != nil {
			// the entries stay pending; the reaper takes them after the visibility timeout
			if err := p.claimFailed(ctx, q, err); err != nil {
				return err
			}
			continue
		}
		capacity -= p.claimed(i, q, res)
	}
	return nil
}

// lostRead notes what an idle read that failed without Redis's reply covered: its
// band streams (retake) and the queues whose inbox it read (Reread).
func (p *poller) lostRead(streams []string) {
	for _, s := range streams {
		q, band, ok := p.w.streamOf(s)
		if !ok {
			continue
		}
		if band >= 0 {
			p.lost = append(p.lost, s)
			continue
		}
		for i, wq := range p.w.queues {
			if wq.Name == q.Name {
				p.reread[i] = true
			}
		}
	}
}

// retake claims what an idle read whose reply was lost delivered from the bands: the
// entries of its band streams pending for this worker that no execution of it runs
// from, up to capacity (the rest wait for a reaper). Its inbox rows are the next
// claim's on each queue (Reread). An entry the worker's reaper reclaimed meanwhile, or one
// another worker runs, is left as it is by the claim. A stream broken or deleted since
// is left to the reaper too.
func (p *poller) retake(ctx context.Context, capacity int64) error {
	w := p.w
	var streams []string
	for _, s := range p.lost {
		if !p.faults.skip(s) && !slices.Contains(streams, s) {
			streams = append(streams, s)
		}
	}
	if len(streams) == 0 {
		p.lost = nil
		return nil
	}
	ids := make([]string, len(streams))
	for i := range ids {
		ids[i] = "0" // the consumer's own pending entries
	}
	xs, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: w.id,
		Streams: append(streams, ids...), Count: int64(w.cfg.Concurrency) + batchMax, Block: -1}).Result()
	w.sawRedis(err)
	if err != nil && !errors.Is(err, redis.Nil) {
		if ctx.Err() != nil {
			return nil
		}
		if !redisconn.NoReply(err) {
			p.lost = nil // a stream broken or deleted since: its entries are the reaper's
			return nil
		}
		return err
	}
	p.lost = nil
	delivered := map[string][]lua.Delivered{}
	n := int64(0)
	for _, x := range xs {
		q, band, ok := w.streamOf(x.Stream)
		if !ok || band < 0 {
			continue
		}
		for _, m := range x.Messages {
			if n < capacity && !w.hold.holds(q.Name, band, m.ID) {
				delivered[q.Name] = append(delivered[q.Name], lua.Delivered{Band: band, Entry: m.ID})
				n++
			}
		}
	}
	if n == 0 {
		return nil
	}
	w.log.Info("poll: claiming entries an idle read delivered as its connection dropped", "entries", n)
	return p.claimDelivered(ctx, delivered, capacity)
}

// wrongTypeStreams finds which of the streams the idle read covered are of another
// type (the read failed as a whole on them) and puts them in backoff; it reports
// whether it found any.
func (p *poller) wrongTypeStreams(ctx context.Context, streams []string, err error) bool {
	w := p.w
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
				p.faults.fail(wt.Key, fmt.Errorf("the idle read of queue %s: %s", q.Name, wt))
				found = true
			}
		}
	}
	return found
}

// idleFor reports whether DTQ_WORKER_IDLE_EXIT_S has passed with nothing running.
func (w *Worker) idleFor() bool {
	if w.cfg.IdleExit <= 0 || w.hold.inflight.Load() > 0 {
		return false
	}
	return time.Since(time.Unix(0, w.hold.active.Load())) >= w.cfg.IdleExit
}

// blockFor is how long the idle read may block: DTQ_POLL_BLOCK_MS, or less when the
// idle exit comes sooner.
func (w *Worker) blockFor() time.Duration {
	d := w.cfg.PollBlock
	if w.cfg.IdleExit > 0 {
		left := w.cfg.IdleExit - time.Since(time.Unix(0, w.hold.active.Load()))
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
	w.sawRedis(err)
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
		if a.Status == client.StatusDead {
			w.metrics.count("(claim)", OutcomeDead)
			w.log.Warn("claim: task killed at claim", "queue", q.Name, "task", a.ID)
			w.publish(Event{Type: EventTaskDead, Queue: q.Name, TaskID: a.ID, Detail: "payload over the limit"})
			continue
		}
		w.metrics.count("(claim)", OutcomeAbsorbed)
		w.publish(Event{Type: EventDuplicateAbsorbed, Queue: q.Name, TaskID: a.ID, Detail: "entry " + a.Entry + ", task " + string(a.Status)})
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
