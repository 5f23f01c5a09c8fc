package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dtq/dtq/internal/service"
)

// cancelGrace is how long a drain that gave up waits for cancelled functions to
// return before it detaches them (and then for the executors to end).
const cancelGrace = time.Second

// drain is SIGTERM, in the order it happens. Every step that talks to Redis is bounded
// (see doc.go for the sum), so Run returns even when Redis is gone.
func (w *Worker) drain() {
	// 1. Stop fetching: the poller (its idle read unblocked at once), the reaper and the
	// scheduler end their pass in flight and stop. No more hand-offs: leave the
	// registrations now, and again once the loops are done, in case a claim in flight
	// registered again.
	fetching := stopAll(w.poller, w.reaper, w.scheduler)
	w.leave()
	w.state.Store(stateDraining)
	w.metrics.draining.Set(1)
	w.log.Info("worker: draining", "inflight", w.hold.inflight.Load(), "timeout_s", w.cfg.DrainTimeout.Seconds())
	<-fetching
	w.leave()

	// 2. Say so: the heartbeat reports "draining" (and keeps touching the entries of the
	// functions still running); the scheduler lock goes to a peer at once.
	w.heartbeat.write(context.Background())
	w.leader.release()

	// 3. Wait for running functions, up to the drain timeout (not at all after
	// StopAndCancel).
	gaveUp := !w.awaitFunctions()

	// 4. At the deadline: cancel running functions, give them cancelGrace, detach those
	// that ignore it, and hand every entry without an outcome back.
	if gaveUp {
		w.giveUp()
	}

	// 5. Close the pool: its executors end after their job (at most cancelGrace more
	// after a give-up: a function ignoring cancellation is left behind).
	w.pool.close()
	if gaveUp {
		waitTimeout(&w.pool.wg, cancelGrace)
	} else {
		w.pool.wg.Wait()
	}

	// 6. Record what finished: the completer flushes its batches (giving up after
	// completeGiveUp when Redis does not take them).
	w.completer.Stop()

	// 7. The final heartbeat: "stopped".
	w.heartbeat.Stop()
	w.heartbeat.final()

	// 8. The last event, the events flushed, the idle read's connection closed.
	w.publish(Event{Type: EventWorkerStopped, Detail: fmt.Sprintf("processed=%d failed=%d", w.processed.Load(), w.failed.Load())})
	w.events.Stop()
	w.poller.reader.Close()
	w.log.Info("worker: stopped")
}

// cancelable is a service whose context can be ended without waiting for its loop.
type cancelable interface {
	service.Service
	Cancel()
}

// stopAll stops the services at once and returns a channel closed when all have
// stopped. Every service's context has ended when it returns (what follows, the
// "draining" state, may let work in that no loop must claim); the waits run on
// goroutines of their own.
func stopAll(ss ...cancelable) <-chan struct{} {
	for _, s := range ss {
		s.Cancel()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// awaitFunctions waits until nothing runs, and reports false when the drain timeout
// (or a StopAndCancel) came first.
func (w *Worker) awaitFunctions() bool {
	deadline := time.NewTimer(w.cfg.DrainTimeout)
	defer deadline.Stop()
	for w.hold.inflight.Load() > 0 {
		select {
		case <-w.hold.slotFree:
		case <-deadline.C:
			return false
		case <-w.stop.hard:
			return false
		}
	}
	return true
}

// waitTimeout waits for wg at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// giveUp cancels running functions at the drain deadline and hands their entries back
// (idle = the visibility timeout, so a peer's next reaper pass takes them at once),
// without ACK. Functions that ignore cancellation are detached: their results are
// discarded.
func (w *Worker) giveUp() {
	w.log.Warn("worker: drain timeout, cancelling running functions", "inflight", w.hold.inflight.Load())
	w.pool.cancelRun()
	grace := time.NewTimer(cancelGrace)
	defer grace.Stop()
	for w.pool.running.Load() > 0 {
		select {
		case <-w.pool.execDone:
			continue
		case <-grace.C:
			w.log.Warn("worker: functions ignore cancellation; detaching them", "running", w.pool.running.Load())
		}
		break
	}
	// Everything still held now has no outcome to record: cancelled or detached,
	// or queued behind the pool and never started.
	w.handBack(w.hold.unrecorded())
}

// exitBound is the longest Run takes to return once the drain began, whether Redis
// answers or not: the bound of every step of drain, added up (doc.go states it).
// inFlight bounds one command already on the wire when its loop is stopped: go-redis
// does not abandon a command on the wire when its context is cancelled, so that is the
// client's own dial, write and read timeouts (a dead server's refused connection ends
// it at once).
func (w *Worker) exitBound(inFlight time.Duration) time.Duration {
	flushes := time.Duration(eventsBuffer/eventsBatch + 1) // the buffer, and the batch being flushed
	return w.cfg.DrainTimeout +
		// 1. the fetching loops' pass in flight (the reaper's reclaim has its own bound),
		// with the poller's hand-back of what its read delivered as it stopped; leave, twice
		max(inFlight, w.reaper.reclaimCallBound()) + touchBackTimeout + handBackTimeout +
		2*(leaveTimeout+touchBackTimeout+handBackTimeout) +
		// 2. the "draining" heartbeat, the lock's release
		w.heartbeat.writeTimeout() + leaderReleaseTimeout +
		// 4. the cancelled functions' grace, a heartbeat touch in flight, their
		// hand-back; 5. the executors' grace
		cancelGrace + touchPassWait + touchBackTimeout + cancelGrace +
		// 6. the completions: a failing call, then the give-up
		completeCallTimeout + completeGiveUp +
		// 7. the heartbeat's pass in flight, the final heartbeat
		inFlight + finalHeartbeatTimeout +
		// 8. the events still buffered
		flushes*eventsFlushTimeout
}
