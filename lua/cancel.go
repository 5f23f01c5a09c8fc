package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed cancel.lua
var cancelSrc string

// Cancel cancels a queued or scheduled task (cancel.lua): ErrNotFound when there is no
// such task, ErrWrongStatus when it is in another state.
var Cancel = newScript("cancel.lua", plain(cancelSrc), cancelKV, decodeCancel)

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
	ks := make([]string, 0, 14)
	ks = append(ks, h, q.Schedule())
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, u, q.Retrying())
	return ks, []any{keys.Group, a.NowMS, a.KeepMS, a.ID}, nil
}

func decodeCancel(a CancelArgs, cmd *redis.Cmd) (None, error) {
	code, status, err := pair(cmd)
	switch {
	case err != nil:
		return None{}, fmt.Errorf("cancel %s: %w", a.ID, err)
	case code == 1:
		return None{}, nil
	case code == notFound:
		return None{}, fmt.Errorf("cancel %s: %w", a.ID, ErrNotFound)
	default:
		return None{}, fmt.Errorf("cancel %s (status %s): %w", a.ID, status, ErrWrongStatus)
	}
}

// notFound is the code cancel.lua and requeue.lua return for a task that does not exist.
const notFound = -1
