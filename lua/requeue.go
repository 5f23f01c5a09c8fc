package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed requeue.lua
var requeueSrc string

// Requeue puts a dead task back on its stream with a fresh retry budget (requeue.lua)
// and replies its new entry: ErrNotFound when there is no such task, ErrWrongStatus when
// it is not dead or has nothing to run.
var Requeue = newScript("requeue.lua", plain(requeueSrc), requeueKV, decodeRequeue)

// RequeueArgs names the dead task to requeue at NowMS.
type RequeueArgs struct {
	Queue keys.Queue
	ID    string
	NowMS int64
}

func requeueKV(a RequeueArgs) ([]string, []any, error) {
	q := a.Queue
	ks := make([]string, 0, 12)
	ks = append(ks, q.Dead(), q.Task(a.ID))
	ks = append(ks, q.Streams[:]...)
	return ks, []any{keys.Group, a.NowMS, a.ID}, nil
}

func decodeRequeue(a RequeueArgs, cmd *redis.Cmd) (string, error) {
	code, text, err := pair(cmd)
	switch {
	case err != nil:
		return "", fmt.Errorf("requeue %s: %w", a.ID, err)
	case code == 1:
		return text, nil
	case code == notFound:
		return "", fmt.Errorf("requeue %s: %w", a.ID, ErrNotFound)
	default:
		return "", fmt.Errorf("requeue %s (%s): %w", a.ID, text, ErrWrongStatus)
	}
}
