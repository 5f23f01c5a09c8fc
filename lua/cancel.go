package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed cancel.lua
var cancelSrc string

// Cancel cancels a queued, scheduled or retrying task, or asks a running one to stop
// (cancel.lua): ErrNotFound when there is no such task, ErrWrongStatus when it has
// ended.
var Cancel = newScript("cancel.lua", plain(cancelSrc), cancelKV, decodeCancel)

// CancelOutcome is what a cancel did.
type CancelOutcome string

// Outcomes of a cancel.
const (
	// CancelDone: the task was queued, scheduled or retrying; it is cancelled.
	CancelDone CancelOutcome = "cancelled"
	// CancelRequested: the task was running; its worker cancels the function's context
	// at its next heartbeat, and the task ends cancelled unless it finished first.
	CancelRequested CancelOutcome = "requested"
)

// CancelArgs names the task to cancel, at NowMS; it is kept KeepMS (0: for ever).
type CancelArgs struct {
	Queue  keys.Queue
	ID     string
	Unique string // the task's unique key, "" for none
	NowMS  int64
	KeepMS int64
}

func cancelKV(a CancelArgs) ([]string, []any, error) {
	q := a.Queue
	h := q.Task(a.ID)
	u := h
	if a.Unique != "" {
		u = q.Unique(a.Unique)
	}
	ks := make([]string, 0, 15)
	ks = append(ks, h, q.Schedule())
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, u, q.Retrying(), q.Waiters())
	return ks, []any{keys.Group, a.NowMS, a.KeepMS, a.ID}, nil
}

func decodeCancel(a CancelArgs, cmd *redis.Cmd) (CancelOutcome, error) {
	code, status, err := pair(cmd)
	switch {
	case err != nil:
		return "", fmt.Errorf("cancel %s: %w", a.ID, err)
	case code == 1:
		return CancelDone, nil
	case code == 2:
		return CancelRequested, nil
	case code == notFound:
		return "", fmt.Errorf("cancel %s: %w", a.ID, ErrNotFound)
	default:
		return "", fmt.Errorf("cancel %s (status %s): %w", a.ID, status, ErrWrongStatus)
	}
}

// notFound is the code cancel.lua and requeue.lua return for a task that does not exist.
const notFound = -1
