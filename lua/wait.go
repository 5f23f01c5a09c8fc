package lua

import (
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed wait.lua
var waitSrc string

// Wait registers a waiter on a task until UntilMS and replies the task's status ("" when
// there is no such task), or, with UntilMS 0, ends the registration that lapses at
// EndMS (wait.lua).
var Wait = newScript("wait.lua", plain(waitSrc), waitKV, decodeWait)

// WaitArgs is one wait.lua call.
type WaitArgs struct {
	Queue   keys.Queue
	ID      string
	NowMS   int64
	UntilMS int64 // 0: end a registration
	EndMS   int64 // the registration to end (UntilMS 0)
}

func waitKV(a WaitArgs) ([]string, []any, error) {
	return []string{a.Queue.Waiters(), a.Queue.Task(a.ID)},
		[]any{a.ID, a.NowMS, a.UntilMS, strconv.FormatInt(a.EndMS, 10)}, nil
}

func decodeWait(a WaitArgs, cmd *redis.Cmd) (string, error) {
	s, err := cmd.Text()
	if err != nil {
		return "", fmt.Errorf("wait %s: %w", a.ID, err)
	}
	return s, nil
}
