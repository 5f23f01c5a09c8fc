package runtime

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// The hand-off and the hand-back. An idle worker registers for hand-offs in its claim
// (poller.go) and reads its inbox in the idle read; leave ends the registration at drain.
// What the worker holds and will not run — hand-offs left unread, entries the read
// delivered as the drain began, executions cancelled at the drain deadline — goes back
// with touchBack (touch.lua: idle = the visibility timeout, the attempt marked handed
// back, not ACKed) or, for entries never started, an XCLAIM with the same idle time: a
// peer's next reaper pass takes them at once.

// Bounds of the hand-back calls at drain (each is one call or one pipeline per step).
const (
	leaveTimeout     = 2 * time.Second
	touchBackTimeout = 3 * time.Second
	handBackTimeout  = 2 * time.Second
	// touchPassWait bounds the drain's wait for a heartbeat touch in flight before it
	// hands executions back.
	touchPassWait = 3 * time.Second
)

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
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	held := map[string][]lua.Held{}
	delivered := map[string][]lua.Delivered{}
	for _, q := range w.queues {
		left, err := lua.Leave.Run(ctx, w.rdb, lua.LeaveArgs{Queue: q, Consumer: w.id, Tag: w.callTag, MaxPayload: w.cfg.MaxPayloadBytes})
		w.sawRedis(err)
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

// handBackDeliveries hands back entries delivered to this worker and never started
// (idle = the visibility timeout, not ACKed), so a peer's next reaper pass takes them.
func (w *Worker) handBackDeliveries(delivered map[string][]lua.Delivered) error {
	if len(delivered) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
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
	w.sawRedis(err)
	if err != nil {
		w.log.Warn("drain: hand back of late deliveries failed; peers reclaim them after the visibility timeout", "err", err)
	}
	return nil
}

// touchBack hands back held entries, by queue: idle = the visibility timeout (a peer's
// next reaper pass takes them) and the attempt marked as handed back, still not ACKed.
func (w *Worker) touchBack(byQueue map[string][]lua.Held) {
	if len(byQueue) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), touchBackTimeout)
	defer cancel()
	for name, hs := range byQueue {
		ok, err := lua.Touch.Run(ctx, w.rdb, lua.TouchArgs{Queue: w.byName[name], Consumer: w.id, IdleMS: w.vtMS, Handback: true, Items: hs})
		w.sawRedis(err)
		if err != nil {
			w.log.Warn("drain: hand back failed; peers reclaim after the visibility timeout", "queue", name, "err", err)
			continue
		}
		for i, h := range hs {
			if ok[i].Held() {
				w.publish(Event{Type: EventHandedBack, Queue: name, TaskID: h.ID, Attempt: h.Attempt})
			}
		}
	}
}

// handBack hands back executions that will not record an outcome (the drain's
// give-up). They are released first, then a heartbeat's touch pass in flight (whose
// snapshot may still hold them) is waited for, at most touchPassWait: their entries'
// idle clocks must end at the visibility timeout, not at the 0 of a late touch.
func (w *Worker) handBack(list []*execution) {
	byQueue := map[string][]lua.Held{}
	for _, e := range list {
		byQueue[e.queue] = append(byQueue[e.queue], e.heldRef())
		w.metrics.count(e.fnLabel, OutcomeHandedBack)
		w.release(e)
	}
	if len(list) == 0 {
		return
	}
	if w.hold.beginTouch(touchPassWait) {
		defer w.hold.endTouch()
	} else {
		w.log.Warn("drain: a heartbeat touch is still in flight; handing back regardless")
	}
	w.touchBack(byQueue)
}

// sortRead sorts what the idle read returned by queue: entries delivered from the bands
// (to claim), and the rows of the worker's inboxes — tasks an enqueue started for it
// (hand-offs, to run), entries handed with them, and the receipts the next claim on the
// queue tells (calls.recv).
func (w *Worker) sortRead(xs []redis.XStream, calls *calls) (delivered map[string][]lua.Delivered, handed map[string][]lua.Started) {
	delivered = map[string][]lua.Delivered{}
	handed = map[string][]lua.Started{}
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
	return delivered, handed
}
