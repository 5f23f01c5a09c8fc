package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/service"
)

// EventType names a lifecycle event; its value is the "type" field on the events stream.
// It is keys.EventType, so that packages that must not import the runtime (the
// observer) name the same types.
type EventType = keys.EventType

// Event types published on the capped events stream (keys names them).
const (
	EventWorkerStarted     = keys.EventWorkerStarted
	EventWorkerStopped     = keys.EventWorkerStopped
	EventTaskStarted       = keys.EventTaskStarted   // only with DTQ_EVENTS_VERBOSE
	EventTaskSucceeded     = keys.EventTaskSucceeded // only with DTQ_EVENTS_VERBOSE
	EventTaskRetrying      = keys.EventTaskRetrying
	EventTaskDead          = keys.EventTaskDead
	EventTaskCancelled     = keys.EventTaskCancelled
	EventTaskReclaimed     = keys.EventTaskReclaimed
	EventDuplicateAbsorbed = keys.EventDuplicateAbsorbed
	EventInvalidEntry      = keys.EventInvalidEntry
	EventFenced            = keys.EventFenced
	EventHandedBack        = keys.EventHandedBack
	EventHandoffRescued    = keys.EventHandoffRescued
	EventReturned          = keys.EventReturned // delivered while its queue was paused, put back unstarted
	EventLeaderAcquired    = keys.EventLeaderAcquired
	EventLeaderLost        = keys.EventLeaderLost
	EventScheduled         = keys.EventScheduled
	EventDeadTrimmed       = keys.EventDeadTrimmed // retention.go
	EventCronFired         = keys.EventCronFired   // cron.go
	EventCronMissed        = keys.EventCronMissed  // cron.go
	// WORKER_STALE is published by observers; a worker never publishes it about itself.
	EventWorkerStale = keys.EventWorkerStale
)

// Event is one lifecycle event.
type Event struct {
	Type    EventType
	Worker  string
	Queue   string
	TaskID  string
	Attempt int64
	Detail  string
	Time    time.Time
}

func (e Event) values() []any {
	v := []any{keys.EventFieldType, string(e.Type), keys.EventFieldWorker, e.Worker,
		keys.EventFieldTS, strconv.FormatInt(e.Time.UnixMilli(), 10)}
	if e.Queue != "" {
		v = append(v, keys.EventFieldQueue, e.Queue)
	}
	if e.TaskID != "" {
		v = append(v, keys.EventFieldTask, e.TaskID)
	}
	if e.Attempt != 0 {
		v = append(v, keys.EventFieldAttempt, strconv.FormatInt(e.Attempt, 10))
	}
	if e.Detail != "" {
		v = append(v, keys.EventFieldDetail, e.Detail)
	}
	return v
}

// events publishes lifecycle events best-effort: a bounded buffer flushed in pipelines
// by one goroutine, never blocking the worker. When the buffer is full, events are
// dropped and counted. Events published before Start wait in the buffer; Stop flushes
// what is buffered (itself, when the publisher never started) and ends the publisher.
type events struct {
	service.Base
	rdb     redis.UniversalClient
	key     string
	maxLen  int64
	log     *slog.Logger
	observe func(Event)
	dropped func()

	mu     sync.RWMutex // guards closed against a publish racing Stop
	closed bool
	ch     chan *Event
}

func newEvents(rdb redis.UniversalClient, key string, maxLen int64, log *slog.Logger, observe func(Event), dropped func()) *events {
	return &events{rdb: rdb, key: key, maxLen: maxLen, log: log, observe: observe, dropped: dropped,
		ch: make(chan *Event, eventsBuffer)}
}

// The events buffer, and the most events one flush (one pipeline) sends.
const (
	eventsBuffer = 1024
	eventsBatch  = 256
)

// Start starts the publisher (Run does; nothing starts in New, so a worker that is
// never run leaves no goroutine behind).
func (e *events) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.ch, e.closed = make(chan *Event, eventsBuffer), false
	}
	ch := e.ch
	e.mu.Unlock()
	e.Go(ctx, func(context.Context) { e.loop(ch) })
	return nil
}

// Stop flushes what is buffered and ends the publisher; idempotent, safe before Start.
func (e *events) Stop() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
	ch := e.ch
	e.mu.Unlock()
	e.Base.Stop()
	e.loop(ch) // a publisher never started: flush here (a closed, drained channel: nothing)
}

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

func (e *events) loop(ch chan *Event) { inBatches(ch, eventsBatch, e.flush) }

func (e *events) flush(batch []*Event) {
	ctx, cancel := context.WithTimeout(context.Background(), eventsFlushTimeout)
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

// eventsFlushTimeout bounds one flush of the events buffer.
const eventsFlushTimeout = 2 * time.Second
