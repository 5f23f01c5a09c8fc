package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event types published on the capped events stream.
const (
	EventWorkerStarted     = "WORKER_STARTED"
	EventWorkerStopped     = "WORKER_STOPPED"
	EventTaskStarted       = "TASK_STARTED"   // only with DTQ_EVENTS_VERBOSE
	EventTaskSucceeded     = "TASK_SUCCEEDED" // only with DTQ_EVENTS_VERBOSE
	EventTaskRetrying      = "TASK_RETRYING"
	EventTaskDead          = "TASK_DEAD"
	EventTaskReclaimed     = "TASK_RECLAIMED"
	EventDuplicateAbsorbed = "TASK_DUPLICATE_ABSORBED"
	EventInvalidEntry      = "TASK_INVALID_ENTRY"
	EventFenced            = "TASK_COMPLETION_FENCED"
	EventHandedBack        = "TASK_HANDED_BACK"
	EventHandoffRescued    = "TASK_HANDOFF_RESCUED"
	EventReturned          = "TASK_RETURNED_PAUSED" // delivered while its queue was paused, put back unstarted
	EventLeaderAcquired    = "SCHEDULER_LEADER_ACQUIRED"
	EventLeaderLost        = "SCHEDULER_LEADER_LOST"
	EventScheduled         = "TASKS_SCHEDULED"
	// WORKER_STALE is defined for observers; a worker never publishes it about itself.
	EventWorkerStale = "WORKER_STALE"
)

// Event is one lifecycle event.
type Event struct {
	Type    string
	Worker  string
	Queue   string
	TaskID  string
	Attempt int64
	Detail  string
	Time    time.Time
}

func (e Event) values() []any {
	v := []any{"type", e.Type, "worker", e.Worker, "ts", strconv.FormatInt(e.Time.UnixMilli(), 10)}
	if e.Queue != "" {
		v = append(v, "queue", e.Queue)
	}
	if e.TaskID != "" {
		v = append(v, "task", e.TaskID)
	}
	if e.Attempt != 0 {
		v = append(v, "attempt", strconv.FormatInt(e.Attempt, 10))
	}
	if e.Detail != "" {
		v = append(v, "detail", e.Detail)
	}
	return v
}

// events publishes lifecycle events best-effort: a bounded buffer flushed in pipelines
// by one goroutine, never blocking the worker. When the buffer is full, events are
// dropped and counted.
type events struct {
	rdb     redis.UniversalClient
	key     string
	maxLen  int64
	log     *slog.Logger
	observe func(Event)
	dropped func()

	mu        sync.RWMutex // guards closed against a publish racing close
	closed    bool
	ch        chan *Event
	done      chan struct{}
	startOnce sync.Once
}

func newEvents(rdb redis.UniversalClient, key string, maxLen int64, log *slog.Logger, observe func(Event), dropped func()) *events {
	e := &events{rdb: rdb, key: key, maxLen: maxLen, log: log, observe: observe, dropped: dropped,
		ch: make(chan *Event, 1024), done: make(chan struct{})}
	return e
}

// start starts the publisher (Run does; nothing starts in New, so a worker that is
// never run leaves no goroutine behind). Safe twice.
func (e *events) start() { e.startOnce.Do(func() { go e.loop() }) }

func (e *events) publish(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if e.observe != nil {
		e.observe(ev)
	}
	if e.maxLen <= 0 {
		return
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return
	}
	select {
	case e.ch <- &ev:
	default:
		e.dropped()
	}
}

func (e *events) loop() {
	defer close(e.done)
	batch := make([]*Event, 0, 256)
	for ev := range e.ch {
		batch = append(batch[:0], ev)
	more:
		for len(batch) < cap(batch) {
			select {
			case ev, ok := <-e.ch:
				if !ok {
					break more
				}
				batch = append(batch, ev)
			default:
				break more
			}
		}
		e.flush(batch)
	}
}

func (e *events) flush(batch []*Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ev := range batch {
			p.XAdd(ctx, &redis.XAddArgs{Stream: e.key, MaxLen: e.maxLen, Approx: true, Values: ev.values()})
		}
		return nil
	})
	if err != nil {
		e.log.Warn("events: publish failed", "err", err, "dropped", len(batch))
	}
}

// close flushes what is buffered and stops the publisher; safe twice.
func (e *events) close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
	e.mu.Unlock()
	e.start() // a publisher never started flushes what was buffered and ends
	<-e.done
}
