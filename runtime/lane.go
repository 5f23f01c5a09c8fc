package runtime

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/dtq/dtq/lua"
)

// laneMin is the fewest free slots the lane claims for: below it the poll loop's own
// claims keep up, and the lane would only cut batches smaller.
const laneMin = batchMax / 2

// lane is the poll loop's second claim loop, for the busy path only. While a queue's
// claims come back full (it has more waiting) and slots are free, the poll loop's next
// claim and the lane's are in Redis together: Redis runs one while the worker takes in
// the other's reply and starts its tasks, instead of waiting for the worker between
// every two claims.
//
// The lane does nothing but plain claims of new entries on the queue it was given: no
// hand-off registration, no inbox, no retake, no idle read. It stops at anything else —
// a short batch, a pause, a limit, a broken band, an error, fewer than laneMin free
// slots — and the poll loop, whose next claim on the queue meets the same, deals with
// it. The loop holds the lane off before it blocks or takes back a lost read, so an idle
// worker runs one loop, and a retake never sees the entries of a claim still on its way.
//
// Its calls are its own chain of receipts (each deletes the lane's previous one). A
// call that got no reply is sent again under the same name: by the lane's next pass on
// the queue, or, when the loop holds the lane off, by the loop (settle), so what it
// claimed starts now rather than after the visibility timeout.
type lane struct {
	p     *poller
	calls *calls

	started atomic.Int64 // tasks the lane's claims started (tests)

	mu      sync.Mutex
	cond    *sync.Cond
	queue   int  // the queue index to claim from next; -1: none
	running bool // a pass is under way
	held    bool // the loop holds the lane off
	ended   bool // the poller's context ended
}

func newLane(p *poller) *lane {
	l := &lane{p: p, calls: p.w.newCalls(), queue: -1}
	l.calls.lane = true
	l.cond = sync.NewCond(&l.mu)
	return l
}

// run is the lane's goroutine: a pass for each queue it is given, until ctx ends.
func (l *lane) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.ended = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	for {
		l.mu.Lock()
		for l.queue < 0 && !l.ended {
			l.cond.Wait()
		}
		if l.ended {
			l.mu.Unlock()
			return
		}
		i := l.queue
		l.queue, l.running = -1, true
		l.mu.Unlock()

		l.pass(ctx, i)

		l.mu.Lock()
		l.running = false
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// kick gives the lane queue i (its last claim came back full), unless the loop holds
// the lane off.
func (l *lane) kick(i int) {
	if l.p.w.cfg.PollLanes < 2 {
		return
	}
	l.mu.Lock()
	if !l.held && !l.ended {
		l.queue = i
		l.cond.Broadcast()
	}
	l.mu.Unlock()
}

// hold stops the lane: what it was given is forgotten and its pass in flight ends
// before hold returns. It claims nothing until release.
func (l *lane) hold() {
	l.mu.Lock()
	l.held, l.queue = true, -1
	for l.running {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// release lets the lane be given queues again.
func (l *lane) release() {
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
}

// pass claims full batches from queue i while they come back full and slots are free.
func (l *lane) pass(ctx context.Context, i int) {
	p := l.p
	w := p.w
	for ctx.Err() == nil {
		want := p.reserve(batchMax, min(laneMin, int64(w.cfg.Concurrency)))
		if want == 0 {
			return
		}
		res, err := l.claim(ctx, i, want)
		if err != nil {
			p.claiming.Add(-want)
			w.hold.freed() // the loop may wait for the slots this claim held
			if ctx.Err() == nil {
				w.metrics.redisErrors.WithLabelValues("claim").Inc()
			}
			return
		}
		l.started.Add(int64(len(res.Started)))
		p.claiming.Add(-want)
		w.hold.freed()
		if int64(len(res.Started)) < want || res.Paused || res.ThrottledUntilMS > 0 || res.RecheckMS > 0 || len(res.Broken) > 0 {
			return
		}
	}
}

// settle sends again, once, each lane call that got no reply, so that what it claimed
// starts now. The loop calls it with the lane held off. A call that fails again is
// left: its entries are pending for this worker and a reaper takes them after the
// visibility timeout.
func (l *lane) settle(ctx context.Context) {
	for i, q := range l.p.w.queues {
		if l.calls.open[q.Name] && ctx.Err() == nil {
			_, _ = l.claim(ctx, i, 0)
		}
	}
}

// claim sends the lane's next call on queue i (the unanswered one again, if any) for
// want entries and starts what its reply started. A call refused by the queue's keys
// wrote no receipt and is answered; one without a reply stays open, to be sent again.
func (l *lane) claim(ctx context.Context, i int, want int64) (lua.ClaimResult, error) {
	w := l.p.w
	q := w.queues[i]
	call, prev := l.calls.next(q.Name)
	res, err := lua.Claim.Run(ctx, w.rdb, lua.ClaimArgs{Queue: q,
		Consumer: w.id, NowMS: w.now().UnixMilli(), Want: int(want), MaxPayload: w.cfg.MaxPayloadBytes,
		Call: call, Previous: prev, Tag: w.callTag})
	w.sawRedis(err)
	if err != nil {
		if lua.IsKeyError(err) {
			l.calls.answered(q.Name)
		}
		return res, err
	}
	l.calls.answered(q.Name)
	w.handleClaim(q, res)
	return res, nil
}
