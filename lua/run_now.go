package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed run_now.lua
var runNowSrc string

// RunNow puts a scheduled or retrying task on its stream now (run_now.lua) and replies
// its new entry: ErrNotFound when there is no such task, ErrWrongStatus when it is in
// another state.
var RunNow = newScript("run_now.lua", plain(runNowSrc), runNowKV, decodeRunNow)

// RunNowArgs names the task to run now, at NowMS.
type RunNowArgs struct {
	Queue keys.Queue
	ID    string
	NowMS int64
}

func runNowKV(a RunNowArgs) ([]string, []any, error) {
	q := a.Queue
	ks := make([]string, 0, 14)
	ks = append(ks, q.Task(a.ID), q.Schedule(), q.Claimed(), q.Retrying())
	ks = append(ks, q.Streams[:]...)
	return ks, []any{keys.Group, a.NowMS, a.ID}, nil
}

func decodeRunNow(a RunNowArgs, cmd *redis.Cmd) (string, error) {
	code, text, err := pair(cmd)
	switch {
	case err != nil:
		return "", fmt.Errorf("run now %s: %w", a.ID, err)
	case code == 1:
		return text, nil
	case code == notFound:
		return "", fmt.Errorf("run now %s: %w", a.ID, ErrNotFound)
	default:
		return "", fmt.Errorf("run now %s (status %s): %w", a.ID, text, ErrWrongStatus)
	}
}
