package keys

// EventType names a lifecycle event: the "type" field of an entry of the events stream
// (Space.Events). Workers publish them (runtime); observers read them and publish
// WORKER_STALE.
type EventType string

// Event types of the events stream.
const (
	EventWorkerStarted EventType = "WORKER_STARTED"
	EventWorkerStopped EventType = "WORKER_STOPPED"
	EventTaskStarted   EventType = "TASK_STARTED"   // only with DTQ_EVENTS_VERBOSE
	EventTaskSucceeded EventType = "TASK_SUCCEEDED" // only with DTQ_EVENTS_VERBOSE
	EventTaskRetrying  EventType = "TASK_RETRYING"
	EventTaskDead      EventType = "TASK_DEAD"
	// EventTaskCancelled: a running task stopped on a cancel request (detail: the
	// function's error).
	EventTaskCancelled     EventType = "TASK_CANCELLED"
	EventTaskReclaimed     EventType = "TASK_RECLAIMED"
	EventDuplicateAbsorbed EventType = "TASK_DUPLICATE_ABSORBED"
	EventInvalidEntry      EventType = "TASK_INVALID_ENTRY"
	EventFenced            EventType = "TASK_COMPLETION_FENCED"
	EventHandedBack        EventType = "TASK_HANDED_BACK"
	EventHandoffRescued    EventType = "TASK_HANDOFF_RESCUED"
	EventReturned          EventType = "TASK_RETURNED_PAUSED" // delivered while its queue was paused, put back unstarted
	EventLeaderAcquired    EventType = "SCHEDULER_LEADER_ACQUIRED"
	EventLeaderLost        EventType = "SCHEDULER_LEADER_LOST"
	EventScheduled         EventType = "TASKS_SCHEDULED"
	EventDeadTrimmed       EventType = "DEAD_TASKS_TRIMMED" // detail: how many
	// EventCronFired: a periodic entry's tick created its task (task: its id; detail:
	// the entry).
	EventCronFired EventType = "CRON_FIRED"
	// EventCronMissed: an entry's ticks fell due while no worker ran, beyond the
	// lateness bound (detail: the entry and its missed policy, once or skip).
	EventCronMissed EventType = "CRON_MISSED"
	// EventWorkerStale is published by the observers' stale watcher (stale.lua), once
	// per worker going stale; a worker never publishes it about itself.
	EventWorkerStale EventType = "WORKER_STALE"
)

// Fields of an entry of the events stream, in the order a worker writes them.
const (
	EventFieldType    = "type"
	EventFieldWorker  = "worker"
	EventFieldTS      = "ts" // unix ms
	EventFieldQueue   = "queue"
	EventFieldTask    = "task"
	EventFieldAttempt = "attempt"
	EventFieldDetail  = "detail"
)
