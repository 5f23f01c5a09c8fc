package keys

// Status is a task's status: the status field of its record (PREFIX:{Q}:t:ID), as the
// scripts of lua/ write it. docs/data-model.md has the transitions and the script that
// makes each.
type Status string

// Task statuses.
const (
	StatusScheduled Status = "scheduled"
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusRetrying  Status = "retrying"
	StatusSucceeded Status = "succeeded"
	StatusDead      Status = "dead"
	StatusCancelled Status = "cancelled"
)

// Finished reports whether a task in status s has ended: succeeded, dead or cancelled.
// Only a requeue moves a dead task on.
func (s Status) Finished() bool {
	return s == StatusSucceeded || s == StatusDead || s == StatusCancelled
}
